"""A miss is compared with the nearest recorded call of its own kind, never with a call of another kind.

Each kind is checked on its own: the recording holds, for every kind, one pin that shares all but
one field with the missing request, and, of another kind, one pin that shares every field. The
miss must name its own kind's pin and what moved against it.
"""

from __future__ import annotations

import pytest

from anagrapheus.errors import PinMiss
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.divergence import diverged_at

KINDS = ["model_call", "tool_call", "model_token_count", "model_compaction", "entity_id"]
ASKED = {"model": "d-model", "messages[0]": "d-prompt", "settings": "d-settings"}


def record(
    store: SQLiteEventStore, types: EventTypeRegistry, pins: list[tuple[str, str, dict[str, str] | None]]
) -> None:
    ledger = PinLedger(store, types)
    for key, kind, fingerprint in pins:
        ledger.resolve(key, kind=kind, effect=lambda: "answer", interpret=str, fingerprint=fingerprint)
    ledger.commit()


def miss(store: SQLiteEventStore, types: EventTypeRegistry, kind: str, fingerprint: dict[str, str] | None) -> PinMiss:
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss) as raised:
        replay.resolve(f"p1:{kind}:asked", kind=kind, effect=object, interpret=str, fingerprint=fingerprint)
    return raised.value


@pytest.mark.parametrize("kind", KINDS)
def test_the_nearest_pin_is_of_the_missing_kind(store: SQLiteEventStore, types: EventTypeRegistry, kind: str) -> None:
    others = [other for other in KINDS if other != kind]
    record(
        store,
        types,
        [(f"p1:{other}:same", other, dict(ASKED)) for other in others]
        + [(f"p1:{kind}:near", kind, {**ASKED, "settings": "d-other-settings"})],
    )
    divergence = miss(store, types, kind, dict(ASKED)).divergence
    assert (divergence.kind, divergence.nearest_key, divergence.moved) == (kind, f"p1:{kind}:near", ("settings",))


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_the_recording_lacks_has_no_nearest_pin(
    store: SQLiteEventStore, types: EventTypeRegistry, kind: str
) -> None:
    record(store, types, [(f"p1:{other}:same", other, dict(ASKED)) for other in KINDS if other != kind])
    divergence = miss(store, types, kind, dict(ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == (None, ())
    assert "the recording has no comparable call of this kind" in divergence.describe()


def test_of_its_kind_the_pin_sharing_most_fields_is_nearest(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(
        store,
        types,
        [
            ("p1:model_call:far", "model_call", {"model": "d-model", "messages[0]": "x", "settings": "y"}),
            ("p1:model_call:near", "model_call", {**ASKED, "messages[0]": "x"}),
            ("p1:model_call:farther", "model_call", {"model": "z", "messages[0]": "x", "settings": "y"}),
        ],
    )
    divergence = miss(store, types, "model_call", dict(ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == ("p1:model_call:near", ("messages[0]",))
    assert divergence.describe().endswith("what moved: messages[0]")


def test_added_and_removed_fields_are_named(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, [("p1:model_call:near", "model_call", {"model": "d-model", "tools": "t"})])
    divergence = miss(store, types, "model_call", {"model": "d-model", "messages[0]": "d-prompt"}).divergence
    assert divergence.moved == ("+messages[0]", "-tools")


def test_pins_without_a_fingerprint_are_never_nearest(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, [("p1:model_call:bare", "model_call", None)])
    divergence = miss(store, types, "model_call", dict(ASKED)).divergence
    assert divergence.nearest_key is None


def test_a_miss_without_a_fingerprint_names_no_nearest_pin(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, [("p1:model_call:near", "model_call", dict(ASKED))])
    divergence = miss(store, types, "model_call", None).divergence
    assert (divergence.kind, divergence.after_hits, divergence.nearest_key) == ("model_call", 0, None)


def test_a_miss_matching_its_nearest_pin_says_so(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, [("p1:model_call:near", "model_call", dict(ASKED))])
    divergence = miss(store, types, "model_call", dict(ASKED)).divergence
    assert (divergence.nearest_key, divergence.moved) == ("p1:model_call:near", ())
    assert "has the same fingerprint" in divergence.describe()


@pytest.mark.parametrize("kind", KINDS)
def test_diverged_at_alone_compares_only_calls_of_its_kind(kind: str) -> None:
    # Replay hands over only its own kind's pins; the comparison must hold on its own too.
    recorded = [(f"p1:{other}:same", other, dict(ASKED)) for other in KINDS if other != kind]
    recorded.append((f"p1:{kind}:near", kind, {**ASKED, "settings": "d-other-settings"}))
    divergence = diverged_at(f"p1:{kind}:asked", kind, dict(ASKED), after_hits=3, recorded=recorded)
    assert (divergence.nearest_key, divergence.moved, divergence.after_hits) == (f"p1:{kind}:near", ("settings",), 3)
