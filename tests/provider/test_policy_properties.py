"""Properties of the default call policy over generated message histories."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    InstructionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider import CallPin, SemanticCallPolicy, call_pin
from anagrapheus.timeline.canonical import canonical_value, pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of, moved_fields

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CALL_IDS = ["pyd_ai_a", "pyd_ai_b", "call_c", "toolu_d"]
PARAMETERS = ModelRequestParameters(
    function_tools=[ToolDefinition(name="quota", parameters_json_schema={"type": "object"}, description="Quota.")]
)

texts = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
request_parts = st.one_of(
    st.builds(UserPromptPart, texts),
    st.builds(SystemPromptPart, texts),
    st.builds(
        lambda content, call_id: ToolReturnPart("quota", content, tool_call_id=call_id),
        json_values,
        st.sampled_from(CALL_IDS),
    ),
)
response_parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(lambda content: ThinkingPart(content, signature="sig"), texts),
    st.builds(
        lambda args, call_id: ToolCallPart("quota", args, call_id),
        st.dictionaries(texts, json_values, max_size=3),
        st.sampled_from(CALL_IDS),
    ),
)


@st.composite
def histories(draw: st.DrawFn) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for turn in range(draw(st.integers(min_value=1, max_value=7))):
        if turn % 2 == 0:
            parts = draw(st.lists(request_parts, min_size=1, max_size=3))
            messages.append(ModelRequest(parts=parts, instructions=draw(st.none() | texts)))
        else:
            messages.append(ModelResponse(parts=draw(st.lists(response_parts, min_size=1, max_size=3))))
    return messages


def pin_of(messages: list[ModelMessage], **settings: Any) -> CallPin:
    return call_pin(SemanticCallPolicy(), messages, settings or None, PARAMETERS, model_id="function:uk")


def copy(messages: list[ModelMessage]) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(messages))


def restamped(messages: list[ModelMessage], shift: int) -> list[ModelMessage]:
    """The same conversation as another run would record it: new stamps, ids, signatures and arg encodings."""
    fresh = copy(messages)
    renamed = {old: f"call_{shift}_{index}" for index, old in enumerate(CALL_IDS)}
    later = T0 + timedelta(minutes=shift)
    for message in fresh:
        message.timestamp = later
        message.run_id, message.conversation_id, message.metadata = f"run-{shift}", f"conv-{shift}", {"n": shift}
        if isinstance(message, ModelResponse):
            message.provider_name, message.provider_response_id = "openai", f"resp-{shift}"
            message.model_name, message.provider_details = f"uk-{shift}", {"created": shift}
        for part in message.parts:
            if isinstance(part, UserPromptPart | SystemPromptPart | ToolReturnPart):
                part.timestamp = later
            if isinstance(part, ToolReturnPart | ToolCallPart):
                part.tool_call_id = renamed[part.tool_call_id]
            if isinstance(part, ToolCallPart) and shift % 2:
                part.args = json.dumps(part.args)
            if isinstance(part, ThinkingPart | TextPart):
                part.id, part.provider_name = f"item-{shift}", "openai"
            if isinstance(part, ThinkingPart):
                part.signature = f"sig-{shift}"
    return fresh


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(min_value=1, max_value=50))
def test_a_history_restamped_by_another_run_keeps_its_key(messages: list[ModelMessage], shift: int) -> None:
    assert pin_of(restamped(messages, shift), timeout=shift) == pin_of(messages)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_the_key_is_that_of_the_documented_material(messages: list[ModelMessage]) -> None:
    settings_ = {"temperature": 0.5, "extra_body": {"reasoning": {"effort": "low"}, "user": "u"}}
    material = SemanticCallPolicy().material(messages, settings_, PARAMETERS, model_id="function:uk")  # pyright: ignore[reportArgumentType]
    assert canonical_value(material) == material
    assert pin_of(messages, **settings_) == CallPin(
        key=pin_key("model_call", material), fingerprint=fingerprint_of(material)
    )


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_history_round_tripped_through_json_keeps_its_key(messages: list[ModelMessage]) -> None:
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    assert pin_of(loaded) == pin_of(messages)


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_changing_any_text_changes_the_key_and_names_its_message(
    messages: list[ModelMessage], data: st.DataObject
) -> None:
    # Every example has a text to edit: the history opens with a user prompt, as an agent run's does.
    messages = [ModelRequest(parts=[UserPromptPart(data.draw(texts))]), *messages]
    places = [
        (m, p)
        for m, message in enumerate(messages)
        for p, part in enumerate(message.parts)
        if isinstance(part, UserPromptPart | SystemPromptPart | TextPart | ThinkingPart)
    ]
    m, p = data.draw(st.sampled_from(places))
    edited = copy(messages)
    part: Any = edited[m].parts[p]
    part.content = part.content + data.draw(st.sampled_from(["x", " ", "é", "0"]))
    before, after = pin_of(messages), pin_of(edited)
    assert after.key != before.key
    assert moved_fields(after.fingerprint, before.fingerprint) == [f"messages[{m}]"]


# Names that collide once NFC-normalised ("café" twice) or once deduplicated ("quota", "quota#"): the by-name
# index must resolve them the same way for the key as for the fingerprint, and the material must be canonical.
tool_names = st.sampled_from(["quota", "quota#", "Quota", "café", "cafe\u0301", "\u00e4", "a\u0308", ""])
schemas = st.dictionaries(texts, json_values, max_size=3)


def definitions(kind: str) -> st.SearchStrategy[ToolDefinition]:
    return st.builds(
        ToolDefinition,
        name=tool_names,
        parameters_json_schema=schemas,
        description=st.none() | texts,
        strict=st.none() | st.booleans(),
        kind=st.just(kind),
        sequential=st.booleans(),
        metadata=st.none() | st.just({"volatile": True}),
    )


def tool_lists(kind: str) -> st.SearchStrategy[Any]:
    # A tuple is not what pydantic-ai builds, but a caller may: it is keyed as the list it holds.
    listed = st.lists(definitions(kind), max_size=3)
    return listed | listed.map(tuple)


request_parameters = st.builds(
    ModelRequestParameters,
    function_tools=tool_lists("function"),
    output_tools=tool_lists("output"),
    output_mode=st.sampled_from(["text", "tool", "native", "prompted", "tool_or_text", "auto"]),
    output_object=st.none() | st.builds(OutputObjectDefinition, json_schema=schemas, name=st.none() | texts),
    prompted_output_template=st.none() | texts,
    allow_text_output=st.booleans(),
    allow_image_output=st.booleans(),
    instruction_parts=st.none() | st.lists(st.builds(InstructionPart, texts, dynamic=st.booleans()), max_size=2),
    thinking=st.none() | st.sampled_from(["low", "high"]),
)
model_settings = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2),
        "timeout": st.integers(1, 9),
        "extra_body": st.dictionaries(texts, json_values, max_size=2),
        "stop_sequences": st.lists(texts, max_size=2),
    },
)


@settings(max_examples=200, deadline=None)
@given(histories(), request_parameters, model_settings, st.sampled_from(["function:uk", "openai:gpt-\u00e9"]))
def test_the_key_and_fingerprint_are_those_of_the_material_whatever_the_request_parameters(
    messages: list[ModelMessage], parameters: ModelRequestParameters, settings_: dict[str, Any], model_id: str
) -> None:
    policy = SemanticCallPolicy()
    material = policy.material(messages, settings_, parameters, model_id=model_id)  # pyright: ignore[reportArgumentType]
    assert canonical_value(material) == material
    pin = call_pin(policy, messages, settings_, parameters, model_id=model_id)  # pyright: ignore[reportArgumentType]
    assert pin == CallPin(key=pin_key("model_call", material), fingerprint=fingerprint_of(material))
    # In order too: a fingerprint past its size bound folds its last fields, and divergence reports list in order.
    assert list(pin.fingerprint.items()) == list(fingerprint_of(material).items())
