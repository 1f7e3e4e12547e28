"""The cost of the secret scan when writing a recording, as ratios to a write without it measured in the same run.

- baseline: `write_recording(..., dangerously_keep_secrets=True)`: canonical JSON of every line,
  the file written, fsynced and renamed; no scan.
- scan: the default write, every line searched for every default rule and the environment's
  secret-looking values (none match: the common case).
- redact: the same with `redact=SecretScanner()` as well (a second search of every line).

The pins are model-call-shaped: a response of about 1.5 kB with multi-line text (JSON escapes),
non-ASCII text, a tool call and a 20-field fingerprint.

    python benchmarks/recording.py            # 10,000 pins per write, five rounds
    python benchmarks/recording.py --long     # more rounds
    python benchmarks/recording.py --quick    # smoke test: tiny sizes, one round
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from _measure import Variant, compare, machine_line, options, print_rates, print_table, repeated, use_options

from anagrapheus.timeline import PinPromoted, SecretScanner, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording

HEADER = RecordingHeader(description="benchmark", recorded_with="synthetic pins", rerecord="benchmarks/recording.py")


def pins(count: int) -> list[StoredEvent]:
    """`count` model-call-shaped pins, each with its own key and text."""
    events: list[StoredEvent] = []
    for n in range(1, count + 1):
        raw = {
            "kind": "response",
            "model_name": "gpt-4o-mini",
            "provider_name": "openai",
            "provider_url": "https://api.openai.com/v1",
            "parts": [
                {"part_kind": "text", "content": f"Round {n}: the UK holds firm.\nQuota «{n % 97}» t, 北海.\n" * 12},
                {"part_kind": "tool-call", "tool_name": "stock_survey", "args": '{"species": "cod", "year": 2026}'},
            ],
            "usage": {"input_tokens": 812 + n, "output_tokens": 96},
            "finish_reason": "stop",
        }
        payload = PinPromoted(
            unit_id=f"round-{n % 10}",
            key=f"p1:model_call:{n:064x}",
            kind="model_call",
            raw=raw,
            attempts=1,
            fingerprint={f"messages[{i}]": f"{(n * 31 + i):016x}" for i in range(20)},
        )
        events.append(
            StoredEvent(
                seq=n,
                event_id=f"00000000-0000-7000-8000-{n:012d}",
                namespace="anagrapheus",
                type="pin_promoted",
                schema_version=1,
                causation_id=None,
                correlation_id=f"round-{n % 10}",
                created_at="2026-01-05T09:00:00.000000Z",
                payload=payload.model_dump_json(),
            )
        )
    return events


def prepared(description: str) -> tuple[int, list[StoredEvent]]:
    """A pins benchmark's options parsed and machine line printed: the rounds, and 10,000 pins (50 with --quick)."""
    args = options(description, rounds=5).parse_args()
    rounds = use_options(args)
    events = pins(50 if args.quick else 10_000)
    print(machine_line())
    return rounds, events


def main() -> None:
    rounds, events = prepared(__doc__ or "")
    count = len(events)
    print(f"{count:,} pins per write, {sum(len(e.payload) for e in events) / count:,.0f} bytes of payload each")
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "run.jsonl"
        policy = SecretScanner()

        def sample(**options: object) -> Callable[[int], float]:
            # No index: the figure is the scan's cost (an index adds about 16% at 10,000 of these pins to both sides).
            return repeated(lambda: write_recording(target, events, header=HEADER, index=False, **options))  # pyright: ignore[reportArgumentType]

        baseline = Variant("write, no scan (dangerously_keep_secrets)", sample(dangerously_keep_secrets=True))
        scanned = Variant("write with the default scan", sample())
        redacted = Variant("write with redact=SecretScanner() and the scan", sample(redact=policy))
        rows = compare(baseline, [scanned, redacted], n=1, rounds=rounds)
    print_table(f"writing a recording of {count:,} pins", baseline.name, rows)
    print()
    print_rates(rows, items=count, unit="pins")


if __name__ == "__main__":
    main()
