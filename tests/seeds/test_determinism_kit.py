"""The peer page "Determinism and replay" (../shared/reference/peers/determinism-kit.md): the claims made our own.

The kit's cassette is our recording, its fingerprint our key and fingerprint, its `assert_same_run` ours. Where
the project goes further (it pins tools, which the kit's cassettes do not), the test says so.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import RecordingError, SecretInRecording
from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.testing import assert_same_run
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    ReplayPins,
    SecretScanner,
    SQLiteEventStore,
    fingerprint_of,
    pin_key,
    read_recording,
    write_recording,
)

HEADER = {"description": "trains", "recorded_with": "scripted", "rerecord": "pytest tests/seeds"}


def model(answer: str = "The 9:15 to Lyon leaves from platform 4.", name: str = "scripted-trains") -> FunctionModel:
    return FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(answer)]), model_name=name)


def test_ids_and_clock_are_injectable_so_a_test_can_write_them_down(ledger: PinLedger) -> None:
    """§ Everything ambient is injectable: a run's id and timestamps come from what the test passes."""
    ids = (f"019b0000-0000-7000-8000-{n:012d}" for n in count())
    pinning = Pinning(ledger, new_id=lambda: next(ids), clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    result = Agent(model(), capabilities=[pinning]).run_sync("When is the train?")
    assert result.run_id == "019b0000-0000-7000-8000-000000000000"
    requests = [m for m in result.all_messages() if isinstance(m, ModelRequest)]
    assert {r.timestamp for r in requests} == {datetime(2026, 1, 1, tzinfo=UTC)}


def test_dict_order_is_not_meaning_and_list_order_is() -> None:
    """§ The fingerprint is what "the same run" means: dict order is normalised away, list order kept."""
    assert pin_key("model_call", {"a": 1, "b": [1, 2]}) == pin_key("model_call", {"b": [1, 2], "a": 1})
    assert pin_key("model_call", {"a": 1, "b": [1, 2]}) != pin_key("model_call", {"a": 1, "b": [2, 1]})
    assert fingerprint_of({"a": 1, "b": 2}) == fingerprint_of({"b": 2, "a": 1})


def test_a_miss_names_the_fields_that_moved(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ The fingerprint is what "the same run" means: a miss says what moved, not only "cassette miss"."""
    ledger = PinLedger(store, types)
    Agent(PinnedModel(model(), ledger), instructions="Answer in English.").run_sync("When is the train?")
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss) as miss:
        Agent(PinnedModel(model(), replay), instructions="Answer in French.").run_sync("When is the train?")
    assert "instructions[0]" in miss.value.divergence.moved


def test_a_replay_has_no_live_model_to_fall_through_to(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ A cassette records what the kit does not own: a strict replay never answers with the nearest response."""
    ledger = PinLedger(store, types)
    Agent(PinnedModel(model(), ledger)).run_sync("When is the train?")
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss):
        Agent(PinnedModel(model("never drawn"), replay)).run_sync("When is the next train?")


def test_failures_are_recorded_and_the_retry_that_recovered_replays_too(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ A cassette records what the kit does not own: a 503 and the retry that recovered both replay."""
    failures = {"left": 1}

    def flaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if failures["left"]:
            failures["left"] -= 1
            raise ModelHTTPError(503, "scripted-trains", "busy")
        return ModelResponse(parts=[TextPart("platform 4")])

    def run(resolver: object) -> list[str]:
        seen: list[str] = []
        agent = Agent(FunctionModel(flaky, model_name="scripted-trains"), capabilities=[Pinning(resolver)])  # type: ignore[arg-type]
        for _ in range(2):
            try:
                seen.append(agent.run_sync("Which platform?").output)
                break
            except ModelHTTPError as e:
                seen.append(f"HTTP {e.status_code}")
        return seen

    ledger = PinLedger(store, types)
    assert run(ledger) == ["HTTP 503", "platform 4"]
    ledger.commit()
    failures["left"] = 5  # the model would fail again if it were reached
    assert run(ReplayPins.from_events(store.read(), types)) == ["HTTP 503", "platform 4"]


def test_a_recording_holds_digests_of_the_request_never_its_content(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    """§ A cassette records what the kit does not own: what was asked is kept as digests only."""
    ledger = PinLedger(store, types)
    Agent(PinnedModel(model(), ledger)).run_sync("When is the train to Carcassonne?")
    ledger.commit()
    written = write_recording(tmp_path / "trains.jsonl", store.read(), header=HEADER).read_text()
    assert "Carcassonne" not in written and "platform 4" in written


def test_secrets_are_refused_or_redacted_before_a_recording_is_written(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    """§ A cassette records what the kit does not own: a credential-shaped value never reaches a committed file."""
    ledger = PinLedger(store, types)
    token = "sk-ant-api03-" + "A1b2C3d4" * 8
    ledger.resolve("k", kind="tool_call", effect=lambda: {"auth": f"Bearer {token}"}, interpret=lambda r: r)
    ledger.commit()
    with pytest.raises(SecretInRecording):
        write_recording(tmp_path / "refused.jsonl", store.read(), header=HEADER)
    redacted = write_recording(tmp_path / "kept.jsonl", store.read(), header=HEADER, redact=SecretScanner())
    assert token not in redacted.read_text()


def test_a_recording_says_what_it_was_recorded_against_and_an_unknown_format_is_refused(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    """§ A cassette records what the kit does not own: it names what recorded it; a foreign format is refused."""
    ledger = PinLedger(store, types)
    Agent(PinnedModel(model(), ledger)).run_sync("When is the train?")
    ledger.commit()
    path = write_recording(tmp_path / "trains.jsonl", store.read(), header=HEADER)
    header = read_recording(path).header
    assert header.recorded_with == "scripted" and header.provenance is not None
    lines = path.read_text().splitlines()
    foreign = json.loads(lines[0]) | {"format": "somebody-elses-cassette"}
    path.write_text("\n".join([json.dumps(foreign), *lines[1:]]) + "\n")
    with pytest.raises(RecordingError, match="foreign file"):
        read_recording(path)


def test_assert_same_run_drops_wall_clock_instants_and_names_what_moved(ledger: PinLedger) -> None:
    """§ Comparing two runs: instants and run ids are dropped; the message or field that moved is named."""
    first = Agent(model()).run_sync("When is the train?")
    second = Agent(model()).run_sync("When is the train?")
    assert_same_run(first, second)
    other = Agent(model("The 9:20 to Lyon leaves from platform 5.")).run_sync("When is the train?")
    with pytest.raises(AssertionError, match=r"messages\[1\]"):
        assert_same_run(first, other)


def test_a_replay_serves_what_was_recorded_and_one_run_more_is_a_miss(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Known limitations (a replay serves one run): asking past the recording is a miss, never a wrap-around."""
    ledger = PinLedger(store, types)
    Agent(model(), capabilities=[Pinning(ledger)]).run_sync("When is the train?")
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    agent = Agent(model(), capabilities=[Pinning(replay)])
    agent.run_sync("When is the train?")
    with pytest.raises(PinMiss):
        agent.run_sync("When is the train?")


def test_project_goes_further_tools_are_recorded_too(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ Known limitations (providers recorded, tools not): the project pins a world-reading tool as well."""
    ledger = PinLedger(store, types)
    assert asyncio.run(pinned_tool(ledger, lambda line: "on time", name="status")(line="Lyon")) == "on time"
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    assert asyncio.run(pinned_tool(replay, lambda line: "late", name="status")(line="Lyon")) == "on time"
