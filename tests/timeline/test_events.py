"""Typed events: registration, encoding, decoding, upcasting and the errors that name what went wrong."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anagrapheus import AnagrapheusError
from anagrapheus.errors import (
    CorruptEvent,
    EventTypeError,
    FutureSchemaVersion,
    UnknownEventType,
    UpcastGap,
    UsageError,
)
from anagrapheus.timeline import Event, EventTypeRegistry, PinPromoted, SQLiteEventStore, StoredEvent, UpcastRegistry


class OfferMade(Event):
    namespace: ClassVar[str] = "negotiation"
    event_type: ClassVar[str] = "offer_made"
    schema_version: ClassVar[int] = 3

    party: str
    amount_eur: int
    currency_note: str


def store_raw(path: Path, *, type: str, version: int, payload: str) -> None:
    with SQLiteEventStore(path) as store:
        from anagrapheus.timeline import PendingEvent

        store.append([PendingEvent(namespace="negotiation", type=type, schema_version=version, payload=payload)])


def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"party": payload["who"], "amount_eur": payload["amount"]}


def v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "currency_note": "upcast from v2"}


@pytest.fixture
def registry() -> EventTypeRegistry:
    types = EventTypeRegistry()
    types.register(OfferMade)
    return types


def test_encode_decode_round_trip(registry: EventTypeRegistry, tmp_path: Path) -> None:
    event = OfferMade(party="UK", amount_eur=10, currency_note="é")
    pending = registry.encode(event, causation_id="c", correlation_id="r")
    assert pending.payload == '{"amount_eur":10,"currency_note":"é","party":"UK"}'
    assert (pending.causation_id, pending.correlation_id, pending.event_id) == ("c", "r", None)
    with SQLiteEventStore(tmp_path / "log.db") as store:
        (stored,) = store.append([pending])
        assert (stored.namespace, stored.type, stored.schema_version) == ("negotiation", "offer_made", 3)
        assert registry.decode(stored) == event
        assert registry.decode(next(store.read())) == event


def test_events_are_frozen(registry: EventTypeRegistry) -> None:
    event = OfferMade(party="UK", amount_eur=10, currency_note="")
    with pytest.raises(ValueError):
        event.party = "EU"  # type: ignore[misc]


def test_the_builtin_namespace_is_reserved() -> None:
    class Sneaky(Event):
        namespace: ClassVar[str] = "anagrapheus"
        event_type: ClassVar[str] = "pin_promoted"

    with pytest.raises(UsageError, match="reserved"):
        EventTypeRegistry().register(Sneaky)


def test_registration_is_checked(registry: EventTypeRegistry) -> None:
    class Nameless(Event):
        pass

    class Twin(Event):
        namespace: ClassVar[str] = "negotiation"
        event_type: ClassVar[str] = "offer_made"

    with pytest.raises(EventTypeError):
        registry.register(Nameless)
    with pytest.raises(EventTypeError, match="already registered"):
        registry.register(Twin)
    registry.register(OfferMade)  # registering the same class again is harmless


def test_encoding_an_unregistered_event_is_refused() -> None:
    with pytest.raises(UnknownEventType) as caught:
        EventTypeRegistry().encode(OfferMade(party="UK", amount_eur=1, currency_note=""))
    assert (caught.value.namespace, caught.value.event_type, caught.value.seq) == ("negotiation", "offer_made", None)


def test_unknown_type_is_named_with_its_seq(registry: EventTypeRegistry, tmp_path: Path) -> None:
    store_raw(tmp_path / "log.db", type="counter_offer", version=1, payload="{}")
    with SQLiteEventStore(tmp_path / "log.db") as store, pytest.raises(UnknownEventType) as caught:
        registry.decode(next(store.read()))
    assert (caught.value.namespace, caught.value.event_type, caught.value.seq) == ("negotiation", "counter_offer", 1)
    assert "negotiation:counter_offer" in str(caught.value)


def test_future_schema_is_refused(registry: EventTypeRegistry, tmp_path: Path) -> None:
    store_raw(tmp_path / "log.db", type="offer_made", version=4, payload='{"party":"UK"}')
    with SQLiteEventStore(tmp_path / "log.db") as store, pytest.raises(FutureSchemaVersion) as caught:
        registry.decode(next(store.read()))
    assert (caught.value.version, caught.value.known, caught.value.seq) == (4, 3, 1)
    assert (caught.value.namespace, caught.value.event_type) == ("negotiation", "offer_made")


def test_upcast_chain_v1_to_v3_on_read_leaves_history_alone(registry: EventTypeRegistry, tmp_path: Path) -> None:
    upcasts = UpcastRegistry()
    upcasts.register("negotiation", "offer_made", from_version=1)(v1_to_v2)
    upcasts.add("negotiation", "offer_made", from_version=2, step=v2_to_v3)
    store_raw(tmp_path / "log.db", type="offer_made", version=1, payload='{"amount":7,"who":"EU"}')
    store_raw(tmp_path / "log.db", type="offer_made", version=2, payload='{"amount_eur":8,"party":"UK"}')
    with SQLiteEventStore(tmp_path / "log.db") as store:
        old, newer = list(store.read())
        assert registry.decode(old, upcasts=upcasts) == OfferMade(
            party="EU", amount_eur=7, currency_note="upcast from v2"
        )
        assert registry.decode(newer, upcasts=upcasts).amount_eur == 8  # type: ignore[attr-defined]
        # Stored history is never rewritten.
        assert [(e.schema_version, e.payload) for e in store.read()] == [
            (1, '{"amount":7,"who":"EU"}'),
            (2, '{"amount_eur":8,"party":"UK"}'),
        ]


def test_a_missing_step_names_the_gap(registry: EventTypeRegistry, tmp_path: Path) -> None:
    upcasts = UpcastRegistry()
    upcasts.add("negotiation", "offer_made", from_version=1, step=v1_to_v2)
    store_raw(tmp_path / "log.db", type="offer_made", version=1, payload='{"amount":7,"who":"EU"}')
    with SQLiteEventStore(tmp_path / "log.db") as store, pytest.raises(UpcastGap) as caught:
        registry.decode(next(store.read()), upcasts=upcasts)
    assert (caught.value.missing_from, caught.value.target) == (2, 3)
    assert "v2 -> v3" in str(caught.value)


def test_an_upcast_step_cannot_be_registered_twice() -> None:
    upcasts = UpcastRegistry()
    upcasts.add("n", "t", from_version=1, step=v1_to_v2)
    with pytest.raises(EventTypeError):
        upcasts.add("n", "t", from_version=1, step=v2_to_v3)


def test_corrupt_payload_is_reported_with_its_seq(registry: EventTypeRegistry, tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store_raw(path, type="offer_made", version=3, payload='{"amount_eur":1,"currency_note":"","party":"UK"}')
    conn = sqlite3.connect(path)
    row = "INSERT INTO events VALUES (?, ?, 'negotiation', 'offer_made', 3, NULL, NULL, '2026-01-01T00:00:00Z', ?)"
    conn.execute(row, (2, "e2", "{not json"))
    conn.execute(row, (3, "e3", '{"party":1}'))
    conn.commit()
    conn.close()
    with SQLiteEventStore(path) as store:
        first, second, third = list(store.read())
        registry.decode(first)
        with pytest.raises(CorruptEvent) as caught:
            registry.decode(second)
        assert caught.value.seq == 2
        with pytest.raises(CorruptEvent, match="seq 3"):
            registry.decode(third)


def test_builtin_events_are_registered(registry: EventTypeRegistry) -> None:
    assert registry.lookup("anagrapheus", "pin_promoted") is PinPromoted
    assert issubclass(CorruptEvent, AnagrapheusError)


class DealStruck(Event):
    namespace: ClassVar[str] = "negotiation"
    event_type: ClassVar[str] = "deal_struck"

    at: datetime
    share: Decimal
    parties: tuple[str, ...]


def test_an_event_is_encoded_as_json_values_not_python_objects() -> None:
    # Times, decimals and tuples are written as JSON spells them (pydantic's JSON mode), and read back as themselves.
    registry = EventTypeRegistry()
    registry.register(DealStruck)
    event = DealStruck(at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), share=Decimal("0.25"), parties=("UK", "EU"))
    pending = registry.encode(event)
    assert pending.payload == '{"at":"2026-01-02T03:04:05Z","parties":["UK","EU"],"share":"0.25"}'
    stored = StoredEvent(
        seq=1,
        event_id="e1",
        namespace=pending.namespace,
        type=pending.type,
        schema_version=pending.schema_version,
        causation_id=None,
        correlation_id=None,
        created_at="2026-01-01T00:00:00.000000Z",
        payload=pending.payload,
    )
    assert registry.decode(stored) == event


class NoType(Event):
    namespace: ClassVar[str] = "negotiation"


class NoNamespace(Event):
    event_type: ClassVar[str] = "offer_made"


class NotAnEvent:
    # Not an Event subclass, so it lacks the schema_version default too.
    namespace: ClassVar[str] = "negotiation"
    event_type: ClassVar[str] = "bare"


def named(namespace: str, event_type: str, version: object = 1) -> type[Event]:
    return type("Named", (Event,), {"namespace": namespace, "event_type": event_type, "schema_version": version})


NAMES = "names are lowercase letters, digits, '_', '.', '-'"
REFUSED_REGISTRATIONS: dict[str, tuple[type[Any], str]] = {
    "no event_type": (NoType, "NoType must set the class variables namespace and event_type"),
    "no namespace": (NoNamespace, "NoNamespace must set the class variables namespace and event_type"),
    "namespace not a name": (named("Negotiation", "offer_made"), f"Negotiation:offer_made: {NAMES}"),
    "event_type not a name": (named("negotiation", "Offer Made"), f"negotiation:Offer Made: {NAMES}"),
    "no schema_version": (NotAnEvent, "negotiation:bare: schema_version must be an integer >= 1"),
    "schema_version 0": (named("negotiation", "zero", 0), "negotiation:zero: schema_version must be an integer >= 1"),
    "schema_version True": (
        named("negotiation", "flag", True),
        "negotiation:flag: schema_version must be an integer >= 1",
    ),
    "schema_version text": (
        named("negotiation", "text", "2"),
        "negotiation:text: schema_version must be an integer >= 1",
    ),
}


@pytest.mark.parametrize(("cls", "message"), REFUSED_REGISTRATIONS.values(), ids=REFUSED_REGISTRATIONS.keys())
def test_a_registration_is_refused_naming_what_is_wrong(cls: type[Event], message: str) -> None:
    registry = EventTypeRegistry()
    with pytest.raises(EventTypeError) as caught:
        registry.register(cls)
    assert str(caught.value) == message
