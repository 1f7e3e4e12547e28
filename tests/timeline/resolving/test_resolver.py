"""A resolver says what it is (live, its unit, what it replays); process-wide state a scope takes is put back."""

from __future__ import annotations

import ast
import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from typing_extensions import override

import anagrapheus
from anagrapheus import Pinning
from anagrapheus.provider import ForkPins, UnitPerRun, every_agent_run
from anagrapheus.testing.rerun import WorldPinned
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolving.resolver import Attachment, DelegatingResolver, Resolver
from tests.conftest import Scripted


def _same(raw: JSONValue) -> JSONValue:
    return raw


NOTES: Attachment[list[str]] = Attachment("notes")
"""What a layer above might keep per resolver."""


def _keeps_its_own(resolver: Resolver) -> list[str]:
    """The notes `resolver` keeps, asserting they are made once and then the same whoever asks."""
    held = resolver.attachments
    assert held is not None
    notes = held.get(NOTES, list)
    assert held.get(NOTES, list) is notes and resolver.attachments is held
    return notes


def _recorded(store: SQLiteEventStore, types: EventTypeRegistry, *units: str) -> list[Any]:
    for unit in units:
        ledger = PinLedger(store, types, unit_id=unit)
        ledger.resolve(f"{unit}-key", kind="tool_call", effect=lambda: 1, interpret=_same)
        ledger.commit()
    return list(store.read())


def test_a_ledger_is_live_and_its_own_unit(ledger: PinLedger) -> None:
    assert ledger.draws_live is True and ledger.replays is False
    assert ledger.unit == ledger.unit_id
    assert ledger.draws_into is ledger
    assert ledger.answering_position("k") is ledger
    assert ledger.asked("k") == 0 and ledger.recorded("k") is None
    assert ledger.serves_each_run is None
    _keeps_its_own(ledger)


def test_a_replay_says_it_replays_and_which_unit_its_runs_are_positions_in(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    events = _recorded(store, types, "a", "b")
    one = ReplayPins.from_events(events, types, unit_id="a")
    assert (one.draws_live, one.replays, one.unit, one.draws_into) == (False, True, "a", None)
    assert one.asked("a-key") == 1 and one.asked("b-key") == 0
    _keeps_its_own(one)
    # A position it holds is answered from its pin; one it lacks is drawn unpinned under strict replay.
    assert one.answering_position("a-key") is one
    assert one.answering_position("missing") is None

    both = ReplayPins.from_events(events, types)
    assert both.unit is None  # several units: whose position a run is cannot be told
    assert both.answering_position("a-key") is None

    into = PinLedger(store, types, unit_id="c")
    anew = ReplayPins.from_events(events, types, unit_id="a", on_miss="record", into=into)
    assert (anew.draws_live, anew.unit, anew.draws_into) == (False, "c", into)
    assert anew.answering_position("a-key") is anew
    assert anew.answering_position("missing") is into


def test_delegating_resolvers_say_nothing_of_what_they_delegate_to(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    events = _recorded(store, types, "a")
    pins = ReplayPins.from_events(events, types, unit_id="a")
    into = PinLedger(store, types, unit_id="fork")
    per_run = UnitPerRun(store, types, unit_of=lambda ctx: "u")
    delegating: list[DelegatingResolver] = [
        ForkPins(events, origin="a", into=into, after_pins=0),
        per_run,
        WorldPinned(pins, into),
    ]
    for resolver in delegating:
        # A fork says where its runs' inputs go: the new unit, so the fork can be asked again.
        noted = into if isinstance(resolver, ForkPins) else None
        assert (resolver.draws_live, resolver.unit, resolver.draws_into) == (True, None, noted)
        assert resolver.asked("a-key") == 0 and not resolver.replays
        assert resolver.answering_position("a-key") is resolver
        # Only a resolver that picks its unit per run serves each run.
        assert resolver.serves_each_run is (per_run if resolver is per_run else None)
        # Its own attachments, not the ones of a resolver it picks: those vary by key.
        assert _keeps_its_own(resolver) is not _keeps_its_own(into) and _keeps_its_own(resolver) is not pins.attachments


class Renamed(DelegatingResolver):
    """Asks its ledger for every key under a prefix: the base forwards all three ways of resolving."""

    def __init__(self, ledger: PinLedger) -> None:
        self.ledger = ledger
        self.targets: list[tuple[str, str]] = []

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        self.targets.append((key, kind))
        return self.ledger, f"renamed:{key}"


def test_a_delegating_resolver_forwards_each_way_of_resolving_to_its_target(ledger: PinLedger) -> None:
    renamed = Renamed(ledger)
    assert renamed.resolve("k1", kind="tool_call", effect=lambda: 1, interpret=_same) == 1

    async def drawn() -> object:
        return 2

    assert asyncio.run(renamed.aresolve("k2", kind="tool_call", effect=drawn, interpret=_same)) == 2

    class Stream:
        async def __aenter__(self) -> list[int]:
            return [3]

        async def __aexit__(self, *args: object) -> None:
            return None

    async def streamed() -> object:
        async with renamed.resolve_stream(
            "k3", kind="model_call", effect=Stream, capture=lambda s: s, interpret=_same
        ) as draw:
            return draw.live

    assert asyncio.run(streamed()) == [3]
    assert renamed.targets == [("k1", "tool_call"), ("k2", "tool_call"), ("k3", "model_call")]
    assert [pin.key for pin in ledger.pins()] == ["renamed:k1", "renamed:k2", "renamed:k3"]


def test_no_provider_or_testing_module_asks_which_class_its_resolver_is() -> None:
    # The resolver says what the layers above need (see `PinResolver`); they never test its class.
    package = Path(anagrapheus.__file__).parent
    asking: list[str] = []
    for source in sorted([*package.joinpath("provider").rglob("*.py"), *package.joinpath("testing").rglob("*.py")]):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                classes = ast.unparse(node.args[1]) if len(node.args) == 2 else ""
                if any(name in classes for name in ("ReplayPins", "PinLedger")):
                    asking.append(f"{source.relative_to(package)}:{node.lineno}")
    assert asking == []


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level."""
    names: set[str] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _keyed_by_id(node: ast.AST) -> bool:
    return any(
        isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "id"
        for call in ast.walk(node)
    )


def test_no_provider_module_keeps_a_registry_keyed_by_id() -> None:
    # State kept for an object belongs to the object (a resolver's clocks are in its `attachments`), not to a
    # process-wide table by `id()`. The one left is the repeat rule's counts per run: a run's usage is the only
    # object every pinned call of the run sees, and pydantic-ai gives it no room (see provider/occurrence.py).
    package = Path(anagrapheus.__file__).parent
    registries: set[str] = set()
    for source in sorted(package.joinpath("provider").rglob("*.py")):
        tree = ast.parse(source.read_text())
        names = _module_names(tree)
        for node in ast.walk(tree):
            # REGISTRY[id(x)], REGISTRY.get(id(x)) (or pop, setdefault), id(x) in REGISTRY
            looked_up: list[ast.expr] = []
            if isinstance(node, ast.Subscript) and _keyed_by_id(node.slice):
                looked_up.append(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                looked_up.extend([node.func.value] if _keyed_by_id(node.args[0]) else [])
            elif isinstance(node, ast.Compare) and _keyed_by_id(node.left):
                looked_up.extend(node.comparators)
            registries.update(
                f"{source.relative_to(package)}:{name.id}"
                for name in looked_up
                if isinstance(name, ast.Name) and name.id in names
            )
    assert registries == {"provider/occurrence.py:_arrived"}


def test_every_agent_run_puts_agent_iter_back_as_it_closes(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    original = Agent.iter
    ledger = PinLedger(store, types)
    with every_agent_run(Pinning(ledger)):
        assert Agent.iter is not original
        Agent(Scripted("scripted-uk").model).run_sync("Where do the fleets land?")
    assert Agent.iter is original
    pinned = len(ledger.pins())
    assert pinned  # the run inside the scope was pinned
    Agent(Scripted("scripted-uk").model).run_sync("Where do the fleets land?")
    assert len(ledger.pins()) == pinned  # the one after it was not


def test_a_wrapper_put_over_the_scopes_stays_and_runs_pass_through_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Another library wrapped `Agent.iter` while a scope was open: taking ours out would take its wrapper out too.
    original = Agent.iter
    seen: list[str] = []

    def theirs_over(inner: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(inner)
        def wrapper(self: Agent[Any, Any], *args: Any, **kwargs: Any) -> Any:
            seen.append("theirs")
            return inner(self, *args, **kwargs)

        return wrapper

    try:
        with every_agent_run(Pinning(PinLedger(store, types))):
            ours = Agent.iter
            setattr(Agent, "iter", theirs_over(ours))  # noqa: B010
        assert getattr(Agent.iter, "__wrapped__", None) is ours  # theirs stays, over ours
        Agent(Scripted("scripted-uk").model).run_sync("Where do the fleets land?")  # no scope: passed through
        assert seen == ["theirs"]
        ledger = PinLedger(store, types)
        with every_agent_run(Pinning(ledger)):
            assert getattr(Agent.iter, "__wrapped__", None) is ours  # ours is still in place: not wrapped twice
            Agent(Scripted("scripted-uk").model).run_sync("Where do the fleets land?")
        assert ledger.pins()
    finally:
        setattr(Agent, "iter", original)  # noqa: B010
        from anagrapheus.provider import every_run

        every_run._replaced = None  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("scopes", [1, 3])
def test_scopes_leave_agent_iter_as_they_found_it(
    scopes: int, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    original = Agent.iter
    for _ in range(scopes):
        with pytest.raises(RuntimeError, match="inside"), every_agent_run(Pinning(PinLedger(store, types))):
            raise RuntimeError("inside the scope")
    assert Agent.iter is original


def test_no_resolver_pickles_each_refused_with_a_typed_error_saying_what_to_hand_over(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Issue #41: pickling a ReplayPins raised a bare `TypeError: cannot pickle '_thread.lock' object`.
    import copy
    import pickle

    from anagrapheus.errors import ResolverNotPicklable, UsageError

    events = _recorded(store, types, "a")
    into = PinLedger(store, types, unit_id="fork")
    pins = ReplayPins.from_events(events, types, unit_id="a")
    resolvers: list[Resolver] = [
        pins,
        into,
        ForkPins(events, origin="a", into=into, after_pins=0),
        UnitPerRun(store, types, unit_of=lambda ctx: "u"),
        WorldPinned(pins, into),
    ]
    for resolver in resolvers:
        name = type(resolver).__name__
        for attempt in (pickle.dumps, copy.deepcopy):
            with pytest.raises(ResolverNotPicklable) as raised:
                attempt(resolver)
            # A TypeError still, as pickling's callers expect, and the package's own misuse error.
            assert isinstance(raised.value, TypeError) and isinstance(raised.value, UsageError)
            assert raised.value.resolver == name
            assert str(raised.value).startswith(f"a {name} cannot be pickled: it answers within the process")
            assert "ReplayPins.from_recording(path)" in str(raised.value)
        # A shallow copy shares what the original holds, as it always did.
        assert vars(copy.copy(resolver)) == vars(resolver)
    # What holds a resolver says the same: the refusal is the resolver's, not a lock's deep inside it.
    with pytest.raises(ResolverNotPicklable, match="a ReplayPins cannot be pickled"):
        pickle.dumps(Pinning(pins))
