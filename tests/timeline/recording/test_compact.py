"""Version 4 recordings: compact pin and run lines, histories referring to pinned responses; every reader exact."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.errors import RecordingError, SealBroken
from anagrapheus.provider import Pinning
from anagrapheus.provider.inputs import recorded_runs, run_inputs_payload
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinPromoted, SQLiteEventStore, StoredEvent
from anagrapheus.timeline.canonical import stored_json
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
from anagrapheus.timeline.recording.responses import RESPONSE_OF
from tests.timeline.sample_recording import stored_event

HEADER = RecordingHeader(description="compact", recorded_with="tests", rerecord="pytest tests/timeline/recording")


def _event(seq: int, unit: str | None, namespace: str, kind: str, payload: str, *, version: int) -> StoredEvent:
    """A stored event; every fifth has a causation, which a compact line cannot leave out: written whole."""
    return stored_event(seq, unit, namespace, kind, payload, version=version, causation_id=None if seq % 5 else "cause")


def _response(n: int, *, stamped: bool) -> dict[str, object]:
    """A model response as pydantic-ai dumps it; `stamped`: with the fields set after the call, as a history holds."""
    response: dict[str, object] = {
        "kind": "response",
        "parts": [{"part_kind": "text", "content": f"answer {n} é", "id": None}],
        "usage": {"input_tokens": n, "audio_seconds": 0.0, "cost": 1.5},
        "model_name": "scripted",
        "timestamp": "2026-01-05T09:00:00Z",
        "run_id": None,
        "conversation_id": None,
        "model_id": None,
    }
    if stamped:
        response.update(run_id=f"run-{n}", conversation_id="conv", model_id="function:scripted")
    return response


def _request(n: int, how: str) -> dict[str, object]:
    """A request before a response, sharing its stamped fields or not (a reference leaves out the ones shared)."""
    request: dict[str, object] = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"ask {n}"}]}
    request["run_id"] = f"run-{n}" if n % 2 else "another run"
    if how == "failed":
        request["conversation_id"] = "conv"
    elif how == "retried":
        request["model_id"] = "function:scripted"  # which the response, below, does not hold
    return request


# Each step: a unit (or none), what the event is, a number naming a response, and how the event is unusual.
steps = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2", "ü3", None]),
        st.sampled_from(["model_call", "model_call", "tool_call", "inputs", "inputs", "note", "older"]),
        st.integers(0, 4),
        st.sampled_from(["plain", "plain", "plain", "retried", "failed", "fingerprint", "other_unit", "changed"]),
    ),
    max_size=25,
)


def _events(drawn: list[tuple[str | None, str, int, str]]) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    for seq, (unit, what, n, how) in enumerate(drawn, start=1):
        payload_unit = "elsewhere" if how == "other_unit" or unit is None else unit
        if what == "note":
            payload = stored_json({"unit_id": payload_unit, "n": n})
            events.append(_event(seq, unit, "app", "noted", payload, version=1))
        elif what == "inputs":
            # A history of requests and responses, some as a pin holds them (once stamped), some not.
            history: list[object] = []
            for m in range(n + 1):
                history.append(_request(m, how))
                response = _response(m, stamped=True)
                if how == "changed" and m == n:
                    response["model_name"] = "another"
                if how == "retried":
                    del response["model_id"]
                history.append(response)
            inputs = {"format": 1, "history": history, "prompt": f"ask {n}"}
            payload = run_inputs_payload(unit_id=payload_unit, run_id=f"r{seq}", inputs_text=stored_json(inputs))
            events.append(_event(seq, unit, "anagrapheus", "run_inputs", payload, version=1))
        else:
            kind = "tool_call" if what == "tool_call" else "model_call"
            raw = stored_json({"ordered_json": json.dumps(_response(n, stamped=False))})
            fingerprint = stored_json({"messages[0]": f"{n:016x}"}) if how == "fingerprint" else None
            payload = PinPromoted.payload_text(
                unit_id=payload_unit,
                key=f"p1:{kind}:{seq:064x}",
                kind=kind,
                raw=raw,
                attempts=2 if how == "retried" else 1,
                fingerprint=fingerprint,
                failed=how == "failed",
            )
            version = 1 if what == "older" else 2
            events.append(_event(seq, unit, "anagrapheus", "pin_promoted", payload, version=version))
    return events


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=steps, indexed=st.booleans())
def test_every_event_reads_back_exactly_through_every_reader(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[tuple[str | None, str, int, str]], indexed: bool
) -> None:
    events = _events(drawn)
    folder = tmp_path_factory.mktemp("c")
    path = write_recording(folder / "run.jsonl", events, header=HEADER, index=indexed)

    assert read_recording(path).events == tuple(events)
    assert tuple(stream_recording(path)[1]) == tuple(events)
    types = EventTypeRegistry()
    pins = list(stream_pins(path)[1])
    assert pins == [PinPromoted.read_text(e, types) for e in events if e.type == "pin_promoted"]
    if indexed:
        # A unit's lines, as `--unit` names them: a built-in event's unit_id, another's correlation id.
        shown = [str(e.payload_json()["unit_id"]) if e.namespace == "anagrapheus" else e.correlation_id for e in events]
        for unit in {unit for unit in shown if unit is not None}:
            alone = read_indexed_units(path, [unit])
            assert alone is not None
            assert alone.events == tuple(e for e, of in zip(events, shown, strict=True) if of == unit)
        opened = indexed_pins(path, types, call_policy=None, provenance="ignore", whole=dict)
        if opened is not None:
            assert [opened[1][pin.key] for pin in pins] == pins
    # Written whole when asked: the same events, in the version an older reader reads.
    whole = write_recording(folder / "whole.jsonl", events, header=HEADER, compact_lines=False)
    assert read_recording(whole).events == tuple(events)
    lines = path.read_text(encoding="utf-8").splitlines()
    compact = any('"namespace":' not in line or RESPONSE_OF in line for line in lines[1:])
    older = whole.read_text(encoding="utf-8").splitlines()
    deltas = FINGERPRINT_DELTAS_VERSION if any('"fingerprint_delta"' in line for line in older) else None
    assert json.loads(lines[0])["version"] == (RECORDING_VERSION if compact else deltas or WHOLE_FINGERPRINTS_VERSION)
    assert json.loads(older[0])["version"] == (deltas or WHOLE_FINGERPRINTS_VERSION)
    assert not any('"namespace":' not in line or RESPONSE_OF in line for line in older[1:])


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"fact about {topic}"


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call `lookup` on a new prompt, answer once it returned (as `benchmarks/agent.py`'s model)."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"The record says {part.content}.")])
    prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[ToolCallPart("lookup", {"topic": str(prompt)[:40]})])


def _conversation(tmp_path: Path, turns: int) -> tuple[StoredEvent, ...]:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        model = FunctionModel(scripted, model_name="scripted")
        agent = Agent(model, tools=[lookup], capabilities=[Pinning(ledger)])

        async def converse() -> None:
            history = None
            for turn in range(turns):
                result = await agent.run(f"Question {turn}?", message_history=history)
                history = result.all_messages()

        asyncio.run(converse())
        ledger.commit()
        return tuple(store.read())


def test_a_conversations_runs_refer_to_their_pinned_responses_and_read_back_the_same_histories(
    tmp_path: Path,
) -> None:
    events = _conversation(tmp_path, 4)
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER, index=True)
    old = write_recording(tmp_path / "old.jsonl", events, header=HEADER, compact_lines=False)

    text = path.read_text(encoding="utf-8")
    # Runs 2 to 4 each hold the two responses the run before added, referred to; no response is copied.
    assert text.count(RESPONSE_OF) == 6
    assert '"kind":"response"' not in text.replace('\\"', '"').split('"type":"run_inputs"', 1)[-1]
    assert json.loads(text.splitlines()[0])["version"] == RECORDING_VERSION
    assert json.loads(old.read_text(encoding="utf-8").splitlines()[0])["version"] == FINGERPRINT_DELTAS_VERSION
    assert path.stat().st_size < 0.8 * old.stat().st_size
    assert read_recording(path).events == read_recording(old).events == events
    unit = events[0].correlation_id
    assert unit is not None
    alone = read_indexed_units(path, [unit])
    assert alone is not None and alone.events == events
    runs = recorded_runs(read_recording(path).events)
    assert [run.message_history for run in runs] == [run.message_history for run in recorded_runs(events)]
    assert [len(run.message_history or ()) for run in runs] == [0, 4, 8, 12]


def test_a_reference_whose_pin_is_gone_or_a_compact_line_of_another_shape_is_refused_naming_its_line(
    tmp_path: Path,
) -> None:
    events = _conversation(tmp_path, 2)
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER)
    lines = path.read_text(encoding="utf-8").splitlines()
    referring = next(n for n, line in enumerate(lines) if RESPONSE_OF in line)
    pinned = [n for n, line in enumerate(lines) if '"kind":"model_call"' in line]

    def refused(edited: list[str], message: str, line: int) -> None:
        (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n", encoding="utf-8")
        with pytest.raises(RecordingError, match=message) as raised:
            read_recording(tmp_path / "edited.jsonl", seal="ignore")
        assert raised.value.line == line

    gone = [line for n, line in enumerate(lines) if n not in pinned]
    refused(gone, "names no model response an earlier pin", referring + 1 - len(pinned))
    compact = lines[1]
    assert '"namespace"' not in compact and '"type"' not in compact
    fields = json.loads(compact)
    refused([lines[0], json.dumps({**fields, "type": "noted"}), *lines[2:]], r"not a stored event: missing", 2)
    # A field a compact line leaves out, written in by hand, is read as written; the seal names the edit.
    fields["payload"]["attempts"] = 3
    (tmp_path / "edited.jsonl").write_text("\n".join([lines[0], json.dumps(fields), *lines[2:]]) + "\n")
    edited = read_recording(tmp_path / "edited.jsonl", seal="ignore").events[0]
    assert PinPromoted.read_text(edited, EventTypeRegistry()).attempts == 3
    with pytest.raises(SealBroken) as broken:
        read_recording(tmp_path / "edited.jsonl")
    assert broken.value.line == 2
