"""UnitPerRun: one Pinning on an agent, each run's pins in the unit its run names, closed as the run ends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from typing_extensions import override

from anagrapheus import Pinning
from anagrapheus.errors import PinMiss, UnitClosed, UsageError
from anagrapheus.provider import UnitPerRun
from anagrapheus.provider.unit_per_run import fails_for_good
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.events import PinPromoted, PinsAbandoned
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver
from tests.conftest import Scripted


@dataclass
class Harbour:
    """Tools that count their runs; `broken` makes the tide gauge fail."""

    calls: list[str] = field(default_factory=list[str])
    broken: BaseException | None = None

    def agent(self, model: Any, pinning: Pinning) -> Agent[str, str]:
        harbour = self
        agent = Agent(model, deps_type=str, capabilities=[pinning])

        @agent.tool_plain
        def weather(city: str) -> str:
            """Read the weather in a city."""
            harbour.calls.append("weather")
            return f"wind 4 in {city}"

        # A barrier: the weather, asked beside it, has ended and is pinned before the gauge fails. Run in parallel,
        # an interruption could beat the weather's pin under load, and the next run would draw the weather again.
        @agent.tool_plain(sequential=True)
        def tide(city: str) -> str:
            """Read the tide in a city."""
            harbour.calls.append("tide")
            if harbour.broken is not None:
                raise harbour.broken
            return f"high tide in {city}"

        return agent


class Interrupted(BaseException):
    """Stands for the process being stopped mid-run: not an `Exception`, so not the run's failure."""


def by_deps(ctx: RunContext[Any]) -> str:
    return f"unit-{ctx.deps}"


def unit_events(store: SQLiteEventStore, unit_id: str) -> list[Any]:
    return [e for e in store.read() if e.correlation_id == unit_id]


class Audited(DelegatingResolver):
    """A resolver of the application's own around a `UnitPerRun`: it counts the keys asked, and says what it wraps."""

    def __init__(self, inner: UnitPerRun) -> None:
        self.inner = inner
        self.kinds: list[str] = []

    @property
    @override
    def serves_each_run(self) -> UnitPerRun:
        return self.inner

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        self.kinds.append(kind)
        return self.inner, key


def test_a_resolver_that_says_it_serves_each_run_is_served_per_run(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Regression: Pinning recognised a per-run resolver by its class (isinstance UnitPerRun), so one wrapping it was
    # taken for a resolver of one unit, and its first draw was refused outside any run's unit.
    audited = Audited(UnitPerRun(store, types, unit_of=by_deps))
    agent = Harbour().agent(Scripted("m").model, Pinning(audited))

    agent.run_sync("Where?", deps="a")

    assert "model_call" in audited.kinds
    assert store.open_units() == []
    assert PinLedger(store, types, unit_id="unit-a").state == "committed"
    assert "run_inputs" in [e.type for e in unit_events(store, "unit-a")]


def test_each_run_pins_into_the_unit_it_names_and_commits_as_it_ends(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    routed = UnitPerRun(store, types, unit_of=by_deps)
    scripted, harbour = Scripted("m"), Harbour()
    agent = harbour.agent(scripted.model, Pinning(routed))

    first = agent.run_sync("Where?", deps="a")
    second = agent.run_sync("Where?", deps="b")

    assert first.output == second.output
    assert store.open_units() == []
    for unit in ("unit-a", "unit-b"):
        assert PinLedger(store, types, unit_id=unit).state == "committed"
        kinds = [e.type for e in unit_events(store, unit)]
        # Its pins, and what its one run was asked (the run's inputs, recorded under Pinning).
        assert kinds and set(kinds) == {PinPromoted.event_type, "run_inputs"}
        assert kinds.count("run_inputs") == 1
    # Each unit holds its own run's draws: two model requests and two tool calls apiece.
    assert scripted.calls == 4 and sorted(harbour.calls) == ["tide", "tide", "weather", "weather"]

    # One unit replays its run alone, with no model and no tool reached.
    replayed, quiet = Scripted("m"), Harbour()
    replay = ReplayPins.from_events(store.read(), types, unit_id="unit-b")
    again = quiet.agent(replayed.model, Pinning(replay)).run_sync("Where?", deps="b")
    assert again.output == second.output
    assert replayed.calls == 0 and quiet.calls == []


def test_a_run_that_fails_for_good_abandons_its_unit(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    scripted, harbour = Scripted("m"), Harbour(broken=RuntimeError("gauge down"))
    agent = harbour.agent(scripted.model, Pinning(UnitPerRun(store, types, unit_of=by_deps)))

    with pytest.raises(RuntimeError, match="gauge down"):
        agent.run_sync("Where?", deps="a")

    assert PinLedger(store, types, unit_id="unit-a").state == "abandoned"
    (abandoned,) = unit_events(store, "unit-a")
    assert abandoned.type == PinsAbandoned.event_type
    assert "failed for good (RuntimeError: gauge down)" in abandoned.payload
    # A unit is closed once: running it again is refused, not silently recorded twice.
    with pytest.raises(UnitClosed):
        harbour.agent(Scripted("m").model, Pinning(UnitPerRun(store, types, unit_of=by_deps))).run_sync(
            "Where?", deps="a"
        )


def test_an_interrupted_run_leaves_its_unit_open_and_the_next_run_resumes_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # An interruption (not an Exception: the process stopping, say) leaves the unit open, as a crash does.
    routed = UnitPerRun(store, types, unit_of=by_deps)
    scripted, harbour = Scripted("m"), Harbour(broken=Interrupted())
    agent = harbour.agent(scripted.model, Pinning(routed))
    with pytest.raises(Interrupted):
        agent.run_sync("Where?", deps="a")
    (open_unit,) = store.open_units()
    assert open_unit.unit_id == "unit-a"
    assert scripted.calls == 1 and harbour.calls.count("weather") == 1

    harbour.broken = None
    result = agent.run_sync("Where?", deps="a")
    # The first model request and the weather were answered from the open unit; only the tide and the answer drew.
    assert scripted.calls == 2 and harbour.calls.count("weather") == 1
    assert "high tide in Paris" in result.output
    assert PinLedger(store, types, unit_id="unit-a").state == "committed"


def test_a_custom_rule_keeps_a_failed_unit_open(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    routed = UnitPerRun(store, types, unit_of=by_deps, abandons=lambda error: False)
    agent = Harbour(broken=RuntimeError("gauge down")).agent(Scripted("m").model, Pinning(routed))
    with pytest.raises(RuntimeError):
        agent.run_sync("Where?", deps="a")
    assert [unit.unit_id for unit in store.open_units()] == ["unit-a"]


def test_the_default_rule_keeps_interruptions_open() -> None:
    assert fails_for_good(RuntimeError("x"))
    assert not fails_for_good(asyncio.CancelledError())
    assert not fails_for_good(KeyboardInterrupt())


@pytest.mark.anyio
async def test_concurrent_runs_in_one_unit_close_it_once_both_ended(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    routed = UnitPerRun(store, types, unit_of=lambda ctx: "shared")
    scripted, harbour = Scripted("m"), Harbour()
    agent = harbour.agent(scripted.model, Pinning(routed))
    concurrent = [agent.run("Where?", deps="a"), agent.run("Where?", deps="b")]
    first, second = await asyncio.gather(*concurrent)
    assert first.output == second.output
    assert PinLedger(store, types, unit_id="shared").state == "committed"
    # Each run asks as a run of its own (issue #34): the second run's identical calls reach the world too.
    assert scripted.calls == 4 and sorted(harbour.calls) == ["tide", "tide", "weather", "weather"]


def test_unitperrun_refuses_a_draw_outside_a_run_and_a_bad_unit_id(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    routed = UnitPerRun(store, types, unit_of=lambda ctx: "")
    with pytest.raises(UsageError, match="only inside an agent run"):
        routed.resolve("k", kind="x", effect=lambda: 1, interpret=lambda raw: raw)
    with pytest.raises(UsageError, match="not a unit id"):
        Harbour().agent(Scripted("m").model, Pinning(routed)).run_sync("Where?", deps="a")
    assert store.open_units() == []


def test_unitperrun_streams_into_the_runs_unit(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    scripted, harbour = Scripted("m"), Harbour()
    agent = harbour.agent(scripted.model, Pinning(UnitPerRun(store, types, unit_of=by_deps)))

    async def streamed() -> str:
        async with agent.run_stream("Where?", deps="s") as run:
            return await run.get_output()

    output = asyncio.run(streamed())
    assert "high tide" in output
    assert PinLedger(store, types, unit_id="unit-s").state == "committed"
    replay = ReplayPins.from_events(store.read(), types, unit_id="unit-s")
    replayed = Scripted("m")
    assert Harbour().agent(replayed.model, Pinning(replay)).run_sync("Where?", deps="s").output
    assert replayed.calls == 0


def test_dbos_workflow_id_outside_a_workflow_says_so() -> None:
    pytest.importorskip("dbos", reason="DBOS is an optional extra (pip install -e '.[dbos]')")
    from anagrapheus.provider import dbos_workflow_id

    with pytest.raises(UsageError, match="not inside a DBOS workflow"):
        dbos_workflow_id(None)  # type: ignore[arg-type]


def test_a_run_of_a_unit_committed_before_is_answered_from_its_log(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # A workflow killed after its unit committed but before the engine saw it finish is run again on recovery:
    # it must repeat nothing (seen once under load as UnitClosed, the recovered workflow failing).
    scripted, harbour = Scripted("m"), Harbour()
    first = harbour.agent(scripted.model, Pinning(UnitPerRun(store, types, unit_of=by_deps))).run_sync(
        "Where?", deps="a"
    )
    reached = (scripted.calls, list(harbour.calls))
    events = len(list(store.read()))

    recovered = harbour.agent(scripted.model, Pinning(UnitPerRun(store, types, unit_of=by_deps)))
    again = recovered.run_sync("Where?", deps="a")

    assert again.output == first.output
    assert (scripted.calls, harbour.calls) == reached
    assert len(list(store.read())) == events  # nothing committed twice
    with pytest.raises(PinMiss):
        recovered.run_sync("Where else?", deps="a")


def test_a_replay_of_a_per_run_unit_takes_the_recorded_run_id_and_gives_the_same_messages(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Regression (#44): UnitPerRun pinned no run id (no unit is known before the run starts), so a replay of its
    # unit drew a fresh one, and its messages differed from the recorded run's unless the caller typed the id in.
    harbour = Harbour()
    recorded = harbour.agent(Scripted("m").model, Pinning(UnitPerRun(store, types, unit_of=by_deps))).run_sync(
        "Where?", deps="a", run_id="the-engines-run-id"
    )

    replay = ReplayPins.from_events(store.read(), types, unit_id="unit-a")
    again = Harbour().agent(Scripted("m").model, Pinning(replay)).run_sync("Where?", deps="a")

    assert again.run_id == "the-engines-run-id"
    assert again.all_messages_json() == recorded.all_messages_json()
