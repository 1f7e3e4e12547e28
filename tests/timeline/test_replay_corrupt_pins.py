"""The replay fast path checks every field of a current-version pin by hand; each check has its own test.

`ReplayPins.from_events` reads `pin_promoted` payloads without pydantic validation, for speed. A
corrupt pin must still be refused with `CorruptEvent` naming its seq, exactly where full
validation (`registry.decode`) refuses it, never replayed as a wrong answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import CorruptEvent
from anagrapheus.timeline import ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, EventTypeRegistry, PendingEvent, PinPromoted, StoredEvent

GOOD: dict[str, Any] = {
    "attempts": 1,
    "fingerprint": {"messages[0]": "d1"},
    "key": "p1:model_call:k",
    "kind": "model_call",
    "raw": {"text": "The UK holds firm."},
    "unit_id": "u1",
}


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


def with_(**change: Any) -> str:
    payload = {**GOOD, **change}
    return json.dumps({name: value for name, value in payload.items() if value is not ...})


def test_a_sound_pin_replays() -> None:
    replay = ReplayPins.from_events([stored(with_())], EventTypeRegistry())
    assert replay.resolve("p1:model_call:k", kind="model_call", effect=object, interpret=lambda raw: raw) == {
        "text": "The UK holds firm."
    }


@pytest.mark.parametrize("fingerprint", [{"messages[0]": "d1"}, None, ...])
def test_a_pin_stored_as_canonical_text_replays_its_raw_result_exactly(fingerprint: object) -> None:
    # Canonical text is what the store holds: replay cuts the raw result out of it instead of re-encoding it.
    raw = {"text": "The UK holds firm.", "tonnes": [1, 2.5, None], "é": {"b": 1, "a": 2}}
    replay = ReplayPins.from_events(
        [stored(canonical_json(json.loads(with_(raw=raw, fingerprint=fingerprint))))], EventTypeRegistry()
    )
    assert replay.resolve("p1:model_call:k", kind="model_call", effect=object, interpret=lambda r: r) == raw


def test_a_corrupt_pin_is_refused_when_replay_reads_a_store(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        store.append(
            [
                PendingEvent(
                    namespace=BUILTIN_NAMESPACE,
                    type="pin_promoted",
                    schema_version=PinPromoted.schema_version,
                    payload=with_(attempts="1"),
                )
            ]
        )
        with pytest.raises(CorruptEvent, match="attempts must be an integer"):
            ReplayPins.from_store(store, EventTypeRegistry())


def test_a_pin_without_a_fingerprint_replays() -> None:
    replay = ReplayPins.from_events([stored(with_(fingerprint=...))], EventTypeRegistry())
    assert "p1:model_call:k" in replay


CORRUPT = {
    "payload not JSON": ("{not json", "payload is not JSON"),
    "payload not an object": ("[1, 2]", "payload is not a JSON object"),
    "unknown field": (with_(extra=1), "unknown fields \\['extra'\\]"),
    "no unit_id": (with_(unit_id=...), "lacks \\['unit_id'\\]"),
    "no key": (with_(key=...), "lacks \\['key'\\]"),
    "no kind": (with_(kind=...), "lacks \\['kind'\\]"),
    "no raw": (with_(raw=...), "lacks \\['raw'\\]"),
    "no attempts": (with_(attempts=...), "lacks \\['attempts'\\]"),
    "unit_id not a string": (with_(unit_id=1), "unit_id, key and kind must be strings"),
    "key not a string": (with_(key=None), "unit_id, key and kind must be strings"),
    "kind not a string": (with_(kind=["model_call"]), "unit_id, key and kind must be strings"),
    "attempts a bool": (with_(attempts=True), "attempts must be an integer"),
    "attempts a float": (with_(attempts=1.0), "attempts must be an integer"),
    "attempts a string": (with_(attempts="1"), "attempts must be an integer"),
    "fingerprint a list": (with_(fingerprint=["d1"]), "fingerprint must be an object of strings"),
    "fingerprint a string": (with_(fingerprint="d1"), "fingerprint must be an object of strings"),
    "fingerprint digest not a string": (with_(fingerprint={"messages[0]": 1}), "fingerprint must be an object"),
}


@pytest.mark.parametrize(("payload", "message"), CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_pin_is_refused_on_the_fast_path(payload: str, message: str) -> None:
    with pytest.raises(CorruptEvent, match=message) as raised:
        ReplayPins.from_events([stored(payload)], EventTypeRegistry())
    assert raised.value.seq == 7


def test_the_fast_path_reads_a_sound_pin_as_validation_does() -> None:
    event = stored(with_())
    assert PinPromoted.read(event, EventTypeRegistry()) == EventTypeRegistry().decode(event)
