"""Fingerprints written as deltas: every reader gives back the whole fingerprint, and a conversation grows linearly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.errors import RecordingError, SecretInRecording
from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
)
from anagrapheus.timeline.recording import (
    FINGERPRINT_DELTAS_VERSION,
    RECORDING_VERSION,
    WHOLE_FINGERPRINTS_VERSION,
    RecordingHeader,
    read_recording,
    stream_pins,
    stream_recording,
    write_recording,
)
from anagrapheus.timeline.recording.lookup import indexed_pins, read_indexed_units
from anagrapheus.timeline.secrets import SecretScanner
from examples.negotiation.runs import RECORDING
from tests.timeline.sample_recording import stored_event

HEADER = RecordingHeader(description="deltas", recorded_with="tests", rerecord="pytest tests/timeline/recording")
WHOLE = Path(__file__).parents[2] / "data" / "negotiation-whole-fingerprints.jsonl"
"""The committed negotiation as written before fingerprint deltas (version 2)."""
DELTAS = Path(__file__).parents[2] / "data" / "negotiation-fingerprint-deltas.jsonl"
"""The committed negotiation as written before compact lines (version 3)."""


def _pin(seq: int, unit: str, kind: str, fingerprint: dict[str, str] | None, *, version: int = 2) -> StoredEvent:
    text = None if fingerprint is None else json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    payload = PinPromoted.payload_text(
        unit_id=unit, key=f"p1:{kind}:{seq:064x}", kind=kind, raw=str(seq), attempts=1, fingerprint=text
    )
    return stored_event(seq, unit, "anagrapheus", "pin_promoted", payload, version=version)


# Each step: a unit, a kind, and how the pin's fingerprint differs from the last of its kind in its unit: whole
# afresh, none, or that one with fields added, changed and removed (in a pin of an older event version too, which is
# never a base); or an event that is no pin at all.
steps = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "ü3"]),
        st.sampled_from(["model_call", "tool_call", "note"]),
        st.sampled_from(["grow", "grow", "grow", "none", "fresh", "older"]),
        st.integers(0, 3),  # fields added
        st.integers(0, 2),  # fields changed
        st.integers(0, 1),  # fields removed
    ),
    max_size=30,
)


COMMON = {"model": "1" * 16, "settings": "2" * 16, "tools.lookup": "3" * 16, "messages[0]": "4" * 16}


def _events(drawn: list[tuple[str, str, str, int, int, int]]) -> list[StoredEvent]:
    """Pins of interleaved units and kinds whose fingerprints grow as a conversation's do (and other events)."""
    last: dict[tuple[str, str], dict[str, str]] = {}
    events: list[StoredEvent] = []
    for seq, (unit, kind, how, added, changed, removed) in enumerate(drawn, start=1):
        if kind == "note":
            events.append(
                stored_event(seq, unit, "app", "noted", json.dumps({"fingerprint": {"a": "b"}}, separators=(",", ":")))
            )
            continue
        fingerprint: dict[str, str] | None
        if how == "none":
            fingerprint = None
        else:
            # Every unit's fingerprints share most entries, as calls to one model with one prompt do: a delta
            # against another unit's would be short, and wrong.
            base = dict(COMMON) if how == "fresh" else dict(last.get((unit, kind), COMMON))
            for name in list(base)[:removed]:
                del base[name]
            for name in list(base)[:changed]:
                base[name] = f"{seq:016x}"
            for n in range(added):
                base[f"messages[{len(base) + n}]"] = f"{len(base) + n:016x}"
            fingerprint = last[(unit, kind)] = base
        events.append(_pin(seq, unit, kind, fingerprint, version=1 if how == "older" else 2))
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=steps, indexed=st.booleans())
def test_every_event_reads_back_exactly_whole_fingerprints_and_all(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[tuple[str, str, str, int, int, int]], indexed: bool
) -> None:
    events = _events(drawn)
    path = write_recording(tmp_path_factory.mktemp("d") / "run.jsonl", events, header=HEADER, index=indexed)

    # Whole, streamed, as pins, and one unit at a time through the index: each the log's events exactly.
    assert read_recording(path).events == tuple(events)
    assert tuple(stream_recording(path)[1]) == tuple(events)
    types = EventTypeRegistry()
    pins = list(stream_pins(path)[1])
    assert pins == [PinPromoted.read_text(e, types) for e in events if e.type == "pin_promoted"]
    if indexed:
        for unit in {e.correlation_id for e in events if e.correlation_id is not None}:
            alone = read_indexed_units(path, [unit])
            assert alone is not None
            assert alone.events == tuple(e for e in events if e.correlation_id == unit)
        # Each key asked alone, through the index: the pin of its line, its fingerprint whole (an index over an
        # older pin holds no keys: those read whole).
        opened = indexed_pins(path, types, call_policy=None, provenance="ignore", whole=dict)
        assert (opened is None) == any(e.schema_version == 1 for e in events if e.type == "pin_promoted")
        if opened is not None:
            assert [opened[1][pin.key] for pin in pins] == pins
    lines = path.read_text(encoding="utf-8").splitlines()
    holds = any('"fingerprint_delta":' in line for line in lines[1:])
    compact = any('"namespace":' not in line for line in lines[1:])
    assert json.loads(lines[0])["version"] == (
        RECORDING_VERSION if compact else FINGERPRINT_DELTAS_VERSION if holds else WHOLE_FINGERPRINTS_VERSION
    )


def test_a_recording_written_before_deltas_reads_as_the_same_events_as_the_committed_one() -> None:
    # The negotiation as committed before deltas (version 2, every fingerprint whole) and as re-recorded since.
    old, new = read_recording(WHOLE), read_recording(RECORDING)

    assert json.loads(WHOLE.read_text(encoding="utf-8").splitlines()[0])["version"] == WHOLE_FINGERPRINTS_VERSION
    assert json.loads(RECORDING.read_text(encoding="utf-8").splitlines()[0])["version"] == RECORDING_VERSION
    assert '"fingerprint_delta":' not in WHOLE.read_text(encoding="utf-8")
    assert '"fingerprint_delta":' in RECORDING.read_text(encoding="utf-8")
    assert old.events == new.events
    assert len(RECORDING.read_bytes()) < len(WHOLE.read_bytes())


def test_a_recording_written_before_compact_lines_reads_as_the_same_events_and_is_written_again_when_asked(
    tmp_path: Path,
) -> None:
    # The negotiation as committed with fingerprint deltas but whole lines (version 3), and as written since.
    old = read_recording(DELTAS)

    assert json.loads(DELTAS.read_text(encoding="utf-8").splitlines()[0])["version"] == FINGERPRINT_DELTAS_VERSION
    assert old.events == read_recording(RECORDING).events
    assert len(RECORDING.read_bytes()) < len(DELTAS.read_bytes())
    path = write_recording(tmp_path / "v3.jsonl", old.events, header=old.header, compact_lines=False)
    assert path.read_bytes() == DELTAS.read_bytes()


def test_writing_whole_fingerprints_when_asked_gives_a_file_an_older_reader_reads(tmp_path: Path) -> None:
    events = read_recording(RECORDING).events
    header = read_recording(WHOLE).header

    path = write_recording(tmp_path / "old.jsonl", events, header=header, fingerprint_deltas=False)

    assert path.read_bytes() == WHOLE.read_bytes()


def test_a_delta_is_taken_only_within_a_run_of_its_units_pins_so_a_reader_holds_one_units_bases(
    tmp_path: Path,
) -> None:
    grown = {"a": "1", "b": "2", "c": "3", "d": "4"}
    events = [
        _pin(1, "u", "model_call", {"a": "1", "b": "2", "c": "3"}),
        _pin(2, "v", "model_call", {"a": "1", "b": "2", "c": "3"}),
        _pin(3, "u", "model_call", grown),  # its unit's run was ended by v's pin: written whole
        _pin(4, "u", "model_call", {**grown, "e": "5"}),  # a delta against the line before
    ]
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER, index=True)
    payloads = [json.loads(line)["payload"] for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert [("fingerprint_delta" in payload) for payload in payloads] == [False, False, False, True]
    assert payloads[3]["fingerprint_delta"] == {"set": {"e": "5"}}
    assert read_recording(path).events == tuple(events)
    alone = read_indexed_units(path, ["u"])
    assert alone is not None and alone.events == (events[0], events[2], events[3])


def test_a_delta_with_nothing_to_apply_to_or_of_another_shape_is_refused_naming_its_line(tmp_path: Path) -> None:
    events = [
        _pin(1, "u", "model_call", {"a": "1", "b": "2", "c": "3"}),
        _pin(2, "u", "model_call", {"a": "1", "b": "2", "c": "3", "d": "4"}),
    ]
    # Whole lines, so the edits below change each field as a whole line holds it.
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER, compact_lines=False)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[2])["payload"]["fingerprint_delta"] == {"set": {"d": "4"}}

    def refused(edited: list[str], message: str, line: int = 3) -> None:
        (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n", encoding="utf-8")
        with pytest.raises(RecordingError, match=message) as raised:
            read_recording(tmp_path / "edited.jsonl", seal="ignore")
        assert raised.value.line == line

    refused([lines[0], lines[2]], "with no earlier fingerprint of its kind in its run", line=2)
    refused([lines[0], lines[1], lines[2].replace('{"set":{"d":"4"}}', '{"drop":["x"]}')], r"drops \['x'\]")
    refused([lines[0], lines[1], lines[2].replace('{"set":{"d":"4"}}', '{"set":{"d":4}}')], "object of strings")
    refused([lines[0], lines[1], lines[2].replace('{"set":{"d":"4"}}', '{"add":{}}')], "must be an object of")
    # A pin of another unit moved between the delta and its base ends the run the base belonged to.
    other = lines[1].replace('"unit_id":"u"', '"unit_id":"v"').replace('"seq":1,', '"seq":2,')
    other = other.replace("8000-000000000001", "8000-000000000009")
    moved = lines[2].replace('"seq":2,', '"seq":3,')
    refused([lines[0], lines[1], other, moved], "with no earlier fingerprint of its kind in its run", line=4)
    # The seal names a delta edited by hand, as it names any line.
    (tmp_path / "edited.jsonl").write_text("\n".join([lines[0], lines[1], lines[2].replace('"4"', '"5"')]) + "\n")
    with pytest.raises(RecordingError, match="edited by hand"):
        read_recording(tmp_path / "edited.jsonl")


def test_the_secret_search_sees_each_fingerprint_whole_and_a_redaction_reads_back_in_every_line(
    tmp_path: Path,
) -> None:
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 3
    first = {"=messages[0]": f"use {secret}", "messages[0]": "1" * 16, "model": "2" * 16}
    events = [_pin(1, "u", "model_call", first), _pin(2, "u", "model_call", {**first, "messages[1]": "3" * 16})]

    with pytest.raises(SecretInRecording):
        write_recording(tmp_path / "refused.jsonl", events, header=HEADER)
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER, redact=SecretScanner())

    assert secret not in path.read_text(encoding="utf-8")
    assert '"fingerprint_delta":{"set":{"messages[1]":' in path.read_text(encoding="utf-8")
    read = [json.loads(e.payload)["fingerprint"] for e in read_recording(path).events]
    assert read[0]["=messages[0]"] == read[1]["=messages[0]"] != first["=messages[0]"]
    assert read[1] == {**read[0], "messages[1]": "3" * 16}


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"Noted, after {len(messages)} message(s).")])


async def _conversation(resolver: object, turns: int) -> list[list[ModelMessage]]:
    """A conversation of `turns` turns through `PinnedModel`; the history each turn was asked with."""
    agent = Agent(PinnedModel(FunctionModel(_reply, model_name="scripted"), resolver))  # pyright: ignore[reportArgumentType]
    history: list[ModelMessage] = []
    asked: list[list[ModelMessage]] = []
    for turn in range(turns):
        asked.append(list(history))
        history = (
            await agent.run(f"Question {turn}: what about topic {turn}?", message_history=history)
        ).all_messages()
    return asked


def _recorded(tmp_path: Path, turns: int, *, deltas: bool = True) -> tuple[Path, list[list[ModelMessage]]]:
    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path / f"run-{turns}.db") as store:
        ledger = PinLedger(store, types)
        asked = asyncio.run(_conversation(ledger, turns))
        ledger.commit()
        path = write_recording(
            tmp_path / f"run-{turns}-{deltas}.jsonl", store.read(), header=HEADER, fingerprint_deltas=deltas
        )
    return path, asked


def test_a_replay_of_a_compacted_conversation_names_the_early_message_that_moved(tmp_path: Path) -> None:
    compact, asked = _recorded(tmp_path, 12)
    whole = write_recording(
        tmp_path / "whole.jsonl", read_recording(compact).events, header=HEADER, fingerprint_deltas=False
    )
    assert '"fingerprint_delta":' in compact.read_text(encoding="utf-8")
    # The last turn asked again with the conversation's third message (turn 1's prompt) reworded.
    history = asked[-1]
    request = history[2]
    assert isinstance(request, ModelRequest) and isinstance(request.parts[0], UserPromptPart)
    reworded = [*history[:2], ModelRequest(parts=[UserPromptPart("Question 1, reworded.")]), *history[3:]]

    def divergence(path: Path, history: list[ModelMessage]) -> tuple[str, ...] | None:
        with SQLiteEventStore(tmp_path / f"replay-{path.stem}.db") as store:
            replay = ReplayPins.from_recording(path, on_miss="record", into=PinLedger(store, EventTypeRegistry()))
            agent = Agent(PinnedModel(FunctionModel(_reply, model_name="scripted"), replay))
            asyncio.run(agent.run("Question 11: what about topic 11?", message_history=history))
            return None if replay.divergence is None else replay.divergence.moved

    assert divergence(compact, history) is None  # asked as recorded: a hit
    assert divergence(compact, reworded) == divergence(whole, reworded) == ("messages[2]",)


def _fingerprint_bytes(path: Path) -> int:
    """The bytes the recording's lines spend on fingerprints, whole or as deltas."""
    spent = 0
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        payload = json.loads(line)["payload"]
        for name in ("fingerprint", "fingerprint_delta"):
            if payload.get(name) is not None:
                spent += len(json.dumps(payload[name], separators=(",", ":")))
    return spent


def test_a_conversations_fingerprints_grow_linearly_with_it(tmp_path: Path) -> None:
    short, _ = _recorded(tmp_path, 5)
    long, _ = _recorded(tmp_path, 20)

    # Four times the turns: about four times the bytes (whole fingerprints spent about sixteen times).
    assert _fingerprint_bytes(long) / _fingerprint_bytes(short) <= 4.5
