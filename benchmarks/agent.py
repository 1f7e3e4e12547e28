"""Agent runs under pinning, as ratios to the same agent on a bare FunctionModel, and pins vs an HTTP cassette.

Part "runs": one agent run (a tool call, then an answer: two model requests) on a bare async
`FunctionModel`, under strict replay (`PinnedModel` + `ReplayPins`, and the `Pinning` capability,
which pins the tool call and the run's id and times too; its recording holds as many runs as are
replayed, since a run's id and times are pinned at its position in the unit) and under live
recording (`PinnedModel` + a fresh `PinLedger` per run), with no history and continuing a
200-message history. Part "cassette": the same three-turn conversation replayed through pins and
through a vcrpy cassette of an OpenAI-compatible model (`OpenAIChatModel`), both recorded in this
run against a scripted server on 127.0.0.1 that is stopped before anything is replayed.

Variants run interleaved in rounds; each figure is the median over rounds of the variant's time
divided by the baseline's time in the same round. Setup (agents, ledgers, opening the cassette,
building `ReplayPins`) is outside the timed part.

    python benchmarks/agent.py            # default, well under a minute
    python benchmarks/agent.py --long     # more rounds
    python benchmarks/agent.py --quick    # smoke test: one round of a few runs
    python benchmarks/agent.py --part runs|cassette
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from _measure import Aim, Variant, compare, machine_line, options, print_table, use_options
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel, Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

HISTORY_TURNS = 50  # four messages a turn: 200 messages
SYNCHRONOUS: list[Literal["FULL", "NORMAL"]] = ["FULL"]  # the stores' setting, from --synchronous
TURNS = ("Which treaty governs fisheries?", "And who enforces it?", "Summarise both answers.")


# A real, priced model name: pydantic-ai estimates each response's cost from a price table on both
# paths, as it would for a cassette of a real OpenAI run. (An unknown name makes every lookup a
# failed scan of the whole table, on both sides.)
STUB_MODEL = os.environ.get("ANAGRAPHEUS_BENCH_MODEL", "gpt-4o-mini")


def lookup(topic: str) -> str:
    """Look a topic up in the (pure, unpinned) record."""
    return f"fact about {topic}"


class Scripted:
    """The scripted model: call `lookup` on a new user prompt, answer once the tool has returned; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return ModelResponse(parts=[TextPart(f"The record says {part.content}.")])
        prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": str(prompt)[:40]})])


def agent_on(model: Model | None) -> Agent[None, str]:
    return Agent(model, tools=[lookup])


async def conversation(agent: Agent[None, str], *, model: Model | None = None) -> list[str]:
    """The three-turn conversation; returns each turn's output."""
    history: list[ModelMessage] | None = None
    outputs: list[str] = []
    for prompt in TURNS:
        result = await agent.run(prompt, message_history=history, model=model)
        history = result.all_messages()
        outputs.append(result.output)
    return outputs


@dataclass
class Pins:
    """A registry and a store to record into."""

    types: EventTypeRegistry
    store: SQLiteEventStore

    @classmethod
    def open(cls, path: Path) -> Pins:
        types = EventTypeRegistry()
        return cls(types, SQLiteEventStore(path, synchronous=SYNCHRONOUS[0]))

    def ledger(self) -> PinLedger:
        return PinLedger(self.store, self.types)

    def replay(self) -> ReplayPins:
        return ReplayPins.from_events(self.store.read(), self.types)


def build_history(loop: asyncio.AbstractEventLoop) -> list[ModelMessage]:
    agent = agent_on(FunctionModel(Scripted(), model_name="history-writer"))
    history: list[ModelMessage] = []

    async def grow() -> None:
        nonlocal history
        for turn in range(HISTORY_TURNS):
            result = await agent.run(f"Earlier question number {turn} about the negotiation", message_history=history)
            history = result.all_messages()

    loop.run_until_complete(grow())
    assert len(history) == 4 * HISTORY_TURNS, len(history)
    return history


def runs_part(loop: asyncio.AbstractEventLoop, root: Path, *, n: int, rounds: int) -> None:
    """Bare FunctionModel vs replay vs live recording, without and with a 200-message history."""
    history = build_history(loop)
    one_run(loop, root, "no history", None, n=n, rounds=rounds)
    one_run(loop, root, f"continuing a {len(history)}-message history", history, n=n, rounds=rounds)


def one_run(
    loop: asyncio.AbstractEventLoop,
    root: Path,
    label: str,
    past: list[ModelMessage] | None,
    *,
    n: int,
    rounds: int,
) -> None:
    prompt = "Which treaty governs fisheries?"
    name = f"{len(past or ())}"
    bare_fn, replay_fn, live_fn = Scripted(), Scripted(), Scripted()
    # One model name for all three, so the pins recorded through one answer the others.
    bare_model = FunctionModel(bare_fn, model_name="scripted")
    bare = agent_on(bare_model)

    # Each run asks as a run of its own (issue #34), so a unit holds as many runs as the timing will replay: the
    # first run to ask keeps the plain keys, each later run has its own.
    recorded_runs = 1 + max(1, n // 4) + rounds * n + max(n, 10)
    recorded = Pins.open(root / f"recorded-{name}.db")
    ledger = recorded.ledger()
    recording_model = agent_on(PinnedModel(bare_model, ledger))
    expected = loop.run_until_complete(recording_model.run(prompt, message_history=past))
    for _ in range(recorded_runs - 1):
        loop.run_until_complete(recording_model.run(prompt, message_history=past))
    ledger.commit()
    replay = agent_on(PinnedModel(FunctionModel(replay_fn, model_name="scripted"), recorded.replay()))
    assert loop.run_until_complete(replay.run(prompt, message_history=past)).output == expected.output

    # The capability pins the tool call too, so its recording is made through the capability. A run's id and
    # times are pinned at its position in the unit, and each run's calls are its own, as above.
    whole = Pins.open(root / f"capability-{name}.db")
    whole_ledger = whole.ledger()
    recording_agent = Agent(bare_model, tools=[lookup], capabilities=[Pinning(whole_ledger)])
    first = loop.run_until_complete(recording_agent.run(prompt, message_history=past))
    for _ in range(recorded_runs - 1):
        loop.run_until_complete(recording_agent.run(prompt, message_history=past))
    whole_ledger.commit()
    capability_fn = Scripted()
    whole_replay = whole.replay()
    capability = Agent(
        FunctionModel(capability_fn, model_name="scripted"), tools=[lookup], capabilities=[Pinning(whole_replay)]
    )
    replayed = loop.run_until_complete(capability.run(prompt, message_history=past))
    assert replayed.output == expected.output
    assert replayed.all_messages_json() == first.all_messages_json(), "the capability's replay is not exact"

    live_pins = Pins.open(root / f"live-{name}.db")
    live_model = FunctionModel(live_fn, model_name="scripted")
    live = agent_on(live_model)

    def plain(agent: Agent[None, str]) -> Callable[[int], float]:
        async def timed(count: int) -> float:
            spent = 0.0
            for _ in range(count):
                start = time.perf_counter()
                await agent.run(prompt, message_history=past)
                spent += time.perf_counter() - start
            return spent

        return lambda count: loop.run_until_complete(timed(count))

    def recording(*, with_commit: bool) -> Callable[[int], float]:
        async def timed(count: int) -> float:
            spent = 0.0
            for _ in range(count):
                ledger = live_pins.ledger()
                model = PinnedModel(live_model, ledger)
                start = time.perf_counter()
                await live.run(prompt, message_history=past, model=model)
                if with_commit:
                    ledger.commit()
                spent += time.perf_counter() - start
                if not with_commit:
                    ledger.commit()
            return spent

        return lambda count: loop.run_until_complete(timed(count))

    rows = compare(
        Variant("bare FunctionModel (async)", plain(bare), unit="run"),
        [
            Variant("replay: PinnedModel + ReplayPins", plain(replay), aim=Aim(at_most=1.05), unit="run"),
            Variant("replay: Pinning capability + ReplayPins", plain(capability), aim=Aim(at_most=1.05), unit="run"),
            Variant("live: PinnedModel + PinLedger", recording(with_commit=False), unit="run"),
            Variant("live, then commit()", recording(with_commit=True), unit="run"),
        ],
        n=n,
        rounds=rounds,
    )
    assert replay_fn.calls == capability_fn.calls == 0, "strict replay reached the model"
    assert whole_replay.divergence is None
    print_table(f"One agent run, two model requests, {label} (per run)", "bare async FunctionModel", rows)
    recorded.store.close()
    whole.store.close()
    live_pins.store.close()


def cassette_part(loop: asyncio.AbstractEventLoop, root: Path, *, n: int, rounds: int) -> None:
    """The three-turn conversation replayed through pins and through a vcrpy cassette."""
    import vcr  # the bench extra: pip install -e '.[bench]'
    from _stub_server import StubOpenAIServer
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def exact_body(r1: Any, r2: Any) -> None:
        # vcrpy's own `body` matcher parses JSON and diffs every candidate; bytes are the fair floor.
        assert r1.body == r2.body

    cassette_path = root / "conversation.yaml"
    recorder = vcr.VCR(match_on=["method", "uri", "exact_body"])
    recorder.register_matcher("exact_body", exact_body)

    requests = 2 * len(TURNS)
    # Each run asks as a run of its own (issue #34), so the pins hold as many conversations as the timing replays.
    conversations = 1 + max(1, n // 4) + rounds * n
    with StubOpenAIServer(max_requests=(2 + conversations) * requests, lifetime=120.0) as server:

        def openai_model() -> OpenAIChatModel:
            return OpenAIChatModel(STUB_MODEL, provider=OpenAIProvider(base_url=server.base_url, api_key="x"))

        with recorder.use_cassette(str(cassette_path), record_mode="all") as cassette:
            expected = loop.run_until_complete(conversation(agent_on(openai_model())))
            assert len(cassette) == requests, len(cassette)
        recorded = Pins.open(root / "openai-pins.db")
        ledger = recorded.ledger()
        recording = agent_on(PinnedModel(openai_model(), ledger))
        for _ in range(conversations):
            assert loop.run_until_complete(conversation(recording)) == expected
        ledger.commit()
        # Both replays below use a model pointing at the stopped server: anything that leaks fails.
        offline = openai_model()
    assert not server.serving

    pinned = agent_on(PinnedModel(offline, recorded.replay()))
    taped = agent_on(offline)
    bare_fn, replay_fn = Scripted(), Scripted()
    bare_model = FunctionModel(bare_fn, model_name="scripted")
    bare = agent_on(bare_model)
    # The bare script's own conversation, pinned too: pins over an equal model, to tell the pins' share from
    # what pydantic-ai itself does with an OpenAI response (which the cassette pays as well).
    scripted_pins = Pins.open(root / "scripted-pins.db")
    ledger = scripted_pins.ledger()
    scripted_recording = agent_on(PinnedModel(bare_model, ledger))
    scripted_outputs = loop.run_until_complete(conversation(scripted_recording))
    for _ in range(conversations - 1):
        loop.run_until_complete(conversation(scripted_recording))
    ledger.commit()
    pinned_scripted = agent_on(PinnedModel(FunctionModel(replay_fn, model_name="scripted"), scripted_pins.replay()))

    def sample(agent: Agent[None, str], *, tape: bool) -> Callable[[int], float]:
        async def timed(count: int) -> float:
            spent = 0.0
            for _ in range(count):
                start = time.perf_counter()
                outputs = await conversation(agent)
                spent += time.perf_counter() - start
                assert outputs == (scripted_outputs if agent in (bare, pinned_scripted) else expected)
            return spent

        def run(count: int) -> float:
            if not tape:
                return loop.run_until_complete(timed(count))
            with recorder.use_cassette(str(cassette_path), record_mode="none", allow_playback_repeats=True):
                return loop.run_until_complete(timed(count))

        return run

    baseline = Variant("bare FunctionModel (async), same script", sample(bare, tape=False), unit="conversation")
    through_pins = Variant("pins: PinnedModel(OpenAIChatModel) + ReplayPins", sample(pinned, tape=False))
    through_tape = Variant("cassette: OpenAIChatModel + vcrpy playback", sample(taped, tape=True))
    scripted = Variant("(pins: PinnedModel(FunctionModel), same script)", sample(pinned_scripted, tape=False))
    rows = compare(baseline, [through_pins, through_tape, scripted], n=n, rounds=rounds)
    assert replay_fn.calls == 0, "strict replay reached the model"
    print_table(
        f"A {len(TURNS)}-turn conversation ({requests} model requests) replayed (per conversation)",
        "bare async FunctionModel answering the same script",
        rows,
    )
    speedup, q1, q3 = paired(through_tape, through_pins)
    aim = Aim(at_least=2.0)
    print(f"  cassette / pins: {speedup:.2f}x  IQR {q1:.2f}-{q3:.2f}  (aim {aim!s}: {aim.verdict(speedup, q1, q3)})")


def paired(slower: Variant, faster: Variant) -> tuple[float, float, float]:
    """Median and quartiles over rounds of `slower`'s time over `faster`'s in the same round."""
    ratios = [s / f for s, f in zip(slower.times, faster.times, strict=True)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return median, q1, q3


def main(argv: Sequence[str] | None = None) -> None:
    parser = options((__doc__ or "").splitlines()[0], rounds=25, synchronous_help="of the pin stores")
    parser.add_argument("--part", choices=["runs", "cassette", "all"], default="all")
    args = parser.parse_args(argv)
    rounds = use_options(args)
    SYNCHRONOUS[0] = args.synchronous
    n = 2 if args.quick else 8
    print(f"benchmarks/agent.py  {machine_line()}")
    print(f"  rounds={rounds}, {n} runs per variant per round, interleaved; pin stores synchronous={args.synchronous}")
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
            if args.part in ("runs", "all"):
                runs_part(loop, Path(tmp), n=n, rounds=rounds)
            if args.part in ("cassette", "all"):
                cassette_part(loop, Path(tmp), n=max(1, n // 4), rounds=rounds)
    finally:
        loop.close()


if __name__ == "__main__":
    main()
