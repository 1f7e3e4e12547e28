"""The `Pinning` capability recording and replaying an agent run, as paired CPU and wall ratios to a bare run.

Issue #43, items 2 and 3. One agent run: a tool call, then an answer (two model requests, one tool call).

- Recording: `Pinning(PinLedger)` with `commit()` (a fresh ledger, capability and agent per run, built
  untimed; the commit is timed), against the same agent on a bare async `FunctionModel`. Aim <= 1.15x,
  CPU and wall, at the store's default durability (`synchronous=FULL`). `PinnedModel(PinLedger)` with its
  commit is printed beside it.
- Replay: `Pinning(ReplayPins)` against the bare run (aim <= 1.05x), and `PinnedModel(ReplayPins)` over a
  null model (a `Model` that answers the script at once, with no usage estimate) against that null model
  bare (aim <= 1.05x).

CPU is `time.process_time()` (every thread of the process: the worker threads a store write hops to count);
wall is `time.perf_counter()`. Each figure is the median over rounds of the variant's time divided by the
baseline's in the same round, the variants interleaved in a rotated order.

    python benchmarks/capability.py            # default, about a minute
    python benchmarks/capability.py --long     # more rounds
    python benchmarks/capability.py --quick    # smoke test: one round of a few runs
    python benchmarks/capability.py --part recording|replay
    python benchmarks/capability.py --part recording --model both   # also OpenAIChatModel over a loopback stub
    python benchmarks/capability.py --part calls   # Python calls per recorded and replayed run (cProfile): counts
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from _measure import Aim, Variant, compare, machine_line, options, print_table, summarise, use_options
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from typing_extensions import override

from anagrapheus.provider import PinnedModel, Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolving.resolver import FailureCodec, Resolver

PROMPT = "Which treaty governs fisheries?"
SYNCHRONOUS: list[Literal["FULL", "NORMAL"]] = ["FULL"]
STUB_MODEL = os.environ.get("ANAGRAPHEUS_BENCH_MODEL", "gpt-4o-mini")
T = TypeVar("T")


def lookup(topic: str) -> str:
    """Look a topic up in the (pure) record."""
    return f"fact about {topic}"


def answer(messages: list[ModelMessage]) -> ModelResponse:
    """The script: call `lookup` on a new user prompt, answer once the tool has returned."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"The record says {part.content}.")])
    prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[ToolCallPart("lookup", {"topic": str(prompt)[:40]})])


class Scripted:
    """The script as a `FunctionModel` function; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return answer(messages)


class NullModel(Model):
    """A model that does nothing inside pydantic-ai's graph but answer the script: no usage estimate, no info."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @override
    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self.calls += 1
        response = answer(messages)
        response.model_name = "null"
        return response

    @asynccontextmanager
    @override
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        raise NotImplementedError("the null model does not stream")
        yield  # pragma: no cover

    @property
    @override
    def model_name(self) -> str:
        return "null"

    @property
    @override
    def system(self) -> str:
        return "null"


@dataclass
class Clocked:
    """A variant's wall-clock sample, which keeps the CPU time of the same runs beside it."""

    name: str
    prepare: Callable[[], Callable[[], None]]
    """Untimed setup of one operation (a fresh ledger, say), returning the operation to time."""
    cpu: list[float]

    def sample(self, count: int) -> float:
        wall = cpu = 0.0
        for _ in range(count):
            run = self.prepare()
            w0, c0 = time.perf_counter(), time.process_time()
            run()
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
        self.cpu.append(cpu / count)
        return wall


def clocked_compare(
    title: str,
    baseline: tuple[str, Callable[[], Callable[[], None]]],
    others: Sequence[tuple[str, Callable[[], Callable[[], None]], Aim | None]],
    *,
    n: int,
    rounds: int,
) -> None:
    """Time `baseline` and `others` interleaved; print the paired CPU table and the paired wall table side by side."""
    everyone = [Clocked(baseline[0], baseline[1], []), *(Clocked(name, run, []) for name, run, _ in others)]
    aims = [None, *(aim for _, _, aim in others)]
    variants = [Variant(c.name, c.sample, aim=aim, unit="run") for c, aim in zip(everyone, aims, strict=True)]
    wall = compare(variants[0], variants[1:], n=n, rounds=rounds)
    # The warm-up rounds left CPU samples too: keep the timed rounds' only, as `compare` keeps its times.
    cpu_variants = [
        Variant(c.name, c.sample, aim=v.aim, unit="run", times=c.cpu[-rounds:])
        for c, v in zip(everyone, variants, strict=True)
    ]
    cpu = summarise(cpu_variants[0], cpu_variants[1:])
    print_table(f"{title}: CPU (process_time, all threads), per run", baseline[0], cpu)
    print_table(f"{title}: wall (perf_counter), per run", baseline[0], wall)


class Unstored(Resolver):
    """A live resolver that runs every effect and keeps nothing: what `Pinning` costs before any ledger or store."""

    @override
    def resolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> T:
        return interpret(cast(JSONValue, effect()))

    @override
    async def aresolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], Awaitable[object]],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> T:
        return interpret(cast(JSONValue, await effect()))

    @override
    def resolve_stream(self, key: str, *, kind: str, **options: Any) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError("the benchmark's run does not stream")


class Pins:
    """A registry and a store to record into."""

    def __init__(self, path: Path, *, synchronous: Literal["FULL", "NORMAL"] | None = None) -> None:
        self.types = EventTypeRegistry()
        self.store = SQLiteEventStore(path, synchronous=synchronous or SYNCHRONOUS[0])

    def ledger(self) -> PinLedger:
        return PinLedger(self.store, self.types)

    def replay(self) -> ReplayPins:
        return ReplayPins.from_events(self.store.read(), self.types)


def recording_part(
    loop: asyncio.AbstractEventLoop,
    root: Path,
    *,
    n: int,
    rounds: int,
    base_url: str | None = None,
    breakdown: bool = False,
) -> None:
    """Item 2: `Pinning(PinLedger)` + commit against the bare run (and `PinnedModel(PinLedger)` + commit).

    With `base_url`, the model is `OpenAIChatModel` over the loopback stub at that URL (in a child process, so
    its CPU is not counted) instead of a `FunctionModel`: the same script, through an HTTP client. With
    `breakdown`, also `Pinning` over a resolver that keeps nothing (the capability's own work) and over a ledger
    whose store does not sync (`synchronous=NORMAL`): the steps between them are the ledger and store, and syncs.
    """
    bare_model: Model
    if base_url is None:
        bare_model = FunctionModel(Scripted(), model_name="scripted")
        label = "bare FunctionModel (async)"
    else:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        bare_model = OpenAIChatModel(STUB_MODEL, provider=OpenAIProvider(base_url=base_url, api_key="x"))
        label = f"bare OpenAIChatModel({STUB_MODEL!r}) over loopback HTTP"
    bare = Agent(bare_model, tools=[lookup])
    pins = Pins(root / f"recording-{'function' if base_url is None else 'stub'}.db")

    def bare_run() -> Callable[[], None]:
        return lambda: loop.run_until_complete(bare.run(PROMPT))

    # Each run's ledger, capability and agent are built before its timed run: what is timed is the run and commit.
    def capability_run() -> Callable[[], None]:
        ledger = pins.ledger()
        agent = Agent(bare_model, tools=[lookup], capabilities=[Pinning(ledger)])

        def run() -> None:
            loop.run_until_complete(agent.run(PROMPT))
            ledger.commit()

        return run

    def model_run() -> Callable[[], None]:
        ledger = pins.ledger()
        agent = Agent(PinnedModel(bare_model, ledger), tools=[lookup])

        def run() -> None:
            loop.run_until_complete(agent.run(PROMPT))
            ledger.commit()

        return run

    def unstored_run() -> Callable[[], None]:
        agent = Agent(bare_model, tools=[lookup], capabilities=[Pinning(Unstored())])

        def run() -> None:
            loop.run_until_complete(agent.run(PROMPT))

        return run

    unsynced = Pins(root / f"recording-{'function' if base_url is None else 'stub'}-normal.db", synchronous="NORMAL")

    def unsynced_run() -> Callable[[], None]:
        ledger = unsynced.ledger()
        agent = Agent(bare_model, tools=[lookup], capabilities=[Pinning(ledger)])

        def run() -> None:
            loop.run_until_complete(agent.run(PROMPT))
            ledger.commit()

        return run

    parts: list[tuple[str, Callable[[], Callable[[], None]], Aim | None]] = [
        ("record: Pinning + PinLedger, commit()", capability_run, Aim(at_most=1.15)),
        ("record: PinnedModel + PinLedger, commit()", model_run, None),
    ]
    if breakdown:
        parts += [
            ("Pinning + a resolver that keeps nothing", unstored_run, None),
            ("record: Pinning + PinLedger, synchronous=NORMAL", unsynced_run, None),
        ]
    clocked_compare(
        f"Recording one run, {label} (synchronous={SYNCHRONOUS[0]})", (label, bare_run), parts, n=n, rounds=rounds
    )
    pins.store.close()
    unsynced.store.close()


def replay_part(loop: asyncio.AbstractEventLoop, root: Path, *, n: int, rounds: int) -> None:
    """Item 3: `Pinning(ReplayPins)` against the bare run; `PinnedModel(ReplayPins)` over a null model against it."""
    runs = 1 + max(1, n // 4) + rounds * n + max(n, 10)
    bare = Agent(FunctionModel(Scripted(), model_name="scripted"), tools=[lookup])

    # Each run asks as a run of its own (issue #34): the recordings hold as many runs as are replayed.
    whole = Pins(root / "capability.db")
    ledger = whole.ledger()
    recording = Agent(FunctionModel(Scripted(), model_name="scripted"), tools=[lookup], capabilities=[Pinning(ledger)])
    first = loop.run_until_complete(recording.run(PROMPT))
    for _ in range(runs - 1):
        loop.run_until_complete(recording.run(PROMPT))
    ledger.commit()
    capability_fn = Scripted()
    capability_pins = whole.replay()
    capability = Agent(
        FunctionModel(capability_fn, model_name="scripted"), tools=[lookup], capabilities=[Pinning(capability_pins)]
    )
    replayed = loop.run_until_complete(capability.run(PROMPT))
    assert replayed.all_messages_json() == first.all_messages_json(), "the capability's replay is not exact"

    null = NullModel()
    null_agent = Agent(null, tools=[lookup])
    models = Pins(root / "model.db")
    ledger = models.ledger()
    model_recording = Agent(PinnedModel(NullModel(), ledger), tools=[lookup])
    expected = loop.run_until_complete(model_recording.run(PROMPT))
    for _ in range(runs - 1):
        loop.run_until_complete(model_recording.run(PROMPT))
    ledger.commit()
    replay_null = NullModel()
    pinned = Agent(PinnedModel(replay_null, models.replay()), tools=[lookup])
    assert loop.run_until_complete(pinned.run(PROMPT)).output == expected.output

    def runner(agent: Agent[None, str]) -> Callable[[], Callable[[], None]]:
        run: Callable[[], None] = lambda: loop.run_until_complete(agent.run(PROMPT))  # noqa: E731
        return lambda: run

    clocked_compare(
        "Replaying one run through the capability",
        ("bare FunctionModel (async)", runner(bare)),
        [("replay: Pinning + ReplayPins", runner(capability), Aim(at_most=1.05))],
        n=n,
        rounds=rounds,
    )
    clocked_compare(
        "Replaying one run through PinnedModel",
        ("null model (answers the script, nothing else)", runner(null_agent)),
        [("replay: PinnedModel(null model) + ReplayPins", runner(pinned), Aim(at_most=1.05))],
        n=n,
        rounds=rounds,
    )
    assert capability_fn.calls == replay_null.calls == 0, "strict replay reached the model"
    assert capability_pins.divergence is None
    whole.store.close()
    models.store.close()


class NoHooks(AbstractCapability[Any]):
    """A capability that overrides no hook: what pydantic-ai's dispatch costs for any capability."""


def calls_part(loop: asyncio.AbstractEventLoop, root: Path, *, n: int) -> None:
    """Item 3, as a count: the Python calls a replayed run makes, against the bare run's (no load moves a count)."""
    runs = 10 + n

    def recorded(name: str, agent_of: Callable[[PinLedger], Agent[None, str]]) -> ReplayPins:
        pins = Pins(root / f"calls-{name}.db")
        ledger = pins.ledger()
        agent = agent_of(ledger)
        for _ in range(runs):
            loop.run_until_complete(agent.run(PROMPT))
        ledger.commit()
        replay = pins.replay()
        pins.store.close()
        return replay

    def scripted(**kw: Any) -> Agent[None, str]:
        return Agent(FunctionModel(Scripted(), model_name="scripted"), tools=[lookup], **kw)

    capability = recorded("capability", lambda ledger: scripted(capabilities=[Pinning(ledger)]))
    model = recorded("model", lambda ledger: Agent(PinnedModel(NullModel(), ledger), tools=[lookup]))
    agents: list[tuple[str, Agent[None, str]]] = [
        ("bare FunctionModel (async)", scripted()),
        ("a capability that overrides no hook", scripted(capabilities=[NoHooks()])),
        ("replay: Pinning + ReplayPins", scripted(capabilities=[Pinning(capability)])),
        ("null model (answers the script, nothing else)", Agent(NullModel(), tools=[lookup])),
        ("replay: PinnedModel(null model) + ReplayPins", Agent(PinnedModel(NullModel(), model), tools=[lookup])),
    ]
    recording_calls(loop, root, n=n)
    print("\nPython calls per replayed run (cProfile), ours = in anagrapheus")
    print(f"  {'variant':<52} {'calls/run':>10} {'ours/run':>9}")
    for name, agent in agents:
        for _ in range(min(10, runs // 2)):
            loop.run_until_complete(agent.run(PROMPT))
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(n):
            loop.run_until_complete(agent.run(PROMPT))
        profile.disable()
        stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        total = sum(calls for calls, *_ in stats.values())
        ours = sum(calls for (path, _, _), (calls, *_) in stats.items() if "/anagrapheus/" in path)
        print(f"  {name:<52} {total / n:>10,.0f} {ours / n:>9,.0f}")


def recording_calls(loop: asyncio.AbstractEventLoop, root: Path, *, n: int) -> None:
    """Item 2, as a count: the Python calls of a recorded run and its commit, the worker threads' store steps included.

    Each run's ledger and agent are built unprofiled, as the timing builds them untimed; the bare run is profiled
    the same way. The store's steps in worker threads are profiled by a per-thread profiler around each hop.
    """
    profiles: dict[int, cProfile.Profile] = {}  # one per worker thread
    to_thread = asyncio.to_thread

    async def profiled_to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            profile = profiles.setdefault(threading.get_ident(), cProfile.Profile())
            profile.enable()
            try:
                return func(*args, **kwargs)
            finally:
                profile.disable()

        return await to_thread(run)

    pins = Pins(root / "calls-recording.db")
    model = FunctionModel(Scripted(), model_name="scripted")

    def bare() -> Callable[[], None]:
        agent = Agent(model, tools=[lookup])
        return lambda: loop.run_until_complete(agent.run(PROMPT))

    def recorded() -> Callable[[], None]:
        ledger = pins.ledger()
        agent = Agent(model, tools=[lookup], capabilities=[Pinning(ledger)])

        def run() -> None:
            loop.run_until_complete(agent.run(PROMPT))
            ledger.commit()

        return run

    print("\nPython calls per recorded run and commit (cProfile, worker threads included), ours = in anagrapheus")
    print(f"  {'variant':<52} {'calls/run':>10} {'ours/run':>9}")
    asyncio.to_thread = profiled_to_thread
    try:
        variants = [("bare FunctionModel (async)", bare), ("record: Pinning + PinLedger, commit()", recorded)]
        for name, prepare in variants:
            for _ in range(10):
                prepare()()
            profiles.clear()
            main = cProfile.Profile()
            for _ in range(n):
                run = prepare()
                main.enable()
                run()
                main.disable()
            stats = pstats.Stats(main)
            for profile in profiles.values():
                stats.add(profile)
            counted: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
            total = sum(calls for calls, *_ in counted.values())
            ours = sum(calls for (path, _, _), (calls, *_) in counted.items() if "/anagrapheus/" in path)
            print(f"  {name:<52} {total / n:>10,.0f} {ours / n:>9,.0f}")
    finally:
        asyncio.to_thread = to_thread
    pins.store.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = options((__doc__ or "").splitlines()[0], rounds=25, synchronous_help="of the pin stores")
    parser.add_argument("--part", choices=["recording", "replay", "calls", "all"], default="all")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="the recording part also runs Pinning over a resolver that keeps nothing, and over an unsynced store",
    )
    parser.add_argument(
        "--model",
        choices=["function", "stub-chat", "both"],
        default="function",
        help="the recording part's model: a FunctionModel, OpenAIChatModel over a loopback stub, or both in turn",
    )
    args = parser.parse_args(argv)
    rounds = use_options(args)
    SYNCHRONOUS[0] = args.synchronous
    n = 2 if args.quick else 8
    print(f"benchmarks/capability.py  {machine_line()}")
    print(f"  rounds={rounds}, {n} runs per variant per round, interleaved; pin stores synchronous={args.synchronous}")
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
            if args.part in ("recording", "all"):
                if args.model in ("function", "both"):
                    recording_part(loop, Path(tmp), n=n, rounds=rounds, breakdown=args.breakdown)
                if args.model in ("stub-chat", "both"):
                    from _stub_server import stub_server_process

                    with stub_server_process() as base_url:
                        recording_part(loop, Path(tmp), n=n, rounds=rounds, base_url=base_url, breakdown=args.breakdown)
            if args.part in ("replay", "all"):
                replay_part(loop, Path(tmp), n=n, rounds=rounds)
            if args.part in ("calls", "all"):
                calls_part(loop, Path(tmp), n=20 if args.quick else 200)
    finally:
        loop.close()


if __name__ == "__main__":
    main()
