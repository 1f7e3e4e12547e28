"""A sync tool cancelled while its body runs under `Pinning`: pinned as it ran, so its effect happens once.

pydantic-ai cancels the tool calls beside one that raised. A sync body already running in its worker thread runs to
its end all the same (a thread cannot be stopped): the world was reached, so a retry of the run, or the run resumed
by another process, is answered from the body's pin, as `pinned_tool` does (tests/provider/test_tools.py).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry, RunContext, Tool, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from anagrapheus import Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.resolving.resolver import Resolver

PROMPT = "Book a berth for the Marie-Galante"
UNIT = "berth-booking"


def scratch_kinds(path: Path, unit_id: str) -> list[str]:
    """The kinds of the unit's pins in scratch, as another process would read them (in draw order)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT kind FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit_id,)).fetchall()
    finally:
        conn.close()
    return [kind for (kind,) in rows]


def returned(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool returns among `messages` (a run's, as `capture_run_messages` caught them)."""
    parts = (part for message in messages if isinstance(message, ModelRequest) for part in message.parts)
    return [part for part in parts if isinstance(part, ToolReturnPart)]


@dataclass
class ToolTasks(AbstractCapability[Any]):
    """Notes the task each tool call runs in, so a test can see when pydantic-ai cancels it."""

    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict[str, "asyncio.Task[Any]"])

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
    ) -> ValidatedToolArgs:
        task = asyncio.current_task()
        assert task is not None
        self.tasks[call.tool_name] = task
        return args


@dataclass
class Harbour:
    """A sync tide tool whose first body is held in its thread until its call was cancelled, beside a radio that drops.

    The radio waits for the tide's body to start, then drops its first call: pydantic-ai cancels the tide call. Only
    once that cancellation was delivered is the tide's body let go, so it always ends after its call was cancelled.
    """

    tide_fails: bool = False
    reached: list[str] = field(default_factory=list[str])
    threads: list[str] = field(default_factory=list[str])
    drops: int = 1
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    tasks: ToolTasks = field(default_factory=ToolTasks)
    _watchers: set[asyncio.Task[None]] = field(default_factory=set[asyncio.Task[None]])

    def tide(self, port: str) -> str:
        """Read the tide table."""
        self.threads.append(threading.current_thread().name)
        self.started.set()
        try:
            assert self.release.wait(10), "the tide's call was never cancelled"
            self.reached.append("tide")
            if self.tide_fails and self.count("tide") == 1:
                raise ConnectionError("the tide service dropped")
            return f"high tide at {port} 14:05"
        finally:
            self.ended.set()

    async def radio(self, to: str) -> str:
        """Call someone on the radio."""
        assert await asyncio.to_thread(self.started.wait, 10), "the tide's body never started"
        self.reached.append("radio")
        if self.drops > 0:
            self.drops -= 1
            watcher = asyncio.get_running_loop().create_task(self._release_once_cancelled(self.tasks.tasks["tide"]))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)
            raise ConnectionError("the radio link dropped")
        return f"{to} acknowledged"

    async def _release_once_cancelled(self, call: asyncio.Task[Any]) -> None:
        """Let the tide's body go once pydantic-ai has cancelled the task awaiting it."""
        while not (call.cancelling() or call.done()):
            await asyncio.sleep(0.001)
        self.release.set()

    def model(self) -> FunctionModel:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.reached.append("model")
            if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
                return ModelResponse(parts=[TextPart("berth 4 at high tide, pilot told")])
            return ModelResponse(
                parts=[ToolCallPart("tide", {"port": "Brest"}), ToolCallPart("radio", {"to": "pilot"})]
            )

        return FunctionModel(answer, model_name="scripted-harbour")

    def agent(self, resolver: Resolver, *, tools: list[Any] | None = None) -> Agent[None, str]:
        return Agent(self.model(), tools=tools or [self.tide, self.radio], capabilities=[self.tasks, Pinning(resolver)])

    def count(self, what: str) -> int:
        return self.reached.count(what)


async def failed_then(harbour: Harbour, agent: Agent[None, str], retry: Callable[[], Agent[None, str]]) -> str:
    """Run the turn, which fails on the radio; once the tide's body ended, run it again through `retry()`."""
    with pytest.raises(ConnectionError, match="radio"):
        await agent.run(PROMPT)
    assert await asyncio.to_thread(harbour.ended.wait, 10)
    return (await retry().run(PROMPT)).output


def test_a_retry_answers_a_sync_tool_cancelled_mid_body_from_its_pin(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour()
    ledger = PinLedger(store, types, unit_id=UNIT)
    agent = harbour.agent(ledger)

    assert asyncio.run(failed_then(harbour, agent, lambda: agent)) == "berth 4 at high tide, pilot told"
    # The body ran once, after its call was cancelled; the retry was answered from what it returned.
    assert harbour.count("tide") == 1
    assert (harbour.count("model"), harbour.count("radio")) == (2, 2)
    ledger.commit()

    # Both runs replay from the log without reaching the world, every model and tool pin used.
    replay = ReplayPins.from_store(store, types)
    replayed = Harbour()
    agent = replayed.agent(replay)

    async def replayed_turn() -> str:
        with capture_run_messages() as failed_run, pytest.raises(ConnectionError, match="radio"):
            await agent.run(PROMPT)
        # The tide's call was cancelled live, so its return never reached the failed run: nor does it replayed.
        assert not [part for part in returned(failed_run) if part.tool_name == "tide"]
        return (await agent.run(PROMPT)).output

    assert asyncio.run(replayed_turn()) == "berth 4 at high tide, pilot told"
    assert replayed.reached == []
    # Every pin is used: the failed run's last request is what it was live, so its times are asked as recorded.
    assert replay.unused() == {}


def test_the_pin_of_a_sync_tool_cancelled_mid_body_is_durable_before_the_run_fails(
    db_path: Path, types: EventTypeRegistry
) -> None:
    # The cancelled call's pin is in the unit's scratch when the run's failure reaches the app: a process resuming
    # the unit (a crash right after) answers it from there and does not reach the world again.
    harbour = Harbour()
    first = SQLiteEventStore(db_path)

    async def crashed_then_resumed() -> str:
        with pytest.raises(ConnectionError, match="radio"):
            await harbour.agent(PinLedger(first, types, unit_id=UNIT)).run(PROMPT)
        assert await asyncio.to_thread(harbour.ended.wait, 10)
        assert "tool_call" in scratch_kinds(db_path, UNIT)
        first.close()  # the first process is gone: its lease is taken over
        second = SQLiteEventStore(db_path)
        try:
            agent = harbour.agent(PinLedger(second, types, unit_id=UNIT))
            # The resumed process meets the failed run again from its pins, then its retry takes the failed run's place.
            with pytest.raises(ConnectionError, match="radio"):
                await agent.run(PROMPT)
            return (await agent.run(PROMPT)).output
        finally:
            second.close()

    assert asyncio.run(crashed_then_resumed()) == "berth 4 at high tide, pilot told"
    assert (harbour.count("tide"), harbour.count("radio"), harbour.count("model")) == (1, 2, 2)


def test_a_sync_tool_that_raises_after_its_call_was_cancelled_is_not_pinned_and_is_drawn_again(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # As `pinned_tool` has it: a cancellation is never pinned, and a body that failed returned nothing to pin.
    harbour = Harbour(tide_fails=True)
    ledger = PinLedger(store, types, unit_id=UNIT)
    agent = harbour.agent(ledger)

    assert asyncio.run(failed_then(harbour, agent, lambda: agent)) == "berth 4 at high tide, pilot told"
    assert harbour.count("tide") == 2


def test_a_sync_tool_cancelled_mid_body_runs_on_the_apps_own_executor(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour()
    ledger = PinLedger(store, types, unit_id=UNIT)
    agent = harbour.agent(ledger)

    async def booked() -> str:
        executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="harbour-worker")
        try:
            with Agent.using_thread_executor(executor):
                return await failed_then(harbour, agent, lambda: agent)
        finally:
            executor.shutdown(wait=True)

    assert asyncio.run(booked()) == "berth 4 at high tide, pilot told"
    assert harbour.count("tide") == 1
    assert [name.startswith("harbour-worker") for name in harbour.threads] == [True]


def test_without_a_say_in_where_pydantic_ai_runs_its_threads_a_cancelled_body_is_left_as_before(
    store: SQLiteEventStore, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fallback for a pydantic-ai without `Agent.using_thread_executor` (compat.sync_callback_threads): the call is
    # made as it always was, so what a body cancelled mid-run returned is dropped and a retry reads the tide again.
    from pydantic_ai.agent import AbstractAgent

    monkeypatch.delattr(AbstractAgent, "using_thread_executor")
    harbour = Harbour()
    agent = harbour.agent(PinLedger(store, types, unit_id=UNIT))
    assert asyncio.run(failed_then(harbour, agent, lambda: agent)) == "berth 4 at high tide, pilot told"
    assert harbour.count("tide") == 2


def test_a_sync_tool_past_its_timeout_is_still_abandoned_at_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # A timeout gives the model a retry prompt at once; its overrunning body is left to finish on its own, as unpinned.
    release = threading.Event()
    calls: list[float] = []

    def slow_tide(port: str) -> str:
        """Read the tide table."""
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(10)
        return f"high tide at {port} 14:05"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        told = [part.content for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
        if any(str(content).startswith("high tide") for content in told):
            return ModelResponse(parts=[TextPart(str(told[0]))])
        return ModelResponse(parts=[ToolCallPart("slow_tide", {"port": "Brest"})])

    agent = Agent(
        FunctionModel(answer),
        tools=[Tool(slow_tide, timeout=0.2, max_retries=2)],
        capabilities=[Pinning(PinLedger(store, types))],
    )
    try:
        started = time.monotonic()
        assert agent.run_sync(PROMPT).output == "high tide at Brest 14:05"
        assert time.monotonic() - started < 5
        assert len(calls) == 2
    finally:
        release.set()


class AsyncCall:
    async def __call__(self, port: str) -> str:
        return port


async def async_tide(port: str) -> str:
    return port


def sync_tide(port: str) -> str:
    return port


@pytest.mark.parametrize(
    ("function", "threaded"),
    [
        (sync_tide, True),
        (functools.partial(sync_tide, "Brest"), True),
        (async_tide, False),
        (functools.partial(functools.partial(async_tide), "Brest"), False),
        (AsyncCall(), False),
        (None, False),
    ],
)
def test_a_tool_function_runs_in_a_thread_exactly_when_pydantic_ai_would_run_it_there(
    function: Callable[..., Any] | None, threaded: bool
) -> None:
    from anagrapheus.provider.sync_bodies import runs_in_a_thread

    assert runs_in_a_thread(function) is threaded


def test_a_model_retry_from_a_sync_tool_is_pinned_as_before(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    # Nothing cancelled: a failure the body raised is its call's answer, as it always was.
    tries: list[str] = []

    def tide(port: str) -> str:
        """Read the tide table."""
        tries.append(port)
        if len(tries) == 1:
            raise ModelRetry("say the port in full")
        return f"high tide at {port} 14:05"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        told = [part.content for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
        if any(str(content).startswith("high tide") for content in told):
            return ModelResponse(parts=[TextPart(str(told[0]))])
        return ModelResponse(parts=[ToolCallPart("tide", {"port": "Brest"})])

    ledger = PinLedger(store, types)
    agent = Agent(FunctionModel(answer), tools=[tide], capabilities=[Pinning(ledger)])
    assert agent.run_sync(PROMPT).output == "high tide at Brest 14:05"
    ledger.commit()
    replay = ReplayPins.from_store(store, types)
    tries.clear()
    replayed = Agent(FunctionModel(answer), tools=[tide], capabilities=[Pinning(replay)])
    assert replayed.run_sync(PROMPT).output == "high tide at Brest 14:05"
    assert tries == [] and replay.unused() == {}


def test_a_call_cancelled_before_its_body_started_replays_as_cancelled_and_its_retry_as_drawn(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The app's one worker thread is busy when the tide's body is handed to it, and the radio drops meanwhile: the
    # tide's call is cancelled before its body starts, so the retry draws the tide. Replayed, the tide's pin (the
    # retry's) must not answer the failed run's asking: it is delivered as cancelled there too.
    busy, handed, reached = threading.Event(), threading.Event(), list[str]()

    class Queueing(ThreadPoolExecutor):
        """The app's executor, which says when a job is handed to it."""

        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            queued = super().submit(fn, *args, **kwargs)
            handed.set()
            return queued

    def tide(port: str) -> str:
        """Read the tide table."""
        reached.append("tide")
        return f"high tide at {port} 14:05"

    async def radio(to: str) -> str:
        """Call someone on the radio."""
        reached.append("radio")
        if reached.count("radio") == 1:
            while not handed.is_set():  # polled: a thread of the loop's own may be the app's busy one
                await asyncio.sleep(0.001)
            raise ConnectionError("the radio link dropped")
        return f"{to} acknowledged"

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # Async, so that it is not queued behind the busy worker as a sync function would be.
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("berth 4 at high tide, pilot told")])
        return ModelResponse(parts=[ToolCallPart("tide", {"port": "Brest"}), ToolCallPart("radio", {"to": "pilot"})])

    def agent(resolver: Resolver) -> Agent[None, str]:
        return Agent(FunctionModel(model), tools=[tide, radio], capabilities=[Pinning(resolver)])

    async def turn(resolver: Resolver, *, occupied: bool) -> tuple[list[ToolReturnPart], str]:
        executor = Queueing(max_workers=1)
        try:
            if occupied:
                executor.submit(busy.wait, 10)
                handed.clear()
            with Agent.using_thread_executor(executor):
                booking = agent(resolver)
                with capture_run_messages() as failed_run, pytest.raises(ConnectionError, match="radio"):
                    await booking.run(PROMPT)
                busy.set()
                return returned(failed_run), (await booking.run(PROMPT)).output
        finally:
            busy.set()
            executor.shutdown(wait=True)

    ledger = PinLedger(store, types, unit_id=UNIT)
    returns, output = asyncio.run(turn(ledger, occupied=True))
    assert (returns, output) == ([], "berth 4 at high tide, pilot told")
    assert sorted(reached) == ["radio", "radio", "tide"]
    ledger.commit()

    replay = ReplayPins.from_store(store, types)
    reached.clear()
    assert asyncio.run(turn(replay, occupied=False)) == ([], "berth 4 at high tide, pilot told")
    assert reached == []
    assert replay.unused() == {}
