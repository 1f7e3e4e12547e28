"""A large recording opened, not read: the first answer and `view --unit` through the index, against a whole read.

One recording of `--pins` pins (about 450 bytes a line, 10 pins a unit) is written with its index. Then, each
measured in the same run, in the same process, the file warm in the page cache:

- baseline: reading the recording's bytes whole (`Path.read_bytes`), the floor of any whole read;
- first answer, indexed: `ReplayPins.from_recording` then one `resolve` of a key in the middle of the file;
- first answer, whole read: the same with the index moved aside (what every recording cost before the index);
- `view --unit`, indexed and whole: `anagrapheus view --unit U` writing the page of one unit of 10 pins.

The aims are the issue's (#43 item 5): the first answer of a 1,000,000-pin recording in under 2 s, and
`view --unit` reading only its unit (so its time does not grow with the file). Absolute times are printed
because the aim is stated in seconds; the ratios are the claim on a shared machine.

    python benchmarks/large_recording.py --pins 1000000   # the issue's size: about 480 MB, minutes to write
    python benchmarks/large_recording.py                  # 100,000 pins
    python benchmarks/large_recording.py --quick          # smoke test: 2,000 pins
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from _measure import machine_line

from anagrapheus.cli import main as cli
from anagrapheus.timeline import JSONValue, PinPromoted, ReplayPins, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording
from anagrapheus.timeline.recording.index import index_path

HEADER = RecordingHeader(
    description="benchmark", recorded_with="synthetic pins", rerecord="benchmarks/large_recording.py"
)
PINS_PER_UNIT = 10


def _key(n: int) -> str:
    return f"p1:model_call:{n:064x}"


def pins(count: int) -> Iterator[StoredEvent]:
    """`count` small model-call-shaped pins, 10 to a unit, each with its own key."""
    for n in range(1, count + 1):
        unit = f"unit-{(n - 1) // PINS_PER_UNIT}"
        raw = {
            "kind": "response",
            "model_name": "gpt-4o-mini",
            "parts": [{"part_kind": "text", "content": f"Round {n}: the quota holds at {n % 977} t."}],
            "usage": {"input_tokens": 812 + n % 100, "output_tokens": 96},
        }
        payload = PinPromoted(
            unit_id=unit,
            key=_key(n),
            kind="model_call",
            raw=raw,
            attempts=1,
            fingerprint={"messages[0]": f"{n:016x}", "settings": f"{n * 31:016x}"},
        )
        yield StoredEvent(
            seq=n,
            event_id=f"00000000-0000-7000-8000-{n:012d}",
            namespace="anagrapheus",
            type="pin_promoted",
            schema_version=PinPromoted.schema_version,
            causation_id=None,
            correlation_id=unit,
            created_at="2026-01-05T09:00:00.000000Z",
            payload=payload.model_dump_json(),
        )


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _best(work: Callable[[], object], rounds: int) -> float:
    return min(_timed(work) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pins", type=int, default=100_000, help="pins in the recording (default 100,000)")
    parser.add_argument("--quick", action="store_true", help="2,000 pins, one round: checks the script runs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measure; the best is kept (default 3)")
    args = parser.parse_args()
    count, rounds = (2_000, 1) if args.quick else (args.pins, args.rounds)
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        path, page = Path(tmp) / "run.jsonl", Path(tmp) / "unit.html"
        index, aside = index_path(path), Path(tmp) / "aside.index"
        written = _timed(
            lambda: write_recording(path, pins(count), header=HEADER, index=True, dangerously_keep_secrets=True)
        )
        middle = count // 2
        unit = f"unit-{(middle - 1) // PINS_PER_UNIT}"
        size = path.stat().st_size
        print(
            f"recording: {count:,} pins, {size:,} bytes ({size / count:.0f} a pin), written with its index"
            f" ({index.stat().st_size:,} bytes) in {written:.1f} s\n"
        )

        def first_answer() -> None:
            replay = ReplayPins.from_recording(path)
            answer: JSONValue = replay.resolve(
                _key(middle), kind="model_call", effect=lambda: None, interpret=lambda value: value
            )
            assert isinstance(answer, dict)

        def view_unit() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli(["view", str(path), "--unit", unit, "-o", str(page)]) == 0

        baseline = _best(path.read_bytes, rounds)
        indexed_answer = _best(first_answer, rounds)
        indexed_view = _best(view_unit, rounds)
        index.rename(aside)
        try:
            whole_answer = _best(first_answer, rounds)
            whole_view = _best(view_unit, rounds)
        finally:
            aside.rename(index)
        rows = [
            ("baseline: read the recording's bytes whole", baseline, None),
            ("first answer, indexed (open + 1 resolve)", indexed_answer, "< 2 s at 1,000,000 pins"),
            ("first answer, whole read (no index)", whole_answer, None),
            (f"view --unit (1 unit of {PINS_PER_UNIT} pins), indexed", indexed_view, "reads only its unit"),
            ("view --unit, whole read (no index)", whole_view, None),
        ]
        print(f"{'measure (best of ' + str(rounds) + ')':<50} {'time':>10} {'/ baseline':>11}  aim")
        for name, seconds, aim in rows:
            print(f"{name:<50} {seconds:>9.3f}s {seconds / baseline:>10.2f}x  {aim or ''}")
        print(
            f"\nfirst answer: indexed / whole read {indexed_answer / whole_answer:.4f}x;"
            f" view --unit: indexed / whole read {indexed_view / whole_view:.4f}x"
        )
        verdict = "met" if indexed_answer < 2.0 else "NOT met"
        print(f"aim (first answer < 2 s): {indexed_answer:.3f} s, {verdict} at {count:,} pins")


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        main()
