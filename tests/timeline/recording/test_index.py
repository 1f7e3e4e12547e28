"""A recording's index: opening through it answers exactly what a whole read answers, and any disagreement is loud."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anagrapheus.errors import AmbiguousPin, AnagrapheusError, PinMiss, SealBroken
from anagrapheus.timeline import JSONValue, PinPromoted, ReplayPins, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording
from anagrapheus.timeline.recording.index import INDEX_MIN_EVENTS, RecordingIndexWarning, index_path
from tests.timeline.sample_recording import stored_event

HEADER = RecordingHeader(description="indexed", recorded_with="synthetic pins", rerecord="pytest")

# (unit, key, result, failed) for each pin, in file order.
Pin = tuple[str, str, JSONValue, bool]


def events_of(pins: Sequence[Pin], *, other_every: int = 3) -> list[StoredEvent]:
    """The pins as stored events, with an application event between some of them (not a pin: skipped)."""
    events: list[StoredEvent] = []
    for n, (unit, key, result, failed) in enumerate(pins):
        payload = PinPromoted(
            unit_id=unit,
            key=key,
            kind="model_call" if key.startswith("m") else "tool_call",
            raw=result,
            attempts=1 + n % 2,
            fingerprint={"messages[0]": f"{n:04x}"},
            failed=failed,
        )
        events.append(
            stored_event(
                len(events) + 1,
                unit,
                "anagrapheus",
                "pin_promoted",
                payload.model_dump_json(),
                version=PinPromoted.schema_version,
            )
        )
        if n % other_every == 0:
            events.append(stored_event(len(events) + 1, unit, "app", "noted", json.dumps({"n": n})))
    return events


def _outcome(replay: ReplayPins, key: str) -> tuple[str, object]:
    """What resolving `key` gives: the answer, or the error's type and what it says."""
    try:
        return "answer", replay.resolve(key, kind="model_call", effect=lambda: None, interpret=lambda value: value)
    except PinMiss as e:
        return "miss", (e.divergence.key, e.divergence.after_hits, e.divergence.nearest_key, str(e))
    except AnagrapheusError as e:
        return type(e).__name__, str(e)


def _observed(path: Path, keys: list[str], unit_id: str | None) -> dict[str, Any]:
    """Everything a replay says of a recording, asked in the order a user would (answers before any walk)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replay = ReplayPins.from_recording(path, unit_id=unit_id)
        first = [(key, key in replay, replay.asked(key), replay.recorded(key), _outcome(replay, key)) for key in keys]
        facts = {
            "first": first,
            "units": replay.units,
            "unit": replay.unit,
            "ambiguous": replay.ambiguous,
            "len": len(replay),
            "unused": replay.unused(),
            "hits": replay.hits,
            "missed": _outcome(replay, "m-never-recorded"),
        }
    # What the reads warn of; not a ResourceWarning the garbage collector raises meanwhile for an earlier test's
    # unclosed event loop (seen in CI, where other tests share the worker).
    facts["warnings"] = [
        (w.category.__name__, str(w.message))
        for w in caught
        if w.category is not RecordingIndexWarning and not issubclass(w.category, ResourceWarning)
    ]
    facts["index_warnings"] = [str(w.message) for w in caught if w.category is RecordingIndexWarning]
    return facts


def _both(path: Path, keys: list[str], unit_id: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a replay says through the index, and with the index moved aside (a whole read)."""
    indexed = _observed(path, keys, unit_id)
    aside = path.with_name("aside")
    index_path(path).rename(aside)
    try:
        whole = _observed(path, keys, unit_id)
    finally:
        aside.rename(index_path(path))
    return indexed, whole


pins_strategy = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "ü3"]),
        st.sampled_from(["m1", "m2", "m3", "t1", "t2"]),
        st.one_of(st.integers(-3, 3), st.text(max_size=3), st.just({"a": [1, 2.5]})),
        st.booleans(),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pins=pins_strategy, unit_id=st.sampled_from([None, "u1", "ü3", "nobody"]))
def test_opening_through_the_index_answers_exactly_what_a_whole_read_answers(
    tmp_path: Path, pins: list[Pin], unit_id: str | None
) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of(pins), header=HEADER, index=True)
    assert index_path(path).is_file()
    keys = ["m1", "m2", "m3", "t1", "t2"]
    indexed, whole = _both(path, keys, unit_id)
    assert indexed.pop("index_warnings") == [] and whole.pop("index_warnings") == []
    assert indexed == whole


def test_the_index_leaves_the_recording_byte_for_byte_as_without_it(tmp_path: Path) -> None:
    events = events_of([("u1", "m1", 1, False), ("u2", "t1", "x", True)])
    plain, indexed = tmp_path / "plain.jsonl", tmp_path / "indexed.jsonl"
    write_recording(plain, events, header=HEADER, index=False)
    write_recording(indexed, events, header=HEADER, index=True)
    assert plain.read_bytes() == indexed.read_bytes()
    assert not index_path(plain).exists() and index_path(indexed).is_file()


def test_large_or_indexed_recordings_get_an_index_by_default_and_index_false_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 1, False)]), header=HEADER)
    assert not index_path(path).exists()
    write_recording(path, events_of([("u1", "m1", 1, False)]), header=HEADER, index=True)
    # Written again (a re-recording, `reseal`): the index is kept, and agrees with the new file.
    write_recording(path, events_of([("u1", "m1", 2, False)]), header=HEADER)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordingIndexWarning)
        assert _outcome(ReplayPins.from_recording(path), "m1") == ("answer", 2)
    write_recording(path, events_of([("u1", "m1", 2, False)]), header=HEADER, index=False)
    assert not index_path(path).exists()
    many = [("u1", f"m{n}", n, False) for n in range(INDEX_MIN_EVENTS)]
    write_recording(path, events_of(many, other_every=INDEX_MIN_EVENTS), header=HEADER)
    assert index_path(path).is_file()


def test_an_index_left_from_another_recording_is_ignored_loudly(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 1, False), ("u1", "m2", 2, False)]), header=HEADER, index=True)
    stale = index_path(path).read_bytes()
    write_recording(path, events_of([("u1", "m1", 10, False)]), header=HEADER, index=False)
    index_path(path).write_bytes(stale)
    with pytest.warns(RecordingIndexWarning, match="ignored, it indexes a recording of"):
        replay = ReplayPins.from_recording(path)
    assert _outcome(replay, "m1") == ("answer", 10)
    assert _outcome(replay, "m2")[0] == "miss"


def test_a_damaged_index_is_ignored_loudly(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 1, False)]), header=HEADER, index=True)
    data = bytearray(index_path(path).read_bytes())
    data[-40] ^= 0xFF
    index_path(path).write_bytes(bytes(data))
    with pytest.warns(RecordingIndexWarning, match="do not match its own digest"):
        replay = ReplayPins.from_recording(path)
    assert _outcome(replay, "m1") == ("answer", 1)


def test_a_line_edited_by_hand_in_place_is_refused_as_a_whole_read_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 111, False), ("u1", "m2", 2, False)]), header=HEADER, index=True)
    text = path.read_text()
    # The same size, so the index still matches the file's size and header: the line's own check finds it.
    path.write_text(text.replace('"raw":111', '"raw":999'))
    copy = tmp_path / "copy.jsonl"
    shutil.copy(path, copy)
    with pytest.raises(SealBroken) as whole:
        ReplayPins.from_recording(copy)
    replay = ReplayPins.from_recording(path)
    with pytest.warns(RecordingIndexWarning, match="does not match the seal"), pytest.raises(SealBroken) as lazy:
        _outcome_raw(replay, "m1")
    assert str(lazy.value) == str(whole.value).replace(str(copy), str(path))


def test_an_ambiguous_key_warns_on_opening_and_refuses_to_answer_as_a_whole_read_does(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 1, False), ("u2", "m1", 2, False)]), header=HEADER, index=True)
    with pytest.warns(UserWarning, match="1 key"):
        replay = ReplayPins.from_recording(path)
    with pytest.raises(AmbiguousPin):
        _outcome_raw(replay, "m1")


def _outcome_raw(replay: ReplayPins, key: str) -> object:
    return replay.resolve(key, kind="model_call", effect=lambda: None, interpret=lambda value: value)


def test_old_pins_read_through_upcasts_so_the_index_holds_no_keys_and_the_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    events = events_of([("u1", "m1", 1, False)])
    write_recording(path, events, header=HEADER, index=True)
    meta = json.loads(index_path(path).read_bytes().split(b"\n", 1)[0])
    assert meta["keyed"] is True and meta["keys"] == 1
    old = [dataclasses.replace(e, schema_version=1) if e.type == "pin_promoted" else e for e in events]
    write_recording(path, old, header=HEADER, index=True)
    meta = json.loads(index_path(path).read_bytes().split(b"\n", 1)[0])
    assert meta["keyed"] is False
    assert _outcome(ReplayPins.from_recording(path), "m1") == ("answer", 1)


def test_opening_reads_only_the_lines_it_answers_from(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_recording(path, events_of([("u1", "m1", 1, False), ("u2", "m2", 2, False)]), header=HEADER, index=True)
    lines = path.read_bytes().split(b"\n")
    other = next(n for n, line in enumerate(lines) if b'"key":"m2"' in line)
    # u2's pin made unreadable, its size kept: a whole read refuses the file; u1's answers do not need that line.
    lines[other] = b"#" * len(lines[other])
    path.write_bytes(b"\n".join(lines))
    assert _outcome(ReplayPins.from_recording(path), "m1") == ("answer", 1)
    assert _outcome(ReplayPins.from_recording(path, unit_id="u1"), "m1") == ("answer", 1)
    # A walk over every pin reads them all, and finds the line as a whole read does.
    replay = ReplayPins.from_recording(path)
    warned = pytest.warns(RecordingIndexWarning, match="line 4 does not match the seal")
    with warned, pytest.raises(AnagrapheusError, match=r"run\.jsonl:4: line is not valid JSON"):
        _outcome_raw(replay, "m2")
