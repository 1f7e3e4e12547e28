"""Mutated recordings: whatever is done to the bytes, reading gives a recording or a typed error, never a crash."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anagrapheus import AnagrapheusError
from anagrapheus.timeline.events import Event, EventTypeRegistry, PinPromoted, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording
from anagrapheus.timeline.upcast import UpcastRegistry
from tests.bounds import bound

# 400 in the normal suite, 20000 under `pytest --soak`; ANAGRAPHEUS_FUZZ_EXAMPLES sets any number.
FUZZ_EXAMPLES = bound("ANAGRAPHEUS_FUZZ_EXAMPLES", normal=400, soak=20000)


class Quota(Event):
    namespace: ClassVar[str] = "fuzz"
    event_type: ClassVar[str] = "quota_set"

    species: str
    tonnes: int
    shares: dict[str, float]


def _types() -> EventTypeRegistry:
    types = EventTypeRegistry()
    types.register(Quota)
    return types


class QuotaV2(Event):
    """Quota after it gained a season; v1 quotas were annual."""

    namespace: ClassVar[str] = "fuzz"
    event_type: ClassVar[str] = "quota_set"
    schema_version: ClassVar[int] = 2

    species: str
    tonnes: int
    shares: dict[str, float]
    season: str


TYPES = _types()
TYPES_V2 = EventTypeRegistry()
TYPES_V2.register(QuotaV2)
UPCASTS = UpcastRegistry()
UPCASTS.add("fuzz", "quota_set", from_version=1, step=lambda payload: {**payload, "season": "annual"})


def _stored(seq: int, event: Event, *, correlation_id: str | None = None) -> StoredEvent:
    pending = TYPES.encode(event, correlation_id=correlation_id)
    return StoredEvent(
        seq=seq,
        event_id=f"00000000-0000-7000-8000-{seq:012d}",
        namespace=pending.namespace,
        type=pending.type,
        schema_version=pending.schema_version,
        causation_id=None,
        correlation_id=pending.correlation_id,
        created_at=f"2026-01-01T00:00:0{seq}.000000Z",
        payload=pending.payload,
    )


EVENTS = [
    _stored(1, Quota(species="cod", tonnes=1200, shares={"EU": 0.6, "UK": 0.4})),
    _stored(
        2,
        PinPromoted(
            unit_id="u1", key="p1:model_call:" + "c" * 64, kind="model_call", raw={"parts": ["ça"]}, attempts=1
        ),
        correlation_id="u1",
    ),
    _stored(
        3,
        PinPromoted(
            unit_id="u1",
            key="p1:entity_id:" + "d" * 64,
            kind="entity_id",
            raw="0190aaaa-0000-7000-8000-000000000001",
            attempts=3,
            fingerprint={"name": "0123456789abcdef"},
        ),
    ),
]
HEADER = RecordingHeader(description="fuzz", recorded_with="hand-built events", rerecord="n/a", details={"k": [1]})


def _original() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return write_recording(Path(tmp) / "r.jsonl", EVENTS, header=HEADER).read_bytes()


ORIGINAL = _original()


def _unsealed(data: bytes) -> bytes:
    """The recording with its seal taken out of the header, every other byte as it was."""
    header, _, rest = data.partition(b"\n")
    seal = json.dumps({"seal": json.loads(header)["details"]["seal"]}, separators=(",", ":"))[1:-1]
    # The seal sits among the other details in key order: a comma on one side of it goes with it.
    unsealed = header.replace(seal.encode() + b",", b"", 1).replace(b"," + seal.encode(), b"", 1)
    assert b'"seal"' not in unsealed
    return unsealed + b"\n" + rest


# Mutated sealed, most edits are refused by the seal at their line; mutated unsealed (a file from before the
# seal), they reach every check behind it.
UNSEALED = _unsealed(ORIGINAL)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from([ORIGINAL, UNSEALED])))
    for _ in range(draw(st.integers(1, 3))):
        lines = bytes(data).split(b"\n")
        kind = draw(st.sampled_from(["flip", "set", "truncate", "swap", "delete", "duplicate", "insert"]))
        if kind in ("flip", "set", "truncate", "insert") and not data:
            continue
        if kind == "flip":
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.sampled_from(b'{}[]",:0123456789-.eEntfl \\\n\xff\xc3'))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if kind == "swap":
                lines[i], lines[j] = lines[j], lines[i]
            elif kind == "delete":
                del lines[i]
            else:
                lines.insert(j, lines[i])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@pytest.mark.soak
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
def test_a_mutated_recording_reads_or_raises_a_typed_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.jsonl"
        path.write_bytes(data)
        for types, upcasts in ((TYPES, None), (TYPES_V2, UPCASTS)):
            try:
                recording = read_recording(path, registry=types, upcasts=upcasts)
            except AnagrapheusError as e:
                # Every refusal names the file, and the line whenever the file could be opened.
                assert str(path) in str(e)
                assert getattr(e, "line", None) is not None
            else:
                # What reads is well formed all the way down: every event decodes and writes back out.
                assert len(recording.decode(types, upcasts=upcasts)) == len(recording.events)
                rewritten = write_recording(Path(tmp) / "again.jsonl", recording.events, header=recording.header)
                assert read_recording(rewritten, registry=types, upcasts=upcasts).events == recording.events


def test_the_unmutated_recording_reads() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        path.write_bytes(ORIGINAL)
        assert list(read_recording(path, registry=TYPES).events) == EVENTS
        upcast = read_recording(path, registry=TYPES_V2, upcasts=UPCASTS).decode(TYPES_V2, upcasts=UPCASTS)
        assert upcast[0] == QuotaV2(species="cod", tonnes=1200, shares={"EU": 0.6, "UK": 0.4}, season="annual")
