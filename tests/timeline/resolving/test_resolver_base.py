"""`Resolver` is one abstract base class: its three ways of resolving are abstract, every other member has a default."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import pkgutil
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from pydantic_ai import Agent
from typing_extensions import override

import anagrapheus
from anagrapheus import PinnedModel, Pinning, mint_entity_id, pinned_tool
from anagrapheus.timeline import EventTypeRegistry, JSONValue, PinLedger, PinResolver, Resolver
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import PendingEvent, RunInputs
from anagrapheus.timeline.resolving.resolver import FailureCodec, StreamDraw, as_resolver
from tests.conftest import SaysNothing, Scripted

T = TypeVar("T")
S = TypeVar("S")


class OnlyTwo(Resolver):
    """Forgot `resolve_stream`."""

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


class Unpinned(OnlyTwo):
    """Draws every key live and pins nothing: the three ways, and no other member."""

    @override
    def resolve_stream(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> AbstractAsyncContextManager[StreamDraw[S, T]]:
        raise NotImplementedError


def _event() -> PendingEvent:
    return EventTypeRegistry().encode(RunInputs(unit_id="u", run_id="r", inputs={}), correlation_id="u")


def test_a_subclass_missing_a_way_of_resolving_cannot_be_made() -> None:
    with pytest.raises(TypeError, match=r"abstract method.*resolve_stream"):
        OnlyTwo()  # type: ignore[abstract]  # pyright: ignore[reportAbstractUsage]


def test_every_member_but_the_three_ways_has_a_default_a_live_resolver_with_no_unit() -> None:
    resolver = Unpinned()
    assert (resolver.draws_live, resolver.unit, resolver.draws_into, resolver.replays) == (True, None, None, False)
    assert resolver.answering_position("k") is resolver
    assert resolver.asked("k") == 0 and resolver.recorded("k") is None
    assert resolver.serves_each_run is None and resolver.divergence is None
    resolver.answered_within(["k"])  # nothing to take note of
    resolver.note_event(_event())  # dropped: it records nothing
    held = resolver.attachments
    assert held is not None and resolver.attachments is held  # made once, on first use
    assert resolver.resolve("k", kind="tool_call", effect=lambda: 3, interpret=lambda raw: raw) == 3
    assert PinResolver is Resolver  # the old name of the contract


def test_a_resolver_is_used_as_it_is_and_warns_nothing(ledger: PinLedger) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert as_resolver(ledger) is ledger
        assert PinnedModel(Scripted("m").model, ledger).resolver is ledger
        assert Pinning(ledger).resolver is ledger


def test_an_old_protocol_resolver_still_works_adapted_once_with_one_warning(ledger: PinLedger) -> None:
    quiet = cast(Resolver, SaysNothing(ledger))
    with pytest.warns(
        DeprecationWarning, match=r"not subclass anagrapheus\.timeline\.Resolver \(SaysNothing\)"
    ) as said:
        agent = Agent(Scripted("scripted-uk").model, capabilities=[Pinning(quiet)])
    assert len([w for w in said if issubclass(w.category, DeprecationWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # adapted once: the run reads the adapted resolver's members, quietly
        agent.run_sync("Where do the fleets land?")
    assert {pin.kind for pin in ledger.pins()} >= {"model_call"}
    # It says nothing, so it is live with no unit, and keeps nothing for the layers above: runs' ids unpinned.
    adapted = as_resolver_quietly(quiet)
    assert (adapted.draws_live, adapted.unit, adapted.draws_into, adapted.replays) == (True, None, None, False)
    assert adapted.answering_position("k") is adapted and adapted.asked("k") == 0 and adapted.recorded("k") is None
    assert adapted.attachments is None and adapted.serves_each_run is None
    adapted.answered_within(["k"])
    adapted.note_event(_event())


def as_resolver_quietly(resolver: object) -> Resolver:
    with pytest.warns(DeprecationWarning):
        return as_resolver(resolver)


@pytest.mark.parametrize("entry", ["PinnedModel", "pinned_tool", "mint_entity_id"])
def test_each_entry_point_adapts_an_old_protocol_resolver_with_one_warning(ledger: PinLedger, entry: str) -> None:
    quiet = cast(Resolver, SaysNothing(ledger))

    def lookup(city: str) -> str:
        return f"{city}: 3 m"

    with pytest.warns(DeprecationWarning, match=r"\(SaysNothing\).*subclass Resolver") as said:
        if entry == "PinnedModel":
            PinnedModel(Scripted("m").model, quiet)
        elif entry == "pinned_tool":
            assert asyncio.run(pinned_tool(quiet, lookup)("Hull")) == "Hull: 3 m"
        else:
            mint_entity_id({"kind": "port"}, resolver=quiet)
    # Only the deprecations: pytest.warns records every warning of the block, a ResourceWarning the garbage collector
    # raises meanwhile for another test's event loop too (which failed this test in CI).
    said = [w for w in said if issubclass(w.category, DeprecationWarning)]
    assert len(said) == 1
    assert said[0].filename == __file__  # it points at the line that handed the resolver over
    if entry != "PinnedModel":
        assert len(ledger.pins()) == 1


class SaysAll:
    """An old-protocol resolver that says every trait, over a ledger it draws into."""

    def __init__(self, ledger: PinLedger, other: object) -> None:
        self.ledger = ledger
        self.other = other
        self.noted: list[object] = []
        self.attachments = ledger.attachments

    draws_live = False
    unit = "its-unit"
    serves_each_run = None
    divergence = Divergence(key="p1:model_call:k", kind="model_call", after_hits=2)

    @property
    def draws_into(self) -> object:
        return self.ledger

    def resolve(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve(key, **options)

    async def aresolve(self, key: str, **options: Any) -> Any:
        return await self.ledger.aresolve(key, **options)

    def resolve_stream(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve_stream(key, **options)

    def answering_position(self, key: str) -> object:
        return {"self": self, "none": None}.get(key, self.other)

    def asked(self, key: str) -> int:
        return len(key)

    def recorded(self, key: str) -> JSONValue:
        return {"held": key}

    def answered_within(self, keys: Iterable[str]) -> None:
        self.noted.extend(keys)

    def note_event(self, event: PendingEvent) -> None:
        self.noted.append(event)


def test_an_old_protocol_resolver_that_says_its_traits_is_read_through_the_adapter(ledger: PinLedger) -> None:
    other = SaysNothing(ledger)
    says = SaysAll(ledger, other)
    adapted = as_resolver_quietly(says)
    assert (adapted.draws_live, adapted.unit, adapted.replays) == (False, "its-unit", True)
    assert adapted.draws_into is ledger and adapted.attachments is ledger.attachments
    assert adapted.answering_position("self") is adapted and adapted.answering_position("none") is None
    elsewhere = adapted.answering_position("other")
    assert isinstance(elsewhere, Resolver) and elsewhere.draws_live  # the resolver it names, adapted too
    assert adapted.asked("abc") == 3 and adapted.recorded("k") == {"held": "k"}
    event = _event()
    adapted.answered_within(["k1"])
    adapted.note_event(event)
    assert says.noted == ["k1", event]
    assert adapted.serves_each_run is None
    assert adapted.divergence is says.divergence


def _package_classes() -> list[type]:
    found: list[type] = []
    for module in pkgutil.walk_packages(anagrapheus.__path__, "anagrapheus."):
        if module.name.endswith("__main__"):
            continue
        try:
            loaded = importlib.import_module(module.name)
        except ImportError:  # an optional extra that is not installed (dbos, say)
            continue
        found.extend(cls for _, cls in inspect.getmembers(loaded, inspect.isclass) if cls.__module__ == module.name)
    return found


def test_every_resolver_class_in_the_package_subclasses_resolver() -> None:
    ways = ("resolve", "aresolve", "resolve_stream")
    resolvers = [cls for cls in _package_classes() if all(callable(getattr(cls, way, None)) for way in ways)]
    names = {cls.__qualname__ for cls in resolvers}
    assert {"PinLedger", "ReplayPins", "DelegatingResolver", "ForkPins", "UnitPerRun", "WorldPinned"} <= names
    assert [cls.__qualname__ for cls in resolvers if not issubclass(cls, Resolver)] == []


def test_no_module_but_the_adapter_reads_a_resolver_trait_with_getattr() -> None:
    traits = {
        "draws_live",
        "unit",
        "draws_into",
        "answering_position",
        "asked",
        "recorded",
        "answered_within",
        "note_event",
        "attachments",
        "serves_each_run",
        "replays",
        "divergence",
        "holding",
    }
    package = Path(anagrapheus.__file__).parent
    reading: list[str] = []
    for source in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in traits
            ):
                reading.append(f"{source.relative_to(package)}:{node.lineno}")
    assert reading and all(place.startswith("timeline/resolving/resolver.py:") for place in reading), reading
