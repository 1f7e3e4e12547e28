"""Names kept for one release after they were replaced: each still works, and warns with what to use instead."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import anagrapheus
import anagrapheus.timeline
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, EventTypeRegistry, PinPromoted, events_of
from anagrapheus.timeline.pins import PinLedger
from anagrapheus.timeline.recording import pin_events
from anagrapheus.timeline.sqlite import SQLiteEventStore
from anagrapheus.timeline.store import ScratchPin


def test_register_builtin_events_warns_and_changes_nothing() -> None:
    from anagrapheus.timeline.events import register_builtin_events

    types = EventTypeRegistry()
    with pytest.warns(DeprecationWarning, match="register_builtin_events is deprecated.*knows the built-in events"):
        register_builtin_events(types)
    assert types.lookup(BUILTIN_NAMESPACE, "pin_promoted") is PinPromoted


def test_pin_events_warns_and_names_the_read_that_replaces_it(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        ledger.resolve("k", kind="tool_call", effect=lambda: 1, interpret=lambda raw: raw)
        committed = ledger.commit()
        with pytest.warns(DeprecationWarning, match=r'store\.read\(namespace="anagrapheus", type="pin_promoted"\)'):
            old = list(pin_events(store.read()))
        assert old == list(store.read(namespace="anagrapheus", type="pin_promoted")) == committed
        with pytest.warns(DeprecationWarning):
            assert list(pin_events(committed, with_inputs=True)) == list(events_of(committed, PinPromoted))


@pytest.mark.parametrize("name", ["pin_events", "register_builtin_events"])
@pytest.mark.parametrize("package", [anagrapheus, anagrapheus.timeline])
def test_the_deprecated_functions_stay_importable_from_the_packages(package: object, name: str) -> None:
    assert name not in package.__all__  # type: ignore[attr-defined]
    assert getattr(package, name) is getattr(importlib.import_module(f"anagrapheus.timeline.{_home(name)}"), name)


def _home(name: str) -> str:
    return "recording" if name == "pin_events" else "events"


def test_a_name_dropped_from_the_timeline_exports_warns_and_says_where_it_lives() -> None:
    with pytest.warns(DeprecationWarning, match=r"anagrapheus\.timeline\.ScratchPin is deprecated.*timeline\.store"):
        from anagrapheus.timeline import ScratchPin as old
    assert old is ScratchPin
    assert "ScratchPin" not in anagrapheus.timeline.__all__


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = anagrapheus.timeline.nothing_here  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        from anagrapheus import nothing_here  # type: ignore[attr-defined]  # noqa: F401
