"""Typed events: registration, encoding, decoding, upcasting, the `pin_promoted` codec, errors naming what is wrong."""

from __future__ import annotations

import json
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
from anagrapheus.timeline.canonical import canonical_number
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PinText


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


KEY = "p1:model_call:" + "a" * 64


def parsed(text: str) -> dict[str, Any]:
    # As the recording reader parses a line before `text_of_payload`.
    return json.loads(text, parse_float=canonical_number)


@pytest.mark.parametrize("failed", [None, False, True])
@pytest.mark.parametrize("fingerprint", [None, {"messages[0]": "d1", "model": "d2"}])
def test_payload_text_writes_what_the_registry_encodes(failed: bool | None, fingerprint: dict[str, str] | None) -> None:
    flag = {} if failed is None else {"failed": failed}
    fields: dict[str, Any] = {"unit_id": "u1", "key": KEY, "kind": "model_call", "attempts": 2}
    raw: dict[str, Any] = {"text": "The UK holds firm.", "tonnes": [1, 2.5]}
    text = PinPromoted.payload_text(
        **fields,
        raw=json.dumps(raw, separators=(",", ":"), sort_keys=True),
        fingerprint=None if fingerprint is None else json.dumps(fingerprint, separators=(",", ":"), sort_keys=True),
        **flag,
    )
    event = PinPromoted(**fields, raw=raw, fingerprint=fingerprint, **flag)
    assert text == EventTypeRegistry().encode(event).payload


# Stored canonical payloads, each with the PinText every reader must give for it.
SOUND: dict[str, tuple[str, PinText]] = {
    "fingerprint, not failed": (
        '{"attempts":2,"failed":false,"fingerprint":{"messages[0]":"d1","model":"d2"},"key":"k","kind":"model_call",'
        '"raw":{"text":"hi"},"unit_id":"u1"}',
        PinText(
            unit_id="u1",
            key="k",
            kind="model_call",
            raw_text='{"text":"hi"}',
            attempts=2,
            fingerprint='{"messages[0]":"d1","model":"d2"}',
            failed=False,
        ),
    ),
    "failed, fingerprint null": (
        '{"attempts":3,"failed":true,"fingerprint":null,"key":"k","kind":"tool_call",'
        '"raw":{"captured":null,"error":"boom"},"unit_id":"u2"}',
        PinText(
            unit_id="u2",
            key="k",
            kind="tool_call",
            raw_text='{"captured":null,"error":"boom"}',
            attempts=3,
            fingerprint=None,
            failed=True,
        ),
    ),
    "no failed, no fingerprint": (
        '{"attempts":1,"key":"k","kind":"entity_id","raw":"0190","unit_id":"u3"}',
        PinText(unit_id="u3", key="k", kind="entity_id", raw_text='"0190"', attempts=1, fingerprint=None, failed=False),
    ),
}


@pytest.mark.parametrize(("text", "expected"), SOUND.values(), ids=SOUND.keys())
def test_each_reader_reads_a_sound_pin_field_for_field(text: str, expected: PinText) -> None:
    registry = EventTypeRegistry()
    assert PinPromoted.read_text(stored(text), registry) == expected
    assert PinPromoted.text_of_payload(parsed(text), seq=7) == expected
    event = PinPromoted.read(stored(text), registry)
    assert event == registry.decode(stored(text))
    assert (event.unit_id, event.key, event.kind, event.attempts, event.failed) == (
        expected.unit_id,
        expected.key,
        expected.kind,
        expected.attempts,
        expected.failed,
    )
    assert event.raw == json.loads(expected.raw_text)
    assert event.fingerprint == (None if expected.fingerprint is None else json.loads(expected.fingerprint))


ENVELOPES = {
    "failed false, fingerprint": '{"attempts":1,"failed":false,"fingerprint":{"model":"d"},"key":"k","kind":"tool",',
    "failed true, fingerprint null": '{"attempts":1,"failed":true,"fingerprint":null,"key":"k","kind":"model_call",',
    "neither": '{"attempts":1,"key":"k","kind":"model_call",',
}


@pytest.mark.parametrize("head", ENVELOPES.values(), ids=ENVELOPES.keys())
def test_read_text_keeps_the_raw_result_as_the_store_holds_it(head: str) -> None:
    # A result spelled otherwise than canonical JSON would spell it (`1.0`, `2.50`, spaces, key order) is replayed
    # exactly as stored: `read_text` cuts it out of the payload's text and never re-encodes it.
    raw = '{"tonnes": [1.0, 2.50], "a": null}'
    pin = PinPromoted.read_text(stored(f'{head}"raw":{raw},"unit_id":"u1"}}'), EventTypeRegistry())
    assert pin.raw_text == raw


def test_read_text_re_encodes_the_raw_result_when_the_payload_is_not_canonical() -> None:
    # The fields around `raw` are out of order, so its text cannot be cut out: it is written canonically instead.
    text = (
        '{"raw":{"b": 1.0, "a": 2},"attempts":1,"failed":true,"fingerprint":{"model":"d"},'
        '"key":"k","kind":"k","unit_id":"u1"}'
    )
    assert PinPromoted.read_text(stored(text), EventTypeRegistry()) == PinText(
        unit_id="u1", key="k", kind="k", raw_text='{"a":2,"b":1}', attempts=1, fingerprint='{"model":"d"}', failed=True
    )


V1 = '{"attempts":2,"fingerprint":{"model":"d"},"key":"k","kind":"model_call","raw":[1,2.5],"unit_id":"u1"}'


def test_a_version_1_pin_is_upcast_by_every_reader() -> None:
    registry = EventTypeRegistry()
    expected = PinText(
        unit_id="u1",
        key="k",
        kind="model_call",
        raw_text="[1,2.5]",
        attempts=2,
        fingerprint='{"model":"d"}',
        failed=False,
    )
    assert PinPromoted.read_text(stored(V1, schema_version=1), registry) == expected
    assert PinPromoted.read(stored(V1, schema_version=1), registry) == PinPromoted(
        unit_id="u1", key="k", kind="model_call", raw=[1, 2.5], attempts=2, fingerprint={"model": "d"}, failed=False
    )
    without_fingerprint = V1.replace('"fingerprint":{"model":"d"},', "")
    assert PinPromoted.read_text(stored(without_fingerprint, schema_version=1), registry).fingerprint is None


def test_a_registry_without_the_builtin_events_names_the_pin_it_cannot_read() -> None:
    for read in (PinPromoted.read, PinPromoted.read_text):
        with pytest.raises(UnknownEventType) as caught:
            read(stored(V1, seq=12), EventTypeRegistry(builtins=False))
        assert (caught.value.namespace, caught.value.event_type, caught.value.seq) == (
            "anagrapheus",
            "pin_promoted",
            12,
        )


class PinPromotedV3(PinPromoted):
    """A later version of the event, as a registry built with `builtins=False` may hold: kinds were renamed."""

    schema_version: ClassVar[int] = 3


def kinds_renamed(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "kind": {"llm": "model_call"}.get(payload["kind"], payload["kind"])}


def registry_of(cls: type[Event]) -> EventTypeRegistry:
    registry = EventTypeRegistry(builtins=False)
    # `_builtin=True` is how the library registers its own events; no public call puts another class there.
    registry.register(cls, _builtin=True)
    return registry


def test_a_pin_is_read_through_the_class_and_upcasts_the_registry_holds() -> None:
    registry = registry_of(PinPromotedV3)
    upcasts = UpcastRegistry()
    upcasts.add(BUILTIN_NAMESPACE, "pin_promoted", from_version=2, step=kinds_renamed)
    v2 = stored(
        '{"attempts":2,"failed":true,"fingerprint":{"model":"d"},"key":"k","kind":"llm","raw":1,"unit_id":"u1"}'
    )
    assert PinPromoted.read_text(v2, registry, upcasts=upcasts) == PinText(
        unit_id="u1", key="k", kind="model_call", raw_text="1", attempts=2, fingerprint='{"model":"d"}', failed=True
    )
    assert PinPromoted.read(v2, registry, upcasts=upcasts) == PinPromotedV3(
        unit_id="u1", key="k", kind="model_call", raw=1, attempts=2, fingerprint={"model": "d"}, failed=True
    )


class NotAPin(Event):
    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "pin_promoted"

    note: str


def test_a_pin_promoted_that_decodes_to_another_class_is_refused_with_its_seq() -> None:
    registry = registry_of(NotAPin)
    for read in (PinPromoted.read, PinPromoted.read_text):
        with pytest.raises(CorruptEvent) as caught:
            read(stored('{"note":"x"}', schema_version=1, seq=9), registry)
        assert str(caught.value) == "corrupt event at seq 9: expected PinPromoted, decoded NotAPin"
        assert caught.value.seq == 9


GOOD: dict[str, Any] = {"attempts": 1, "failed": False, "key": "k", "kind": "model_call", "raw": 1, "unit_id": "u1"}

CORRUPT: dict[str, tuple[dict[str, Any], str]] = {
    "unit_id not a string": ({**GOOD, "unit_id": 1}, "pin_promoted unit_id, key and kind must be strings"),
    "attempts a float": ({**GOOD, "attempts": 1.5}, "pin_promoted attempts must be an integer"),
    "failed a number": ({**GOOD, "failed": 0}, "pin_promoted failed must be a boolean"),
    "failed a string": ({**GOOD, "failed": "true"}, "pin_promoted failed must be a boolean"),
    "failed null": ({**GOOD, "failed": None}, "pin_promoted failed must be a boolean"),
    "fingerprint digest a number": (
        {**GOOD, "fingerprint": {"model": 1}},
        "pin_promoted fingerprint must be an object of strings",
    ),
}


@pytest.mark.parametrize(("payload", "message"), CORRUPT.values(), ids=CORRUPT.keys())
def test_every_reader_refuses_a_corrupt_pin_with_its_message_and_seq(payload: dict[str, Any], message: str) -> None:
    # `read` checks by hand as the text readers do: pydantic's validation alone would take `"failed": 0` as False.
    registry = EventTypeRegistry()
    text = json.dumps(payload)
    refusals: list[CorruptEvent] = []
    for read in (
        lambda: PinPromoted.read(stored(text, seq=5), registry),
        lambda: PinPromoted.read_text(stored(text, seq=5), registry),
        lambda: PinPromoted.text_of_payload(parsed(text), seq=5),
    ):
        with pytest.raises(CorruptEvent) as caught:
            read()
        refusals.append(caught.value)
    assert [(str(refused), refused.seq) for refused in refusals] == [(f"corrupt event at seq 5: {message}", 5)] * 3


def test_a_payload_that_is_not_an_object_is_refused_by_its_exact_message() -> None:
    with pytest.raises(CorruptEvent) as caught:
        PinPromoted.read_text(stored("[1, 2]", seq=4), EventTypeRegistry())
    assert str(caught.value) == "corrupt event at seq 4: payload is not a JSON object"


def stored(payload: str, *, seq: int = 7, schema_version: int = PinPromoted.schema_version) -> StoredEvent:
    return StoredEvent(
        seq=seq,
        event_id="00000000-0000-7000-8000-000000000007",
        namespace=BUILTIN_NAMESPACE,
        type=PinPromoted.event_type,
        schema_version=schema_version,
        causation_id=None,
        correlation_id="u1",
        created_at="2026-01-01T00:00:00.000000Z",
        payload=payload,
    )
