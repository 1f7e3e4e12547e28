"""Key scheme p1 knows a frozen set of fields; a field it does not know is keyed only off its default (issue #33).

Each keyed type gets a synthetic upstream release: the same class, by name, with one new field that has a default.
Left at its default the field moves no key; set, it does. A new field named like a tag (`kind`, as pydantic-ai 2.78
gave the instruction sources) keys no differently.
"""

from __future__ import annotations

import dataclasses
from importlib import metadata
from typing import Any

import pytest
from pydantic_ai.messages import (
    AgentInstructionSource,
    InstructionId,
    InstructionPart,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    ToolsetInstructionSource,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider.keying.keys import walked
from anagrapheus.provider.keying.known_fields import FROZEN_AT, KNOWN_FIELDS
from anagrapheus.provider.keying.material import known_fields
from anagrapheus.provider.keying.request import request_material
from anagrapheus.provider.keying.settings import reduced_settings
from anagrapheus.timeline.canonical import pin_key

TOOL = ToolDefinition(name="quota", parameters_json_schema={"type": "object", "properties": {}}, description="Quota.")

# One instance of every type a key's material is walked from: messages, parts, instructions, tool definitions, the
# request's parameters and its output schema. (Settings are a dict: see the last tests.)
SAMPLES: dict[str, Any] = {
    "ModelRequest": ModelRequest(parts=[UserPromptPart("Round 1: state the UK position on cod.")]),
    "ModelResponse": ModelResponse(parts=[TextPart("The UK holds firm on cod.")]),
    "UserPromptPart": UserPromptPart("Round 1: state the UK position on cod."),
    "SystemPromptPart": SystemPromptPart("You negotiate for the UK."),
    "TextPart": TextPart("The UK holds firm on cod."),
    "ThinkingPart": ThinkingPart("Biomass is down."),
    "ToolCallPart": ToolCallPart("stock_survey", {"stock": "cod"}, tool_call_id="call-1"),
    "ToolReturnPart": ToolReturnPart("stock_survey", "cod: 81 kt", tool_call_id="call-1"),
    "RetryPromptPart": RetryPromptPart("Try again.", tool_name="stock_survey", tool_call_id="call-1"),
    "InstructionPart": InstructionPart("Be brief."),
    "InstructionId": InstructionId(name="brief", source=AgentInstructionSource()),
    "AgentInstructionSource": AgentInstructionSource(),
    "ToolsetInstructionSource": ToolsetInstructionSource("fisheries"),
    "ToolDefinition": TOOL,
    "ModelRequestParameters": ModelRequestParameters(function_tools=[TOOL]),
    "OutputObjectDefinition": OutputObjectDefinition(json_schema={"type": "object"}, name="Position"),
}


def upstream_release(cls: type[Any], field: str, default: object) -> type[Any]:
    """`cls` as a later pydantic-ai might ship it: the same name, one more field with a default."""
    frozen = cls.__dataclass_params__.frozen  # pyright: ignore[reportAttributeAccessIssue]
    return dataclasses.make_dataclass(
        cls.__name__, [(field, object, dataclasses.field(default=default, kw_only=True))], bases=(cls,), frozen=frozen
    )


def rebuilt(obj: Any, cls: type[Any], **changes: object) -> Any:
    """`obj` as an instance of `cls`, every field it has carried over."""
    given = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    made = cls(**{**given, **changes})
    for f in dataclasses.fields(obj):
        if not f.init:
            object.__setattr__(made, f.name, getattr(obj, f.name))
    return made


def key(value: object) -> str:
    """The key of `value` walked as every key's material is."""
    return pin_key("model_call", walked(value))


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("field", ["brand_new_field", "kind"])
def test_a_field_a_later_release_adds_with_a_default_moves_no_key_until_it_is_set(name: str, field: str) -> None:
    sample = SAMPLES[name]
    cls = type(sample)
    if field in {f.name for f in dataclasses.fields(cls)}:
        pytest.skip(f"{name} already has a {field!r} field")
    newer = upstream_release(cls, field, "default")
    assert known_fields(newer) == known_fields(cls)  # the scheme knows the class, not the new field
    assert key(rebuilt(sample, newer)) == key(sample)
    assert key(rebuilt(sample, newer, **{field: "set by the user"})) != key(sample)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_keyed_type_is_known_to_the_scheme(name: str) -> None:
    assert type(SAMPLES[name]).__name__ in KNOWN_FIELDS


def test_a_known_tag_field_is_keyed_whatever_it_holds() -> None:
    # `part_kind` is a field the scheme knows: kept even at its default, as it always was.
    material = request_material(
        [ModelRequest(parts=[UserPromptPart("hi")])], None, ModelRequestParameters(), model_id="m"
    )
    assert material["messages"][0]["parts"][0]["part_kind"] == "user-prompt"


def test_a_class_the_scheme_does_not_know_is_keyed_by_its_name_and_what_it_holds() -> None:
    @dataclasses.dataclass
    class BrandNewPart:
        content: str
        part_kind: str = "brand-new"

    BrandNewPart.__module__ = "pydantic_ai.messages"  # as a later pydantic-ai would ship it
    assert key(BrandNewPart("hi")) == key(BrandNewPart("hi"))
    assert key(BrandNewPart("hi")) != key(BrandNewPart("ho"))
    assert walked(BrandNewPart("hi")) == {"$type": "BrandNewPart", "content": "hi"}


def test_a_setting_a_later_release_adds_is_keyed_only_when_set() -> None:
    assert reduced_settings({"temperature": 0.1, "brand_new_setting": None}) == {"temperature": 0.1}  # pyright: ignore[reportArgumentType]
    assert reduced_settings({"temperature": 0.1, "brand_new_setting": True}) == {  # pyright: ignore[reportArgumentType]
        "temperature": 0.1,
        "brand_new_setting": True,
    }


@pytest.mark.skipif(metadata.version("pydantic-ai-slim") != FROZEN_AT, reason=f"the table is frozen at {FROZEN_AT}")
def test_the_table_is_what_the_release_it_was_frozen_at_declares() -> None:
    import importlib.util
    import io
    from contextlib import redirect_stdout
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / ".ci" / "freeze_known_fields.py"
    spec = importlib.util.spec_from_file_location("freeze_known_fields", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with redirect_stdout(out):
        module.main()
    written: dict[str, Any] = {}
    exec(out.getvalue(), written)
    assert written["KNOWN_FIELDS"] == KNOWN_FIELDS
