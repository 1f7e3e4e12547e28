"""The default call policy: what keeps a model call's key and what moves it, field by field."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from copy import deepcopy as copy_of
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import httpx2
import pytest
from pydantic import BaseModel
from pydantic_ai.messages import (
    BinaryContent,
    BinaryImage,
    CachePoint,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    InstructionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ModelSettingsDeltaPart,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.native_tools import WebSearchTool
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.settings import ModelSettings, ToolOrOutput
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from anagrapheus.errors import CanonicalError
from anagrapheus.provider import CallPin, CallPolicy, SemanticCallPolicy, call_pin
from anagrapheus.timeline.canonical import canonical_value, pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of, moved_fields

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@dataclasses.dataclass
class Call:
    """One model request as PinnedModel sees it."""

    messages: list[ModelMessage]
    settings: ModelSettings | None
    parameters: ModelRequestParameters
    model_id: str = "function:uk"

    def pin(self, policy: CallPolicy | None = None) -> CallPin:
        return call_pin(
            policy or SemanticCallPolicy(), self.messages, self.settings, self.parameters, model_id=self.model_id
        )


def tool(name: str, **properties: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        parameters_json_schema={"type": "object", "properties": {k: {"type": v} for k, v in properties.items()}},
        description=f"The {name} tool.",
    )


def base_call(*, when: datetime = T0, call_id: str = "pyd_ai_1a2b", stamp: str = "run-1") -> Call:
    """A five-message conversation with a tool call, thinking and an image, plus settings and tools."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("You negotiate for the UK.", timestamp=when),
                UserPromptPart("Round 1: state the UK position on fisheries.", timestamp=when),
            ],
            instructions="Be brief.",
            timestamp=when,
            run_id=stamp,
            conversation_id=f"conv-{stamp}",
        ),
        ModelResponse(
            parts=[
                TextPart("Let me check the quota.", id=f"msg_{stamp}", provider_name="openai"),
                ToolCallPart("quota", {"species": "cod", "year": 2026}, tool_call_id=call_id),
            ],
            usage=RequestUsage(input_tokens=10, output_tokens=5),
            model_name="uk-2026-01",
            timestamp=when + timedelta(seconds=1),
            provider_name="openai",
            provider_response_id=f"resp_{stamp}",
            provider_details={"created": when.isoformat()},
            finish_reason="tool_call",
            run_id=stamp,
        ),
        ModelRequest(
            parts=[ToolReturnPart("quota", "12,000 tonnes", tool_call_id=call_id, timestamp=when)],
            instructions="Be brief.",
            timestamp=when,
            run_id=stamp,
        ),
        ModelResponse(
            parts=[
                ThinkingPart("The quota is generous.", signature=f"sig-{stamp}", provider_name="anthropic"),
                TextPart("The UK holds firm on fisheries."),
            ],
            timestamp=when + timedelta(seconds=2),
        ),
        ModelRequest(
            parts=[UserPromptPart(["What does this chart show?", BinaryContent(PNG, media_type="image/png")])],
            instructions="Be brief.",
            timestamp=when,
        ),
    ]
    settings: ModelSettings = {
        "temperature": 0.2,
        "max_tokens": 400,
        "timeout": 30,
        "extra_body": {"reasoning": {"effort": "high"}, "session_id": f"s-{stamp}"},
    }
    parameters = ModelRequestParameters(
        function_tools=[tool("quota", species="string", year="integer"), tool("weather", city="string")],
        output_mode="tool",
        output_object=OutputObjectDefinition(json_schema={"type": "object", "properties": {"tonnes": {}}}),
        output_tools=[tool("final_result", tonnes="integer")],
        allow_text_output=False,
    )
    return Call(messages, settings, parameters)


def changed(call: Call, change: Callable[[Call], None]) -> Call:
    copy = Call(
        ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(call.messages)),
        dict(call.settings or {}),  # pyright: ignore[reportArgumentType]
        copy_of(call.parameters),
        call.model_id,
    )
    change(copy)
    return copy


def set_settings(**entries: Any) -> Callable[[Call], None]:
    def change(call: Call) -> None:
        call.settings = {**(call.settings or {}), **entries}  # pyright: ignore[reportAssignmentType]

    return change


def part(message: int, index: int) -> Callable[[Call], Any]:
    return lambda call: call.messages[message].parts[index]


def set_on(locate: Callable[[Call], Any], **fields: Any) -> Callable[[Call], None]:
    def change(call: Call) -> None:
        target = locate(call)
        for name, value in fields.items():
            setattr(target, name, value)

    return change


def rename_call_ids(call: Call) -> None:
    # A provider-assigned id instead of pydantic-ai's, in the call and in the return that answers it.
    part(1, 1)(call).tool_call_id = "call_Xy9"
    part(2, 0)(call).tool_call_id = "call_Xy9"


def args_as_stream_gives_them(call: Call) -> None:
    target = part(1, 1)(call)
    target.args = json.dumps(target.args, indent=1)


def image_as_binary_image(call: Call) -> None:
    call.messages[4].parts[0].content[1] = BinaryImage(PNG, media_type="image/png", identifier=None)


def reorder_tools(call: Call) -> None:
    call.parameters = dataclasses.replace(call.parameters, function_tools=call.parameters.function_tools[::-1])


def drop_session_only_settings(call: Call) -> None:
    call.settings = {k: v for k, v in (call.settings or {}).items() if k != "extra_body"}  # pyright: ignore[reportAssignmentType]
    call.settings["extra_body"] = {"reasoning": {"effort": "high"}}


VOLATILE: dict[str, Callable[[Call], None]] = {
    "request timestamp": set_on(lambda c: c.messages[0], timestamp=T0 + timedelta(days=3)),
    "part timestamp": set_on(part(0, 1), timestamp=T0 + timedelta(days=3)),
    "tool return timestamp": set_on(part(2, 0), timestamp=T0 + timedelta(days=3)),
    "response timestamp": set_on(lambda c: c.messages[1], timestamp=T0 + timedelta(days=3)),
    "run_id": set_on(lambda c: c.messages[0], run_id="run-2"),
    "conversation_id": set_on(lambda c: c.messages[0], conversation_id="conv-2"),
    "provider_response_id": set_on(lambda c: c.messages[1], provider_response_id="resp_other"),
    "response provider_name": set_on(lambda c: c.messages[1], provider_name="openrouter"),
    "response provider_details": set_on(lambda c: c.messages[1], provider_details={"created": "later"}),
    "response model_name": set_on(lambda c: c.messages[1], model_name="uk-2026-02"),
    "response model_id stamp": set_on(lambda c: c.messages[1], model_id="function:uk"),
    "usage": set_on(lambda c: c.messages[1], usage=RequestUsage(input_tokens=99)),
    "finish_reason": set_on(lambda c: c.messages[1], finish_reason="stop"),
    "message metadata": set_on(lambda c: c.messages[0], metadata={"trace": "abc"}),
    "tool return metadata": set_on(part(2, 0), metadata={"elapsed": 0.3}),
    "text part id": set_on(part(1, 0), id="msg_other"),
    "text part provider_details": set_on(part(1, 0), provider_details={"logprobs": [0.1]}),
    "thinking signature": set_on(part(3, 0), signature="sig-other"),
    "thinking provider_name": set_on(part(3, 0), provider_name="bedrock"),
    "tool_call_id (both ends)": rename_call_ids,
    "tool-call args as a JSON string": args_as_stream_gives_them,
    "BinaryImage for BinaryContent": image_as_binary_image,
    "tool definition order": reorder_tools,
    "toolset_id on a tool": lambda c: setattr(c.parameters.function_tools[0], "toolset_id", "<agent>"),
    "timeout (number)": set_settings(timeout=5),
    "timeout (a Timeout object)": set_settings(timeout=httpx2.Timeout(10.0, connect=2.0)),
    "request_timeout": set_settings(request_timeout=60.0),
    "max_retries": set_settings(max_retries=0),
    "extra_headers": set_settings(extra_headers={"x-trace": "t-1"}),
    "service_tier": set_settings(service_tier="flex"),
    "openai_service_tier": set_settings(openai_service_tier="priority"),
    "cache": set_settings(cache="1h"),
    "anthropic_cache_instructions": set_settings(anthropic_cache_instructions=True),
    "openai_prompt_cache_key": set_settings(openai_prompt_cache_key="game-7"),
    "openai_user": set_settings(openai_user="player-7"),
    "anthropic_metadata user_id": set_settings(anthropic_metadata={"user_id": "player-7"}),
    "extra_body session ids only": drop_session_only_settings,
    "extra_body user": set_settings(extra_body={"reasoning": {"effort": "high"}, "user": "player-7"}),
    "extra_body safety_identifier": set_settings(
        extra_body={"reasoning": {"effort": "high"}, "safety_identifier": "h-7"}
    ),
    "extra_body prompt_cache_key": set_settings(extra_body={"reasoning": {"effort": "high"}, "prompt_cache_key": "k"}),
    "extra_body metadata.user_id": set_settings(
        extra_body={"reasoning": {"effort": "high"}, "metadata": {"user_id": "player-7"}}
    ),
    "a setting set to None": set_settings(seed=None),
    "a cache point in the prompt": lambda c: c.messages[4].parts[0].content.insert(1, CachePoint()),
    "the resolved cache parameter": lambda c: setattr(c.parameters, "cache", "1h"),
}

SEMANTIC: dict[str, Callable[[Call], None]] = {
    "prompt text": set_on(part(0, 1), content="Round 1: state the EU position on fisheries."),
    "system prompt": set_on(part(0, 0), content="You negotiate for the EU."),
    "message instructions": set_on(lambda c: c.messages[0], instructions="Be thorough."),
    "model's earlier text": set_on(part(3, 1), content="The UK gives way on fisheries."),
    "thinking content": set_on(part(3, 0), content="The quota is tight."),
    "tool-call args": set_on(part(1, 1), args={"species": "haddock", "year": 2026}),
    "tool-call name": set_on(part(1, 1), tool_name="weather"),
    "tool return content": set_on(part(2, 0), content="9,000 tonnes"),
    "tool return outcome": set_on(part(2, 0), outcome="failed"),
    "image bytes": lambda c: (
        c.messages[4].parts[0].content.__setitem__(1, BinaryContent(PNG[:-1], media_type="image/png"))
    ),
    "image media type": lambda c: (
        c.messages[4].parts[0].content.__setitem__(1, BinaryContent(PNG, media_type="image/jpeg"))
    ),
    "image detail": lambda c: (
        c.messages[4]
        .parts[0]
        .content.__setitem__(1, BinaryContent(PNG, media_type="image/png", vendor_metadata={"detail": "low"}))
    ),
    "a message more": lambda c: c.messages.append(ModelResponse(parts=[TextPart("Noted.")])),
    "a message fewer": lambda c: c.messages.pop(),
    "model id": lambda c: setattr(c, "model_id", "function:eu"),
    "temperature": set_settings(temperature=0.9),
    "max_tokens": set_settings(max_tokens=50),
    "seed": set_settings(seed=7),
    "tool_choice": set_settings(tool_choice=ToolOrOutput(function_tools=["quota"])),
    "reasoning in extra_body": set_settings(extra_body={"reasoning": {"effort": "low"}, "session_id": "s-run-1"}),
    "an unknown extra_body entry": set_settings(
        extra_body={"reasoning": {"effort": "high"}, "session_id": "s-run-1", "top_a": 0.2}
    ),
    "an unknown setting": set_settings(acme_creativity=3),
    "anthropic_metadata other entry": set_settings(anthropic_metadata={"user_id": "p", "tier": "gold"}),
    "google_cached_content": set_settings(google_cached_content="cachedContents/abc"),
    "openrouter_reasoning": set_settings(openrouter_reasoning={"effort": "high"}),
    "thinking": set_settings(thinking="high"),
    "a tool's schema": lambda c: setattr(c.parameters.function_tools[0], "parameters_json_schema", {"type": "object"}),
    "a tool's description": lambda c: setattr(c.parameters.function_tools[1], "description", "Weather, now."),
    "a tool more": lambda c: c.parameters.function_tools.append(tool("tide", port="string")),
    "output schema": lambda c: setattr(
        c.parameters, "output_object", OutputObjectDefinition(json_schema={"type": "object", "properties": {}})
    ),
    "output tool schema": lambda c: setattr(c.parameters.output_tools[0], "parameters_json_schema", {"type": "object"}),
    "output mode": lambda c: setattr(c.parameters, "output_mode", "native"),
    "allow_text_output": lambda c: setattr(c.parameters, "allow_text_output", True),
    "revealed tools": lambda c: setattr(c.parameters, "revealed_tool_names", {"weather"}),
}


def test_the_base_call_keys_to_its_material_under_the_generic_contract() -> None:
    call = base_call()
    material = SemanticCallPolicy().material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    pin = call.pin()
    assert pin.key == pin_key("model_call", material)
    assert pin.fingerprint == fingerprint_of(material)
    assert canonical_value(material) == material, "material is already canonical"
    assert pin.key.startswith("p1:model_call:")


@pytest.mark.parametrize("change", VOLATILE.values(), ids=VOLATILE.keys())
def test_a_volatile_field_changed_alone_keeps_the_key(change: Callable[[Call], None]) -> None:
    call = base_call()
    altered = changed(call, change)
    assert altered != call, "the change must really change the call"
    assert altered.pin() == call.pin()


@pytest.mark.parametrize("change", SEMANTIC.values(), ids=SEMANTIC.keys())
def test_a_semantic_field_changed_alone_changes_the_key(change: Callable[[Call], None]) -> None:
    call = base_call()
    assert changed(call, change).pin().key != call.pin().key


def test_two_runs_of_one_call_share_a_key_whatever_their_stamps() -> None:
    first = base_call(when=T0, call_id="pyd_ai_1a2b", stamp="run-1")
    second = base_call(when=T0 + timedelta(hours=5), call_id="toolu_01Ab", stamp="run-2")
    assert first.pin() == second.pin()


def test_a_history_round_tripped_through_json_keeps_its_key() -> None:
    call = base_call()
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(call.messages))
    assert type(loaded[4].parts[0].content[1]) is BinaryImage  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
    assert Call(loaded, call.settings, call.parameters).pin() == call.pin()


def test_tool_call_links_are_keyed_without_the_ids() -> None:
    # Two calls answered in the opposite order are a different conversation, whatever the ids are called.
    def conversation(first: str, second: str, answered: tuple[str, str]) -> list[ModelMessage]:
        return [
            ModelRequest(parts=[UserPromptPart("Compare cod and haddock.")]),
            ModelResponse(
                parts=[ToolCallPart("quota", {"s": "cod"}, first), ToolCallPart("quota", {"s": "hake"}, second)]
            ),
            ModelRequest(
                parts=[
                    ToolReturnPart("quota", "100", tool_call_id=answered[0]),
                    ToolReturnPart("quota", "200", tool_call_id=answered[1]),
                ]
            ),
        ]

    parameters = ModelRequestParameters()
    straight = Call(conversation("a", "b", ("a", "b")), None, parameters).pin()
    renamed = Call(conversation("x9", "y8", ("x9", "y8")), None, parameters).pin()
    crossed = Call(conversation("a", "b", ("b", "a")), None, parameters).pin()
    assert straight == renamed
    assert crossed.key != straight.key


def test_content_is_keyed_as_the_model_reads_it() -> None:
    class Quota(BaseModel):
        species: str
        tonnes: int

    def returning(content: object) -> CallPin:
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart("Quota?")]),
            ModelResponse(parts=[ToolCallPart("quota", {}, "c1")]),
            ModelRequest(parts=[ToolReturnPart("quota", content, tool_call_id="c1")]),
        ]
        return Call(messages, None, ModelRequestParameters()).pin()

    assert returning(Quota(species="cod", tonnes=3)) == returning({"species": "cod", "tonnes": 3})
    assert returning({"tonnes": 3.0}) == returning({"tonnes": 3})
    assert returning({"when": T0}) == returning({"when": "2026-01-01T00:00:00Z"})
    assert returning("caf\u0065\u0301") == returning("caf\u00e9"), "text is keyed NFC-normalised"
    assert returning(b"\x00\x01") != returning(b"\x00\x02")
    assert returning({"tonnes": 3}) != returning({"tonnes": 4})


def test_image_urls_key_their_effective_media_type() -> None:
    def asking(image: ImageUrl) -> CallPin:
        return Call([ModelRequest(parts=[UserPromptPart(["Describe.", image])])], None, ModelRequestParameters()).pin()

    url = "https://example.com/chart.png"
    assert asking(ImageUrl(url)) == asking(ImageUrl(url, media_type="image/png"))
    assert asking(ImageUrl(url)) != asking(ImageUrl(url, media_type="image/webp"))
    assert asking(ImageUrl(url)) != asking(ImageUrl("https://example.com/other.png"))


def test_a_setting_left_empty_by_its_volatile_entries_is_absent() -> None:
    call = base_call()
    for empty in ({"session_id": "s"}, {"metadata": {"user_id": "u"}}, {}):
        without = changed(call, lambda c: c.settings.pop("extra_body"))  # pyright: ignore[reportOptionalMemberAccess]
        assert changed(call, set_settings(extra_body=empty)).pin() == without.pin()
    assert changed(call, set_settings(anthropic_metadata={"user_id": "u"})).pin() == call.pin()


def test_a_value_with_no_json_form_is_refused_with_its_place() -> None:
    call = changed(base_call(), set_settings(extra_body={"reasoning": object()}))
    with pytest.raises(CanonicalError) as refused:
        call.pin()
    assert refused.value.path == "$.settings.extra_body.reasoning"

    in_history = changed(base_call(), set_on(part(2, 0), content=[1, float("nan")]))
    with pytest.raises(CanonicalError) as refused:
        in_history.pin()
    assert refused.value.path == "$.messages[2].parts[0].content[1]"


def test_a_message_mutated_in_place_is_keyed_afresh() -> None:
    call = base_call()
    before = call.pin()
    part(0, 1)(call).content = "Round 1: state the EU position on fisheries."
    after = call.pin()
    part(0, 1)(call).content = "Round 1: state the UK position on fisheries."
    assert after.key != before.key
    assert call.pin() == before


def test_a_fingerprint_read_after_the_message_changed_is_the_one_its_key_was_made_with() -> None:
    call = base_call()
    material = SemanticCallPolicy().material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    pin = call.pin()  # its fingerprint is digested on first read, which comes only after the change below
    part(0, 1)(call).content = "Round 1: state the EU position on fisheries."
    call.parameters.function_tools.pop()
    assert list(pin.fingerprint.items()) == list(fingerprint_of(material).items())
    assert pin.key == pin_key("model_call", material)
    assert moved_fields(call.pin().fingerprint, pin.fingerprint) == ["messages[0]", "-tools.weather"]


@pytest.mark.parametrize(
    ("change", "moved"),
    [
        (set_settings(temperature=0.9), ["settings.temperature"]),
        (set_settings(seed=1), ["+settings.seed"]),
        (lambda c: c.parameters.function_tools.append(tool("tide", port="string")), ["+tools.tide"]),
        (lambda c: c.parameters.function_tools.pop(), ["-tools.weather"]),
        (lambda c: setattr(c.parameters.function_tools[0], "description", "Quotas."), ["tools.quota"]),
        (set_on(part(3, 1), content="The UK gives way."), ["messages[3]"]),
        (lambda c: setattr(c, "model_id", "function:eu"), ["model"]),
        (
            lambda c: setattr(c.parameters, "output_object", OutputObjectDefinition(json_schema={"type": "object"})),
            ["output.object"],
        ),
        (set_settings(extra_body={"reasoning": {"effort": "low"}}), ["settings.extra_body"]),
    ],
)
def test_the_fingerprint_names_what_moved(change: Callable[[Call], None], moved: list[str]) -> None:
    call = base_call()
    assert moved_fields(changed(call, change).pin().fingerprint, call.pin().fingerprint) == moved


def test_a_changed_tool_call_id_link_moves_only_the_messages_it_touches() -> None:
    call = base_call()
    crossed = changed(call, set_on(part(2, 0), tool_call_id="some-other-call"))
    assert moved_fields(crossed.pin().fingerprint, call.pin().fingerprint) == ["messages[2]"]


class WithoutTemperature:
    """A custom policy: the default's material, except that temperature does not matter here."""

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, Any]:
        material = SemanticCallPolicy().material(messages, settings, parameters, model_id=model_id)
        material["settings"].pop("temperature", None)
        return material


def test_a_custom_policy_only_writes_material() -> None:
    policy = WithoutTemperature()
    assert isinstance(policy, CallPolicy)
    call = base_call()
    pin = call.pin(policy)
    material = policy.material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    assert pin == CallPin(key=pin_key("model_call", material), fingerprint=fingerprint_of(material))
    assert changed(call, set_settings(temperature=1.5)).pin(policy) == pin
    assert pin.key != call.pin().key


def test_a_subclass_that_rewrites_material_is_keyed_by_its_material() -> None:
    class Coarser(SemanticCallPolicy):
        def material(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            material = super().material(*args, **kwargs)
            material["messages"] = material["messages"][-1:]
            return material

    call = base_call()
    material = Coarser().material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    assert call.pin(Coarser()).key == pin_key("model_call", material)
    assert changed(call, set_on(part(0, 1), content="Other.")).pin(Coarser()) == call.pin(Coarser())


def test_a_long_history_fingerprint_is_bounded_like_fingerprint_of() -> None:
    messages: list[ModelMessage] = []
    for turn in range(200):
        messages.append(ModelRequest(parts=[UserPromptPart(f"Round {turn}.")]))
        messages.append(ModelResponse(parts=[TextPart(f"Answer {turn}.")]))
    call = Call(messages, {"temperature": 0.1}, ModelRequestParameters())
    material = SemanticCallPolicy().material(messages, call.settings, call.parameters, model_id=call.model_id)
    pin = call.pin()
    assert pin.fingerprint == fingerprint_of(material)
    assert "..." in pin.fingerprint
    assert pin.key == pin_key("model_call", material)


def every_kind_of_part() -> list[ModelMessage]:
    """A history with one of most part and content types pydantic-ai defines, as providers fill them in."""
    return [
        ModelRequest(
            parts=[
                UserPromptPart(
                    [
                        "Look at these.",
                        ImageUrl("https://example.com/chart.png"),
                        DocumentUrl("https://example.com/treaty.pdf"),
                        BinaryContent(PNG, media_type="image/png"),
                        TextContent("From the app.", metadata={"source": "ui"}),
                        CachePoint(),
                        UploadedFile("file-1", "openai"),
                    ]
                ),
                SystemPromptPart("You negotiate for the UK.", dynamic_ref="negotiator"),
                RetryFeedbackPart("The output was not valid JSON.", retry=RetryInfo("validation_error")),
                ToolAvailabilityDeltaPart(tools_added=["tide"], tool_call_id="search-1"),
                ModelSettingsDeltaPart(settings={"thinking": "high"}),
            ]
        ),
        ModelResponse(
            parts=[
                NativeToolCallPart("web_search", {"q": "cod quota"}, "ws_1", provider_name="openai"),
                NativeToolReturnPart("web_search", {"results": [1]}, "ws_1", provider_name="openai"),
                CompactionPart(None, id="cmp_1", provider_name="openai", provider_details={"encrypted_content": "E1"}),
                FilePart(BinaryContent(PNG, media_type="image/png"), provider_name="google"),
                SpeechPart(
                    speaker="assistant", transcript="Hello.", audio=BinaryContent(b"RIFF", media_type="audio/wav")
                ),
                ThinkingPart("Think.", signature="sig", provider_name="anthropic"),
            ]
        ),
    ]


def test_every_kind_of_part_is_keyed_and_survives_a_json_round_trip() -> None:
    messages = every_kind_of_part()
    call = Call(messages, None, ModelRequestParameters())
    material = SemanticCallPolicy().material(messages, None, call.parameters, model_id=call.model_id)
    assert call.pin() == CallPin(key=pin_key("model_call", material), fingerprint=fingerprint_of(material))
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    assert Call(loaded, None, call.parameters).pin() == call.pin()
    assert "metadata" not in json.dumps(material)


@pytest.mark.parametrize(
    "change",
    [
        set_on(part(1, 2), provider_details={"encrypted_content": "E2"}),
        set_on(part(1, 4), audio=BinaryContent(b"RIFX", media_type="audio/wav")),
        set_on(part(1, 0), args={"q": "hake quota"}),
        set_on(part(0, 2), retry=RetryInfo("no_output")),
        set_on(part(0, 4), settings={"thinking": "low"}),
    ],
    ids=["compaction content", "speech audio", "native tool args", "retry cause", "settings delta"],
)
def test_the_content_of_rarer_parts_is_keyed(change: Callable[[Call], None]) -> None:
    call = Call(every_kind_of_part(), None, ModelRequestParameters())
    assert changed(call, change).pin().key != call.pin().key


# Keys are forever: a recording holds them, and a key that moves for the same call is a miss on replay.
# These were computed before any change to the keying modules; a change here must bump the policy's version.


class Tonnage(Enum):
    COD = "cod"


class Catch(BaseModel):
    species: str
    tonnes: int


def every_kind_of_parameter() -> ModelRequestParameters:
    return ModelRequestParameters(
        function_tools=[tool("quota", species="string"), tool("quota", city="string")],
        native_tools=[WebSearchTool()],
        output_mode="prompted",
        output_object=OutputObjectDefinition(json_schema={"type": "object"}, name="catch"),
        output_tools=[tool("final_result", tonnes="integer")],
        prompted_output_template="Answer as {schema}",
        allow_text_output=False,
        allow_image_output=True,
        instruction_parts=[InstructionPart("Be brief.")],
        revealed_tool_names={"tide", "quota"},
        thinking="high",
    )


ODD_VALUES: dict[Any, Any] = {
    "caf\u0065\u0301": "d\u00e9j\u00e0 vu",  # NFC, key and value
    3: "a number key",
    1.5: "a float key",
    Tonnage.COD: Tonnage.COD,
    "set": frozenset({"haddock", "cod", 2}),
    "bytes": b"\x00\x01",
    "big": 2**70,
    "float": 0.1,
    "when": T0,
    "model": Catch(species="cod", tonnes=3),
    "tuple": (1, [True, None]),
}

GOLDEN = [
    (base_call, "p1:model_call:facb69be06f9bfbe7502c9f8862e0346c7d87d06e16346eb261b375b79823781"),
    (
        lambda: Call(every_kind_of_part(), None, ModelRequestParameters()),
        "p1:model_call:711d9b70ac62958d25020d7ea4827277c90ea8316e019cf2fcec86bd13e1e0e1",
    ),
    (
        lambda: Call(
            every_kind_of_part(), {"temperature": 0.1, "extra_body": ODD_VALUES}, every_kind_of_parameter(), "m\u00e9"
        ),
        "p1:model_call:2de8318c634939374ea595eb0062e5aaddcf0615b6c4f4f9d22bc411f10bf489",
    ),
    (
        # Values a provider or a JSON round trip may leave unset: an image whose media type cannot be inferred from
        # its URL, a tool call without an id.
        lambda: Call(
            [
                ModelRequest(parts=[UserPromptPart(["Look at this.", ImageUrl("https://example.com/chart")])]),
                ModelResponse(parts=[ToolCallPart("quota", {"n": 1}, tool_call_id=None)]),  # pyright: ignore[reportArgumentType]
            ],
            None,
            ModelRequestParameters(),
        ),
        "p1:model_call:13e44da7ecf9b5c854862789e5c739de6588b1171478cb55509463e5c75ae8a6",
    ),
]


@pytest.mark.parametrize(
    ("make", "key"), GOLDEN, ids=["base call", "every part", "every parameter and odd values", "unset values"]
)
def test_a_call_keys_byte_for_byte_as_it_always_has(make: Callable[[], Call], key: str) -> None:
    call = make()
    material = SemanticCallPolicy().material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    assert pin_key("model_call", material) == key
    assert call.pin().key == key
    # The fast path that walks only new messages, on a second request of the same conversation.
    policy = SemanticCallPolicy()
    call.pin(policy)
    assert call.pin(policy).key == key


def contains_itself() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


REFUSALS: dict[str, tuple[Callable[[], object], str, str]] = {
    # what: (the value of extra_body's "reasoning", the reason given, where)
    "no JSON form": (
        object,
        "object has no JSON form (convert it deliberately first: for a model call, in a CallPolicy)",
        ".reasoning",
    ),
    "nan": (lambda: float("nan"), "nan is not a JSON number", ".reasoning"),
    "a number key that is not finite": (lambda: {float("inf"): 1}, "inf is not a JSON number", ".reasoning"),
    "keys equal once NFC": (
        lambda: {"caf\u00e9": 1, "cafe\u0301": 2},
        "two object keys are equal once written as canonical JSON",
        ".reasoning",
    ),
    "a tuple key": (lambda: {(1,): 1}, "object key (1,) is not a string", ".reasoning"),
    "a bool key": (lambda: {True: 1}, "object key True is not a string", ".reasoning"),
    "a long integer": (lambda: 2**20000, "an integer of 20001 bits is too long to write as JSON", ".reasoning"),
    "a lone surrogate": (lambda: "\ud800", "string holds a lone surrogate, which UTF-8 cannot encode", ".reasoning"),
    "a list that contains itself": (contains_itself, "value is nested too deeply (or contains itself)", ""),
}


@pytest.mark.parametrize(("make", "reason", "at"), REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refusal_says_why_and_where(make: Callable[[], object], reason: str, at: str) -> None:
    call = changed(base_call(), set_settings(extra_body={"reasoning": make()}))
    with pytest.raises(CanonicalError) as refused:
        call.pin()
    assert (refused.value.reason, refused.value.path) == (reason, "$.settings.extra_body" + at)


# What call_pin does with a policy's material: the default policy's own walk, or any other policy's material.


class Spelled:
    """A custom policy whose material is JSON but not canonical: text not NFC, an integral float."""

    keep_values = True

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, Any]:
        return {"model": model_id, "prompt": "caf\u0065\u0301", "tonnes": 3.0}


def test_a_custom_policys_material_is_keyed_as_canonical_json_writes_it() -> None:
    pin = base_call().pin(Spelled())
    canonical = {"model": "function:uk", "prompt": "caf\u00e9", "tonnes": 3}
    assert pin.key == pin_key("model_call", canonical)
    assert dict(pin.fingerprint) == fingerprint_of(canonical, values=True)


def test_a_subclass_that_rewrites_material_is_keyed_by_it_however_often_one_policy_keys_a_conversation() -> None:
    class Coarser(SemanticCallPolicy):
        def material(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            material = super().material(*args, **kwargs)
            material["messages"] = material["messages"][-1:]
            return material

    policy = Coarser()
    call = base_call()
    expected = pin_key(
        "model_call", policy.material(call.messages, call.settings, call.parameters, model_id="function:uk")
    )
    # Past the requests after which the default policy keys a conversation through what it kept.
    assert [call.pin(policy).key for _ in range(4)] == [expected] * 4


@pytest.mark.parametrize("requests", [1, 4], ids=["from scratch", "through the kept conversation"])
def test_keep_values_puts_the_start_of_each_value_beside_its_digest(requests: int) -> None:
    call = base_call()
    policy = SemanticCallPolicy(keep_values=True)
    for _ in range(requests):
        pin = call.pin(policy)
    material = SemanticCallPolicy().material(call.messages, call.settings, call.parameters, model_id=call.model_id)
    assert dict(pin.fingerprint) == fingerprint_of(material, values=True)
    assert pin.fingerprint["=model"] == '"function:uk"'
    # Off by default: digests only, so no prompt text reaches the log.
    assert not any(name.startswith("=") for name in base_call().pin().fingerprint)


@pytest.mark.parametrize(
    ("change", "at"),
    [
        (lambda c: setattr(c, "model_id", "uk\ud800"), "$.model"),
        (
            lambda c: setattr(c.parameters.function_tools[0], "parameters_json_schema", {"type": object()}),
            "$.parameters.function_tools[0].parameters_json_schema.type",
        ),
    ],
    ids=["model id", "tool schema"],
)
def test_a_refusal_outside_the_messages_names_its_place(change: Callable[[Call], None], at: str) -> None:
    call = base_call()
    change(call)
    with pytest.raises(CanonicalError) as refused:
        call.pin()
    assert refused.value.path == at
