"""The `pin_promoted` codec: one writer (`payload_text`) and three readers (`read`, `read_text`, `text_of_payload`).

The readers check a current-version payload by hand, for speed, and cut the raw result out of the stored
text instead of re-encoding it; an older version, or a registry holding another class for the event,
goes through `registry.decode` and its upcasts. Each reader is held here to the same answers.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest

from anagrapheus.errors import CorruptEvent, UnknownEventType
from anagrapheus.timeline import UpcastRegistry
from anagrapheus.timeline.canonical import canonical_number
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    Event,
    EventTypeRegistry,
    PinPromoted,
    PinText,
)
from tests.timeline.test_replay_corrupt_pins import stored

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
