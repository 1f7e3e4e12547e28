"""Pinned entity ids: minted live through a ledger, re-established by replay."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from anagrapheus.errors import CanonicalError, PinResultError
from anagrapheus.identity import mint_entity_id
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    PinPromoted,
    ReplayPins,
    SQLiteEventStore,
    pin_key,
)
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording

TREATY = {"entity": "treaty", "name": "EU-UK fisheries accord"}


def is_uuid7(text: str) -> bool:
    return uuid.UUID(text).version == 7 and str(uuid.UUID(text)) == text


def test_an_unpinned_mint_is_a_fresh_uuid7_every_time() -> None:
    first, second = mint_entity_id(TREATY), mint_entity_id(TREATY)

    assert is_uuid7(first) and is_uuid7(second)
    assert first != second


def test_a_live_mint_is_drawn_once_per_unit_and_promoted_on_commit(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types)
        treaty = mint_entity_id(TREATY, resolver=ledger)
        again = mint_entity_id(dict(reversed(TREATY.items())), resolver=ledger)  # same material, any key order
        position = mint_entity_id({"entity": "position", "party": "UK"}, resolver=ledger)
        ledger.commit()
        pins = [types.decode(event) for event in store.read()]

    assert is_uuid7(treaty) and is_uuid7(position)
    assert again == treaty
    assert position != treaty
    assert [
        (pin.unit_id, pin.key, pin.kind, pin.raw, pin.attempts) for pin in pins if isinstance(pin, PinPromoted)
    ] == [
        (ledger.unit_id, pin_key("entity_id", TREATY), "entity_id", treaty, 2),
        (ledger.unit_id, pin_key("entity_id", {"entity": "position", "party": "UK"}), "entity_id", position, 1),
    ]


def test_replay_re_establishes_the_same_id_in_a_fresh_store(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types)
        live = mint_entity_id(TREATY, resolver=ledger)
        ledger.commit()
        path = write_recording(
            tmp_path / "ids.jsonl",
            store.read(namespace="anagrapheus", type="pin_promoted"),
            header=RecordingHeader(description="one treaty id", recorded_with="no model", rerecord="pytest"),
        )

    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)
    with SQLiteEventStore(tmp_path / "fresh.db") as fresh:
        assert fresh.last_seq() == 0
        replayed = mint_entity_id(TREATY, resolver=replay)

    assert replayed == live
    assert replay.hits == 1


def test_strict_replay_of_an_unrecorded_entity_misses_and_names_what_moved(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types)
        mint_entity_id(TREATY, resolver=ledger)
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)

    with pytest.raises(PinMiss) as missed:
        mint_entity_id({**TREATY, "name": "EU-Norway accord"}, resolver=replay)

    divergence = missed.value.divergence
    assert divergence.kind == "entity_id"
    assert divergence.moved == ("name",)


def test_a_pin_that_does_not_hold_a_uuid_is_refused(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        store.append(
            [
                types.encode(
                    PinPromoted(
                        unit_id="u", key=pin_key("entity_id", TREATY), kind="entity_id", raw="treaty-1", attempts=1
                    )
                )
            ]
        )
        replay = ReplayPins.from_events(store.read(), types)

    with pytest.raises(PinResultError, match="not a UUID"):
        mint_entity_id(TREATY, resolver=replay)


def test_material_with_no_json_form_is_refused() -> None:
    with pytest.raises(CanonicalError, match=r"\$\.parties"):
        mint_entity_id({"entity": "treaty", "parties": [object()]})


def test_a_set_in_material_is_keyed_as_a_tool_argument_is_by_its_sorted_members() -> None:
    # One walk for every key: once refused here while a tool's arguments took it.
    assert mint_entity_id({"parties": {"UK", "EU"}}, new_id=lambda: "x") == "x"


def test_the_id_source_is_injectable_and_its_draw_is_what_gets_pinned(tmp_path: Path, types: EventTypeRegistry) -> None:
    fixed = "01900000-0000-7000-8000-000000000007"
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types)
        minted = mint_entity_id(TREATY, resolver=ledger, new_id=lambda: fixed)
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)

    assert minted == fixed
    assert mint_entity_id(TREATY, resolver=replay, new_id=lambda: "never drawn under replay") == fixed
