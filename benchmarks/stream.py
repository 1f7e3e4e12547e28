"""A streamed pin's chunk boundaries: what they cost in bytes, and how fast a 1,000-delta stream replays.

Size: a stream of N deltas (words of a few letters, one per delta) pinned with its boundaries, against the same
pin without them (the form a stream was pinned in before #45); the added bytes per 100 deltas is the figure.
Time: `run_stream` reading every delta of a 1,000-delta stream, replayed from its pin (strict, the model never
called), against the same stream live and unpinned from a `FunctionModel`, which has no network to wait for: the
ratio is the replay's cost over the cheapest live stream there is, measured in the same rounds.

    python benchmarks/stream.py            # 9 rounds of 5 streams
    python benchmarks/stream.py --quick    # smoke test
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import Variant, compare, machine_line, options, print_table, use_options
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.provider.stream import CHUNKS
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

PROMPT = "Read the shipping forecast."
WORDS = ("Viking ", "North ", "Utsire ", "south ", "westerly ", "five ", "to ", "seven, ", "rain, ", "good. ")


def streaming(deltas: int) -> FunctionModel:
    async def forecast(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for i in range(deltas):
            yield WORDS[i % len(WORDS)]

    return FunctionModel(stream_function=forecast, model_name=f"forecast-{deltas}")


async def read_stream(agent: Agent[None, str]) -> int:
    async with agent.run_stream(PROMPT) as streamed:
        return len([delta async for delta in streamed.stream_text(delta=True, debounce_by=None)])


def pinned_text(deltas: int, folder: Path) -> tuple[int, int]:
    """The bytes of a stream's pin as stored, with its boundaries and without them."""
    with SQLiteEventStore(folder / f"size-{deltas}.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        asyncio.run(read_stream(Agent(streaming(deltas), capabilities=[Pinning(ledger)])))
        (pin,) = [pin for pin in ledger.pins() if pin.kind == "model_call"]
        raw = json.loads(pin.raw_text)
        ledger.abandon(reason="measured")
    without = {name: value for name, value in raw.items() if name != CHUNKS}
    entries = len(raw[CHUNKS]) if CHUNKS in raw else 0
    assert entries >= deltas, f"the pin kept {entries} boundaries for {deltas} deltas"
    return len(pin.raw_text.encode()), len(json.dumps(without, ensure_ascii=False, separators=(",", ":")).encode())


def main() -> None:
    args = options(__doc__.splitlines()[0], rounds=9).parse_args()
    rounds = use_options(args)
    deltas, streams = (50, 1) if args.quick else (1_000, 5)
    print(f"benchmarks/stream.py  {machine_line()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("\nSize of a streamed pin (bytes), with its chunk boundaries and without (as before #45)")
        for n in (100, deltas) if deltas != 100 else (100,):
            with_chunks, without = pinned_text(n, folder)
            per_100 = (with_chunks - without) * 100 / n
            print(
                f"  {n:>5} deltas: {without:>8,} without, {with_chunks:>8,} with: +{per_100:,.0f} bytes per 100 deltas"
            )

        types = EventTypeRegistry()
        with SQLiteEventStore(folder / "replay.db") as store:
            ledger = PinLedger(store, types)
            asyncio.run(read_stream(Agent(streaming(deltas), capabilities=[Pinning(ledger)])))
            ledger.commit()

            def live(n: int) -> float:
                return _timed([Agent(streaming(deltas)) for _ in range(n)])

            def replayed(n: int) -> float:
                # A replay per run, built before the clock starts: each replays the recording's one run.
                pinned = [Pinning(ReplayPins.from_store(store, types)) for _ in range(n)]
                return _timed([Agent(streaming(deltas), capabilities=[pinning]) for pinning in pinned])

            rows = compare(
                Variant("live, unpinned (FunctionModel)", live),
                [Variant("replayed from its pin", replayed)],
                n=streams,
                rounds=rounds,
            )
        print_table(
            f"run_stream reading {deltas:,} deltas (stream_text(delta=True, debounce_by=None))",
            "the same stream live and unpinned",
            rows,
        )


def _timed(agents: list[Agent[None, str]]) -> float:
    """Seconds to read each agent's stream to its end, one after another."""
    started = time.perf_counter()
    for agent in agents:
        assert asyncio.run(read_stream(agent)) > 0
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
