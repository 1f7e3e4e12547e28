"""A miss under another pydantic-ai names both versions and the fields the key scheme does not know (issue #33)."""

from __future__ import annotations

import dataclasses
from importlib import metadata
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import PinMiss
from anagrapheus.timeline import EventTypeRegistry, PinLedger, RecordingHeader, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.recording import write_recording

PROMPT = "Round 1: state the UK position on cod."


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("The UK holds firm on cod.")])


@dataclasses.dataclass(repr=False)
class LaterUserPromptPart(UserPromptPart):
    """`UserPromptPart` as a later pydantic-ai might ship it: one more field, with a default."""

    brand_new: object = None


LaterUserPromptPart.__name__ = LaterUserPromptPart.__qualname__ = "UserPromptPart"
LaterUserPromptPart.__module__ = "pydantic_ai.messages"


def with_the_new_field_set(messages: list[ModelMessage]) -> list[ModelMessage]:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    part = first.parts[0]
    assert isinstance(part, UserPromptPart)
    later = LaterUserPromptPart(content=part.content, timestamp=part.timestamp, brand_new="set by the caller")
    return [dataclasses.replace(first, parts=[later]), *messages[1:]]


def recorded(tmp_path: Path, *, pydantic_ai: str) -> Path:
    model = FunctionModel(answer, model_name="scripted")
    path = tmp_path / "run.jsonl"
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="round-1")
        Agent(model, capabilities=[Pinning(ledger)]).run_sync(PROMPT)
        ledger.commit()
        provenance = {
            "anagrapheus": metadata.version("anagrapheus"),
            "pydantic_ai": pydantic_ai,
            "python": "3.11.7",
            "key_scheme": "p1",
            "call_policy": "semantic",
            "call_policy_version": 1,
        }
        header = RecordingHeader(
            description="One round.", recorded_with="A FunctionModel.", rerecord="pytest", provenance=provenance
        )
        write_recording(path, store.read(namespace="anagrapheus"), header=header)
    return path


def test_a_miss_under_another_release_names_both_versions_and_the_field_it_set(tmp_path: Path) -> None:
    path = recorded(tmp_path, pydantic_ai="2.60.0")
    replay = ReplayPins.from_recording(path, unit_id="round-1", provenance="ignore")
    agent = Agent(FunctionModel(answer, model_name="scripted"), capabilities=[ProcessHistory(with_the_new_field_set)])

    with pytest.raises(PinMiss) as caught:
        agent.run_sync(PROMPT, capabilities=[Pinning(replay)])

    said = str(caught.value)
    installed = metadata.version("pydantic-ai-slim")
    assert f"recorded with pydantic-ai 2.60.0, replayed under {installed}" in said
    assert "anagrapheus rekey" in said
    assert "messages[0].parts[0].brand_new (UserPromptPart.brand_new)" in said
    assert "set by the caller" not in said  # names and paths only, never values
    assert caught.value.divergence.moved == ("messages[0]",)


def test_a_miss_under_the_release_that_recorded_it_adds_no_version_note(tmp_path: Path) -> None:
    path = recorded(tmp_path, pydantic_ai=metadata.version("pydantic-ai-slim"))
    replay = ReplayPins.from_recording(path, unit_id="round-1")

    with pytest.raises(PinMiss) as caught:
        Agent(FunctionModel(answer, model_name="scripted")).run_sync("Round 1: cod?", capabilities=[Pinning(replay)])

    assert "recorded with pydantic-ai" not in str(caught.value)
    assert "does not know" not in str(caught.value)
    assert caught.value.divergence.notes == ()


def test_the_field_left_at_its_default_still_replays(tmp_path: Path) -> None:
    path = recorded(tmp_path, pydantic_ai="2.60.0")
    replay = ReplayPins.from_recording(path, unit_id="round-1", provenance="ignore")

    def unset(messages: list[ModelMessage]) -> list[ModelMessage]:
        first = messages[0]
        assert isinstance(first, ModelRequest)
        part = first.parts[0]
        assert isinstance(part, UserPromptPart)
        later = LaterUserPromptPart(content=part.content, timestamp=part.timestamp)
        return [dataclasses.replace(first, parts=[later]), *messages[1:]]

    agent = Agent(FunctionModel(answer, model_name="scripted"), capabilities=[ProcessHistory(unset)])
    assert agent.run_sync(PROMPT, capabilities=[Pinning(replay)]).output == "The UK holds firm on cod."
