"""Values in divergence reports (opt-in): a miss shows what each moved field held and holds, bounded and redacted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from anagrapheus import EventTypeRegistry, PinLedger, PinnedModel, ReplayPins, SQLiteEventStore
from anagrapheus.errors import PinMiss
from anagrapheus.provider import SemanticCallPolicy
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import ELLIPSIS, MovedValue
from anagrapheus.timeline.fingerprint import VALUE_CHARS, fingerprint_of
from anagrapheus.timeline.recording import read_recording, write_recording

PROMPT = "Round 3: state the UK position on energy."
REWORDED = "Round 3: restate, briefly, the UK position on energy."
HEADER = {"description": "one round", "recorded_with": "a scripted FunctionModel", "rerecord": "pytest"}


def negotiator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("The UK is ready to talk on energy.")])


MODEL = FunctionModel(negotiator, model_name="scripted-uk")


def record(tmp_path: Path, types: EventTypeRegistry, policy: SemanticCallPolicy, prompt: str = PROMPT) -> Path:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="round-3")
        Agent(PinnedModel(MODEL, ledger, policy=policy)).run_sync(prompt)
        ledger.commit()
        return write_recording(
            tmp_path / "run.jsonl", store.read(namespace="anagrapheus", type="pin_promoted"), header=HEADER
        )


def miss(path: Path, types: EventTypeRegistry, policy: SemanticCallPolicy, prompt: str = REWORDED) -> PinMiss:
    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)
    with pytest.raises(PinMiss) as caught:
        Agent(PinnedModel(MODEL, replay, policy=policy)).run_sync(prompt)
    return caught.value


def test_a_reworded_prompt_shows_the_recorded_and_the_current_text_of_messages_0(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    policy = SemanticCallPolicy(keep_values=True)
    path = record(tmp_path, types, policy)

    error = miss(path, types, policy)

    assert error.divergence.moved == ("messages[0]",)
    [value] = error.divergence.values
    assert value.field == "messages[0]"
    assert value.recorded is not None and PROMPT in value.recorded
    assert value.current is not None and REWORDED in value.current
    message = str(error)
    assert "recorded …" in message and "Round 3: [state] the UK position on energy." in message
    assert "current  …" in message and "Round 3: [restate, briefly,] the UK position on energy." in message


def test_by_default_a_miss_names_fields_and_the_log_holds_no_prompt_text(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = record(tmp_path, types, SemanticCallPolicy())

    error = miss(path, types, SemanticCallPolicy())

    assert error.divergence.moved == ("messages[0]",) and error.divergence.values == ()
    assert "Round 3" not in str(error)
    assert PROMPT not in path.read_text(encoding="utf-8")
    assert PROMPT.encode() not in (tmp_path / "live.db").read_bytes()


def test_values_kept_on_one_side_only_are_shown_as_such(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = record(tmp_path, types, SemanticCallPolicy(keep_values=True))

    error = miss(path, types, SemanticCallPolicy())

    assert error.divergence.moved == ("messages[0]",)
    [value] = error.divergence.values
    assert value.current is None and value.recorded is not None and PROMPT in value.recorded
    assert "only the recorded value was kept" in str(error)


def test_kept_values_change_no_key(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = record(tmp_path, types, SemanticCallPolicy(keep_values=True))
    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)

    result = Agent(PinnedModel(MODEL, replay)).run_sync(PROMPT)

    assert result.output == "The UK is ready to talk on energy." and replay.hits == 1


def test_a_credential_in_a_prompt_is_redacted_before_its_value_is_kept(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    token = "gh" + "p_" + "Zq8" * 12
    path = record(tmp_path, types, SemanticCallPolicy(keep_values=True), prompt=f"Use {token} to open the file.")

    assert token not in path.read_text(encoding="utf-8")
    assert token.encode() not in (tmp_path / "live.db").read_bytes()
    error = miss(path, types, SemanticCallPolicy(keep_values=True), prompt="Open the file.")
    [value] = error.divergence.values
    assert value.recorded is not None and "Use [redacted:github-token:1] to open the file." in value.recorded


def test_a_long_value_is_kept_only_in_part_and_the_report_stays_short(tmp_path: Path, types: EventTypeRegistry) -> None:
    policy = SemanticCallPolicy(keep_values=True)
    long_prompt = "Round 3: " + "the UK restates its position. " * 200
    path = record(tmp_path, types, policy, prompt=long_prompt)

    error = miss(path, types, policy, prompt=long_prompt.replace("Round 3", "Round 4", 1))

    [value] = error.divergence.values
    assert value.recorded is not None and len(value.recorded) == VALUE_CHARS + 1 and value.recorded.endswith(ELLIPSIS)
    assert "Round [3]: the UK" in str(error) and "Round [4]: the UK" in str(error)
    assert len(str(error)) < 1_000


class ListedPolicy:
    """A call policy of one's own, keyed on the prompts only, that keeps values too."""

    name: ClassVar[str] = "listed"
    keep_values = True

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        return {"prompts": [str(getattr(part, "content", "")) for m in messages for part in m.parts]}


def test_a_policy_of_ones_own_keeps_values_through_fingerprint_of(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        Agent(PinnedModel(MODEL, ledger, policy=ListedPolicy())).run_sync(PROMPT)
        ledger.commit()
        events = list(store.read(namespace="anagrapheus", type="pin_promoted"))
    replay = ReplayPins.from_events(events, types)

    with pytest.raises(PinMiss) as caught:
        Agent(PinnedModel(MODEL, replay, policy=ListedPolicy())).run_sync(REWORDED)

    [value] = caught.value.divergence.values
    assert (value.field, value.recorded, value.current) == ("prompts[0]", f'"{PROMPT}"', f'"{REWORDED}"')


def test_fingerprint_of_keeps_values_only_when_asked() -> None:
    material = {"messages": ["hello"], "model": "m"}

    assert fingerprint_of(material) == {k: v for k, v in fingerprint_of(material, values=True).items() if k[0] != "="}
    assert fingerprint_of(material, values=True)["=messages[0]"] == '"hello"'


@given(st.text(max_size=VALUE_CHARS), st.text(max_size=VALUE_CHARS))
@example(recorded="1", current="01")  # an insertion: one side's differing part is empty
def test_a_moved_value_is_shown_in_a_bounded_window_around_the_first_difference(recorded: str, current: str) -> None:
    shown = MovedValue(field="messages[0]", recorded=recorded, current=current).describe()

    assert len(shown) <= 2 * (40 + 120 + 40 + 8) + 40
    if recorded != current:
        # The differing part: what is left of each side after the longest common start, then the longest common
        # end of the rest. An insertion leaves one side's part empty: '1' against '01' shows '[]1' and '[0]1'.
        start = next(
            (i for i, (a, b) in enumerate(zip(recorded, current, strict=False)) if a != b),
            min(len(recorded), len(current)),
        )
        end = 0
        while end < min(len(recorded), len(current)) - start and recorded[-1 - end] == current[-1 - end]:
            end += 1
        for side in (recorded, current):
            assert f"[{side[start : len(side) - end][:120]}" in shown
