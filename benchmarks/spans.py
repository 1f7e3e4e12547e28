"""What pin spans cost when no tracer provider is set, as a ratio to the same replay without them, in one run.

- baseline: `ReplayPins.resolve` answering 1,000 keys, with the span code replaced by `contextlib.nullcontext`
  (what the resolve would cost if it had no spans at all, but for one `with`).
- spans, no provider: the package as shipped with OpenTelemetry's API only (no SDK provider set): each resolve
  asks the API for the global provider, finds its proxy and makes no span.
- spans, a provider: an SDK `TracerProvider` with no exporter, for scale: what a traced resolve costs.

    python benchmarks/spans.py            # five rounds
    python benchmarks/spans.py --quick    # smoke test
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _measure import Variant, compare, machine_line, options, print_table, use_options
from opentelemetry.sdk.trace import TracerProvider

import anagrapheus.timeline.resolving.replay as replay_module
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.tracing import PinSpan, traced_to

_NO_SPAN = contextlib.nullcontext(PinSpan(None))


def main() -> None:
    parser = options(__doc__ or "", rounds=5)
    args = parser.parse_args()
    rounds = use_options(args)
    count = 50 if args.quick else 1_000
    print(machine_line())
    types = EventTypeRegistry()
    with tempfile.TemporaryDirectory() as tmp, SQLiteEventStore(Path(tmp) / "run.db") as store:
        ledger = PinLedger(store, types)
        keys = [f"p1:tool_call:{n:064x}" for n in range(count)]
        for key in keys:
            ledger.resolve(key, kind="tool_call", effect=lambda: {"tonnes": 39400}, interpret=lambda raw: raw)
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)

        def answering(n: int) -> None:
            for _ in range(n):
                for key in keys:
                    replay.resolve(key, kind="tool_call", effect=_never, interpret=_same)

        def timed(prepare: Callable[[], Any]) -> Callable[[int], float]:
            def sample(n: int) -> float:
                import time

                with prepare():
                    started = time.perf_counter()
                    answering(n)
                    return time.perf_counter() - started

            return sample

        real = replay_module.pin_span

        @contextlib.contextmanager
        def without_spans() -> Any:
            replay_module.pin_span = lambda *a, **k: _NO_SPAN  # pyright: ignore[reportAttributeAccessIssue]
            try:
                yield
            finally:
                replay_module.pin_span = real

        baseline = Variant("resolve with no span code (nullcontext)", timed(without_spans))
        shipped = Variant("resolve as shipped, no tracer provider", timed(contextlib.nullcontext))
        provider = TracerProvider()
        traced = Variant("resolve with an SDK provider (no exporter)", timed(lambda: traced_to(provider)))
        rows = compare(baseline, [shipped, traced], n=3, rounds=rounds)
    print_table(f"answering {count:,} keys from a replay, 3 times a sample", baseline.name, rows)


def _never() -> object:
    raise AssertionError("a replay drew")


def _same(raw: Any) -> Any:
    return raw


if __name__ == "__main__":
    main()
