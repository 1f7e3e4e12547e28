"""The run rule: runs sharing one ledger each reach the world as they do unpinned, and replay byte for byte (#34).

Each pattern runs three ways: unpinned, pinned live through one `PinLedger`, and replayed strictly from
the committed pins with every tool and the model refusing to be reached. Pinned live must equal unpinned:
the same outputs, the same side effects, the same request bodies reaching the model, the same message
types. The replay must reach nothing and give back the live runs' messages byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from pydantic_ai import Agent, AgentRunResult, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import PinMiss
from anagrapheus.provider.compat import says_run_inputs_before_its_id
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.seeded import SeededRun


class Refused(Exception):
    """The world was reached during a strict replay."""


@dataclass
class World:
    """What a pattern's tools and model reach: every side effect and every request body, counted."""

    refusing: bool = False
    effects: list[str] = field(default_factory=list[str])
    bodies: list[list[str]] = field(default_factory=list[list[str]])
    progress: int = 40
    samples: int = 0
    balances: dict[str, int] = field(default_factory=lambda: {"alice": 1200, "bob": 35})

    def reach(self, effect: str) -> None:
        if self.refusing:
            raise Refused(f"a strict replay reached the world: {effect}")
        self.effects.append(effect)

    def model(self, call: Callable[[str], ToolCallPart]) -> FunctionModel:
        """A model that calls the tool `call` names for the run's prompt, then closes on what the tool returned."""

        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.reach("model request")
            self.bodies.append([_body(part) for message in messages for part in message.parts])
            last = messages[-1]
            returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            if returned:
                return ModelResponse(parts=[TextPart(f"done: {returned[0].content}")])
            prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
            self.samples += 1
            return ModelResponse(parts=[call(f"{prompt}#{self.samples}")])

        return FunctionModel(answer, model_name="scripted-clerk")

    def count(self, what: str) -> int:
        """How many effects of one kind (`sms`, `order`, `catch`) the world has seen."""
        return sum(effect.startswith(what) for effect in self.effects)

    # The tools, each with a side effect or a reading that changes as the world moves.

    def send_sms(self, to: str, text: str) -> str:
        """Send a text message."""
        self.reach(f"sms to {to}: {text}")
        return f"sms #{self.count('sms')} sent to {to}"

    def order_crate(self, item: str) -> str:
        """Order a crate of an item."""
        self.reach(f"order {item}")
        return f"order #{self.count('order')} placed"

    def job_status(self, job: str) -> str:
        """Poll a background job."""
        self.reach(f"poll {job}")
        self.progress += 20
        return f"{job} at {self.progress - 20}%"

    def log_catch(self, species: str, tonnes: int) -> str:
        """Log a catch in the register."""
        self.reach(f"catch {species} {tonnes}")
        return f"entry #{self.count('catch')}"

    def cast_vote(self, choice: str) -> str:
        """Cast a vote."""
        self.reach(f"vote {choice}")
        return f"vote for {choice} counted"

    def balance(self, ctx: RunContext[str]) -> str:
        """Read the caller's balance."""
        self.reach(f"balance of {ctx.deps}")
        return f"{ctx.deps} holds {self.balances[ctx.deps]} EUR"


def _body(part: Any) -> str:
    """What a request part carries to the model, without the run's ids and times (pinned, so they differ)."""
    if isinstance(part, ToolCallPart):
        return f"call {part.tool_name} {part.args_as_json_str()}"
    return f"{part.part_kind} {getattr(part, 'content', '')}"


Pattern = Callable[[World, Sequence[Any]], list[AgentRunResult[Any]]]


def tell_then_remind(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("send_sms", {"to": "Ana", "text": "Ship at noon"})))
    agent.tool_plain(world.send_sms)
    return [agent.run_sync(prompt, capabilities=list(capabilities)) for prompt in ("Tell Ana", "Remind Ana")]


def a_crate_three_times(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("order_crate", {"item": "crate"})), capabilities=capabilities)
    agent.tool_plain(world.order_crate)
    return [agent.run_sync("Order a crate") for _ in range(3)]


def a_job_polled_by_three_runs(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("job_status", {"job": "survey-7"})), capabilities=capabilities)
    agent.tool_plain(world.job_status)
    return [agent.run_sync("How far is the survey?") for _ in range(3)]


def a_catch_logged_twice(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("log_catch", {"species": "cod", "tonnes": 12})))
    agent.tool_plain(world.log_catch)
    return [agent.run_sync("Log the catch", capabilities=list(capabilities)) for _ in range(2)]


def three_votes_at_once(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    # Each request samples: the model picks by its own count, so the three runs may vote differently.
    choices = ["north", "south", "north"]
    model = world.model(lambda sample: ToolCallPart("cast_vote", {"choice": choices[int(sample.split("#")[1]) - 1]}))
    agent = Agent(model, capabilities=capabilities)
    agent.tool_plain(world.cast_vote)

    async def vote() -> list[AgentRunResult[Any]]:
        return list(await asyncio.gather(*(agent.run("Vote on the closure") for _ in range(3))))

    return asyncio.run(vote())


def alice_then_bob(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("balance", {})), deps_type=str, capabilities=capabilities)
    agent.tool(world.balance)
    return [agent.run_sync("What is my balance?", deps=user) for user in ("alice", "bob")]


def bob_and_alice_at_once(world: World, capabilities: Sequence[Any]) -> list[AgentRunResult[Any]]:
    agent = Agent(world.model(lambda _: ToolCallPart("balance", {})), deps_type=str, capabilities=capabilities)
    agent.tool(world.balance)

    async def both() -> list[AgentRunResult[Any]]:
        return list(await asyncio.gather(*(agent.run("Balance?", deps=user) for user in ("bob", "alice"))))

    return asyncio.run(both())


PATTERNS: dict[str, Pattern] = {
    "tell then remind": tell_then_remind,
    "a crate three times": a_crate_three_times,
    "a job polled by three runs": a_job_polled_by_three_runs,
    "a catch logged twice": a_catch_logged_twice,
    "three votes at once": three_votes_at_once,
    "alice then bob": alice_then_bob,
    "bob and alice at once": bob_and_alice_at_once,
}

CONCURRENT = {three_votes_at_once, bob_and_alice_at_once}


def shapes(results: list[AgentRunResult[Any]]) -> list[list[tuple[str, list[tuple[str, str]]]]]:
    """Each run's messages as the types of its messages and parts, with the type of each part's content."""
    return [
        [
            (type(m).__name__, [(type(p).__name__, type(getattr(p, "content", None)).__name__) for p in m.parts])
            for m in r.all_messages()
        ]
        for r in results
    ]


def dumped(results: list[AgentRunResult[Any]]) -> list[bytes]:
    return [ModelMessagesTypeAdapter.dump_json(r.all_messages()) for r in results]


@pytest.mark.parametrize("pattern", list(PATTERNS.values()), ids=list(PATTERNS))
def test_runs_sharing_a_ledger_reach_the_world_as_unpinned_and_replay_byte_for_byte(
    pattern: Pattern, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = World()
    plain = pattern(unpinned, [])

    pinned = World()
    ledger = PinLedger(store, types)
    live = pattern(pinned, [Pinning(ledger)])
    ledger.commit()

    if pattern in CONCURRENT:
        # Runs at once interleave as the event loop has them: the same effects and bodies, in some order.
        assert sorted(pinned.effects) == sorted(unpinned.effects)
        assert sorted(pinned.bodies) == sorted(unpinned.bodies)
        assert sorted(r.output for r in live) == sorted(r.output for r in plain)
    else:
        assert pinned.effects == unpinned.effects
        assert pinned.bodies == unpinned.bodies
        assert [r.output for r in live] == [r.output for r in plain]
    assert shapes(live) == shapes(plain)

    replayed = World(refusing=True)
    replay = ReplayPins.from_store(store, types)
    again = pattern(replayed, [Pinning(replay)])
    assert replayed.effects == []
    assert dumped(again) == dumped(live)
    assert replay.unused() == {}


def test_each_run_is_told_what_the_world_said_to_it(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    # The figures the issue gave: two SMS sent, three crates, the job moving on, bob told his own balance.
    world = World()
    ledger = PinLedger(store, types)
    sms = tell_then_remind(world, [Pinning(ledger)])
    crates = a_crate_three_times(world, [Pinning(ledger)])
    polls = a_job_polled_by_three_runs(world, [Pinning(ledger)])
    balances = alice_then_bob(world, [Pinning(ledger)])
    ledger.commit()

    assert [r.output for r in sms] == ["done: sms #1 sent to Ana", "done: sms #2 sent to Ana"]
    assert [r.output for r in crates] == [f"done: order #{n} placed" for n in (1, 2, 3)]
    assert [r.output for r in polls] == [f"done: survey-7 at {p}%" for p in (40, 60, 80)]
    assert [r.output for r in balances] == ["done: alice holds 1200 EUR", "done: bob holds 35 EUR"]


def test_a_run_given_its_id_again_resumes_it_and_a_new_run_does_not(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    world = World()
    ledger = PinLedger(store, types)
    pinning = Pinning(ledger)
    failing = {"after": True}

    def flaky_send(to: str, text: str) -> str:
        """Send a text message, then lose the connection once."""
        sent = world.send_sms(to, text)
        if failing.pop("after", False):
            raise ConnectionError("the gateway dropped the reply")
        return sent

    agent = Agent(world.model(lambda _: ToolCallPart("flaky_send", {"to": "Ana", "text": "Ship at noon"})))
    agent.tool_plain(flaky_send)
    run_id = "019b8d62-0000-7000-8000-0000000a11ce"
    with pytest.raises(ConnectionError):
        agent.run_sync("Tell Ana", capabilities=[pinning], run_id=run_id)
    sent = [e for e in world.effects if e.startswith("sms")]
    assert len(sent) == 1

    # The same run resumed: the failure it met is its answer again, nothing is sent twice.
    with pytest.raises(ConnectionError):
        agent.run_sync("Tell Ana", capabilities=[pinning], run_id=run_id)
    assert [e for e in world.effects if e.startswith("sms")] == sent
    # A new run sends its own message.
    assert agent.run_sync("Tell Ana", capabilities=[pinning]).output == "done: sms #2 sent to Ana"
    assert len([e for e in world.effects if e.startswith("sms")]) == 2


def test_a_replay_answers_as_many_runs_as_its_recording_holds(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    world = World()
    ledger = PinLedger(store, types)
    a_crate_three_times(world, [Pinning(ledger)])
    ledger.commit()

    replay = ReplayPins.from_store(store, types)
    a_crate_three_times(World(refusing=True), [Pinning(replay)])
    # A fourth run is not in the recording: a miss, never a third run's answer given again.
    agent = Agent(World(refusing=True).model(lambda _: ToolCallPart("order_crate", {"item": "crate"})))
    with pytest.raises(PinMiss):
        agent.run_sync("Order a crate", capabilities=[Pinning(replay)])


# --- runs started from threads ----------------------------------------------------------------------------------------

PORTS = ("Brest", "Hull", "Vigo", "Bergen")


def port_agent(world: World, capabilities: Sequence[Any]) -> Agent[None, str]:
    agent = Agent(world.model(lambda sample: ToolCallPart("log_catch", {"species": sample.split("#")[0], "tonnes": 3})))
    agent.tool_plain(world.log_catch)
    agent_capabilities = list(capabilities)

    def run(port: str, run_id: str | None) -> AgentRunResult[str]:
        return agent.run_sync(f"Log the catch at {port}", capabilities=agent_capabilities, run_id=run_id)

    agent.run_port = run  # type: ignore[attr-defined]
    return agent


def in_threads(world: World, capabilities: Sequence[Any], order: Sequence[str], *, named: bool) -> dict[str, bytes]:
    """Each port's run in a thread of its own, started in `order` one after another; its messages by port."""
    agent = port_agent(world, capabilities)
    dumped: dict[str, bytes] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for port in order:
            run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"harbour:{port}")) if named else None
            result = pool.submit(agent.run_port, port, run_id).result()  # type: ignore[attr-defined]
            dumped[port] = ModelMessagesTypeAdapter.dump_json(result.all_messages())
    return dumped


def _outputs(dump: bytes) -> list[str]:
    """The texts a run's model answered with, from its dumped messages."""
    return [p["content"] for m in json.loads(dump) for p in m["parts"] if p["part_kind"] == "text"]


def _run_ids(dump: bytes) -> set[str]:
    """The run ids a run's dumped messages carry."""
    return {m["run_id"] for m in json.loads(dump)}


def outputs_in_threads(world: World, capabilities: Sequence[Any]) -> dict[str, str]:
    """Every port's run in threads at once; the output by port."""
    agent = port_agent(world, capabilities)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {port: pool.submit(agent.run_port, port, None) for port in PORTS}  # type: ignore[attr-defined]
        return {port: future.result().output for port, future in futures.items()}


def test_runs_started_at_once_from_threads_each_draw_their_own_and_replay_in_any_order(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = World()
    plain = outputs_in_threads(unpinned, [])

    pinned = World()
    ledger = PinLedger(store, types)
    live = outputs_in_threads(pinned, [Pinning(ledger)])
    ledger.commit()
    assert sorted(pinned.effects) == sorted(unpinned.effects)
    assert len([e for e in pinned.effects if e.startswith("catch")]) == 4
    assert set(live) == set(plain) == set(PORTS)

    # Started in another order than they were recorded in, each run is answered from its own pins.
    replayed = World(refusing=True)
    replay = ReplayPins.from_store(store, types)
    assert outputs_in_threads(replayed, [Pinning(replay)]) == live
    assert replayed.effects == [] and replay.unused() == {}


def test_runs_named_by_their_caller_replay_byte_for_byte_whatever_order_their_threads_start_in(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = in_threads(World(), [Pinning(ledger)], PORTS, named=True)
    ledger.commit()

    replayed = World(refusing=True)
    again = in_threads(replayed, [Pinning(ReplayPins.from_store(store, types))], PORTS[::-1], named=True)
    assert replayed.effects == []
    assert again == live


class PlacedWhereTheyStart(Pinning):
    """`Pinning` as pydantic-ai before 2.78 drives it: asked for a run's id with nothing of its inputs."""

    def get_default_run_id(self) -> str | None:
        return super().get_default_run_id()


@pytest.mark.skipif(
    not says_run_inputs_before_its_id(), reason="pydantic-ai before 2.78 says no run's inputs at its id"
)
def test_runs_not_named_replay_byte_for_byte_whatever_order_their_threads_start_in(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = in_threads(World(), [Pinning(ledger)], PORTS, named=False)
    ledger.commit()

    # Each run is placed where the recorded run asked the same was: its id, its times and its calls.
    for order in (PORTS[::-1], PORTS[1:] + PORTS[:1]):
        replayed, replay = World(refusing=True), ReplayPins.from_store(store, types)
        assert in_threads(replayed, [Pinning(replay)], order, named=False) == live
        assert replayed.effects == [] and replay.unused() == {}


@pytest.mark.skipif(
    not says_run_inputs_before_its_id(), reason="pydantic-ai before 2.78 says no run's inputs at its id"
)
def test_runs_recorded_where_they_started_replay_by_their_inputs_under_a_later_pydantic_ai(
    tmp_path: Any, types: EventTypeRegistry
) -> None:
    # Recorded as under 2.68 (the id drawn with nothing of the run; its place pinned when it starts), and as under
    # 2.78: the same pins in the same order, so one recording serves both; replayed by inputs in any order.
    recorded: list[list[tuple[str, str]]] = []
    for pinning in (PlacedWhereTheyStart, Pinning):
        store = SQLiteEventStore(tmp_path / f"{pinning.__name__}.db")
        ledger = PinLedger(store, types)
        seeded = SeededRun("harbours")
        live = in_threads(World(), [pinning(ledger, new_id=seeded.new_id, clock=seeded.now)], PORTS, named=False)
        ledger.commit()
        pins = [e.payload_json() for e in store.read() if e.type == "pin_promoted"]
        # Each pin's kind, in order, and the value of each of the runs' ids, places and times (seeded).
        recorded.append([(pin["kind"], pin["raw"] if pin["kind"].startswith("run_") else None) for pin in pins])
        assert sum(kind == "run_place" for kind, _ in recorded[-1]) == len(PORTS)
        replayed = World(refusing=True)
        again = in_threads(replayed, [Pinning(ReplayPins.from_store(store, types))], PORTS[::-1], named=False)
        assert again == live and replayed.effects == []
    assert recorded[0] == recorded[1]


def test_runs_not_named_are_placed_by_the_order_they_start_in_before_pydantic_ai_2_78(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # What pydantic-ai 2.78's inputs buy, and what naming runs buys before it: placed where it starts, a run started
    # in another place takes that place's id and times (its calls are its own, found by what they ask).
    ledger = PinLedger(store, types)
    live = in_threads(World(), [PlacedWhereTheyStart(ledger)], PORTS, named=False)
    ledger.commit()

    again = in_threads(
        World(refusing=True), [PlacedWhereTheyStart(ReplayPins.from_store(store, types))], PORTS[::-1], named=False
    )
    assert again != live
    assert {port: _outputs(dump) for port, dump in again.items()} == {port: _outputs(d) for port, d in live.items()}
    assert (
        in_threads(
            World(refusing=True), [PlacedWhereTheyStart(ReplayPins.from_store(store, types))], PORTS, named=False
        )
        == live
    )


@dataclass
class RunIds(AbstractCapability[Any]):
    """Notes the id of every run it sees start, by prompt."""

    seen: dict[str, str] = field(default_factory=dict[str, str])

    async def for_run(self, ctx: RunContext[Any]) -> RunIds:
        self.seen[str(ctx.prompt)] = str(ctx.run_id)
        return self


def test_a_run_whose_inputs_moved_never_shares_a_place_with_a_recorded_run(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = in_threads(World(), [Pinning(ledger)], PORTS[:2], named=False)
    ledger.commit()

    # Hull was recorded second and starts first; Vigo, never recorded, starts second, where Hull was recorded.
    replay, ids = ReplayPins.from_store(store, types), RunIds()
    agent = port_agent(World(refusing=True), [Pinning(replay), ids])
    hull = agent.run_port("Hull", None)  # type: ignore[attr-defined]
    with pytest.raises(PinMiss):
        agent.run_port("Vigo", None)  # type: ignore[attr-defined]
    brest = agent.run_port("Brest", None)  # type: ignore[attr-defined]
    assert len(set(ids.seen.values())) == 3  # Vigo never takes Hull's id, nor its calls and times
    if says_run_inputs_before_its_id():
        assert ModelMessagesTypeAdapter.dump_json(hull.all_messages()) == live["Hull"]
        assert ModelMessagesTypeAdapter.dump_json(brest.all_messages()) == live["Brest"]


class Paced:
    """A replay that holds two runs at once where each reads its place, and again where each draws its id."""

    def __init__(self, replay: ReplayPins) -> None:
        self._replay = replay
        self.first_reading = threading.Event()
        self._together = threading.Barrier(2, timeout=10)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replay, name)

    def recorded(self, key: str) -> Any:
        self.first_reading.set()
        self._together.wait()
        return self._replay.recorded(key)

    def answering_position(self, key: str) -> Any:
        if key.startswith("p1:run_id:"):
            self._together.wait()
        return self._replay.answering_position(key)


@pytest.mark.skipif(not says_run_inputs_before_its_id(), reason="pydantic-ai < 2.78 says no run's inputs at its id")
def test_two_runs_deciding_their_places_at_once_never_take_the_same_one(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    in_threads(World(), [Pinning(ledger)], PORTS[:2], named=False)
    ledger.commit()

    # Hull starts first (Brest's start place) and reads it was recorded second; Vigo, never recorded, starts second:
    # its start place is the one Hull is about to take. They decide together.
    paced, ids = Paced(ReplayPins.from_store(store, types)), RunIds()
    agent = port_agent(World(refusing=True), [Pinning(cast(Any, paced)), ids])
    with ThreadPoolExecutor(max_workers=2) as pool:
        hull = pool.submit(agent.run_port, "Hull", None)  # type: ignore[attr-defined]
        assert paced.first_reading.wait(10)
        vigo = pool.submit(agent.run_port, "Vigo", None)  # type: ignore[attr-defined]
        hull.result()
        with pytest.raises(PinMiss):
            vigo.result()
    assert len(set(ids.seen.values())) == 2
