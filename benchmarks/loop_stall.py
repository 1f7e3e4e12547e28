"""How long a ledger's SQLite writes (synchronous=FULL) stall the event loop, on the loop and off it.

A ticker task sleeps 0.5 ms at a time and sums how late it wakes (lateness over 1 ms) while a
coroutine draws fresh keys. The
baseline writes each draw's scratch row on the loop's thread (what `aresolve` did before it moved its
store work to a worker thread); the variant draws through `aresolve` as it is now. Rounds alternate
the two and the figures are medians over rounds, as ratios to the baseline of the same round.

    python benchmarks/loop_stall.py            # 7 rounds of 40 draws
    python benchmarks/loop_stall.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_key


async def ticker(stop: asyncio.Event, gaps: list[float]) -> None:
    # A ticker that sleeps, as an application's other tasks mostly do; one that spun on sleep(0) would
    # fight the worker thread for the GIL and measure that instead.
    while not stop.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(TICK)
        gaps.append(time.perf_counter() - asked - TICK)


async def on_the_loop(store: SQLiteEventStore, unit: str, draws: int) -> None:
    for i in range(draws):
        await asyncio.sleep(0)  # the effect
        store.scratch_put(unit, pin_key("model_call", {"i": i}), kind="model_call", raw='"x"', fingerprint=None)


async def through_aresolve(ledger: PinLedger, draws: int) -> None:
    async def effect() -> str:
        await asyncio.sleep(0)
        return "x"

    for i in range(draws):
        await ledger.aresolve(pin_key("model_call", {"i": i}), kind="model_call", effect=effect, interpret=str)


TICK = 0.0005
"""How long the ticker sleeps between turns."""
STALL = 0.001
"""A turn later than this counts as the loop being stalled."""


async def measure(variant: str, store: SQLiteEventStore, types: EventTypeRegistry, draws: int) -> tuple[float, float]:
    """Return (seconds the loop was stalled per draw, in gaps over `STALL`; seconds for all draws)."""
    gaps: list[float] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(stop, gaps))
    ledger = PinLedger(store, types)
    started = time.perf_counter()
    if variant == "on the loop":
        await on_the_loop(store, ledger.unit_id, draws)
    else:
        await through_aresolve(ledger, draws)
    elapsed = time.perf_counter() - started
    stop.set()
    await tick
    ledger.abandon(reason="benchmark round over")
    return sum(gap for gap in gaps if gap > STALL) / draws, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (a smoke test)")
    args = parser.parse_args()
    rounds, draws = (1, 5) if args.quick else (7, 40)
    print(f"benchmarks/loop_stall.py  python {platform.python_version()} on {sys.platform}, {draws} draws x {rounds}")
    stall_ratios: list[float] = []
    time_ratios: list[float] = []
    stalls: dict[str, list[float]] = {"on the loop": [], "aresolve": []}
    types = EventTypeRegistry()
    with tempfile.TemporaryDirectory() as tmp, SQLiteEventStore(Path(tmp) / "bench.db", synchronous="FULL") as store:
        for round_no in range(rounds):
            order = ["on the loop", "aresolve"] if round_no % 2 == 0 else ["aresolve", "on the loop"]
            figures = {variant: asyncio.run(measure(variant, store, types, draws)) for variant in order}
            for variant, (stall, _) in figures.items():
                stalls[variant].append(stall)
            # A round whose baseline never stalled (a disk that syncs at once) has no ratio to give.
            if figures["on the loop"][0] > 0:
                stall_ratios.append(figures["aresolve"][0] / figures["on the loop"][0])
            time_ratios.append(figures["aresolve"][1] / figures["on the loop"][1])
    for variant, values in stalls.items():
        print(f"  loop stalled per draw, {variant:12}  median {statistics.median(values) * 1000:8.3f} ms")
    if stall_ratios:
        print(f"  stall ratio   aresolve / on the loop   median {statistics.median(stall_ratios):.3f}")
    else:
        print("  stall ratio   aresolve / on the loop   n/a: the baseline never stalled the loop")
    print(f"  time ratio    aresolve / on the loop   median {statistics.median(time_ratios):.3f}")


if __name__ == "__main__":
    main()
