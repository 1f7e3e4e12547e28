"""A message or part changed in place after it was keyed never keeps its old key.

pydantic-ai re-sends the same message objects on every request of a run, and a hook may amend them in place
between two requests. Whatever keying remembers between requests, the key of a history must be the key
computed from scratch, over a deep copy that nothing has keyed before.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from anagrapheus.provider import CallPin, SemanticCallPolicy, call_pin
from tests.provider.test_policy_properties import PARAMETERS, histories, json_values, texts


def pin_of(messages: list[ModelMessage], policy: SemanticCallPolicy) -> CallPin:
    return call_pin(policy, messages, {"temperature": 0.5}, PARAMETERS, model_id="function:uk")


def mutate(messages: list[ModelMessage], data: st.DataObject) -> None:
    """Change one message in place, the way a hook could: a field, a part, or a value inside a part."""
    message = data.draw(st.sampled_from(messages))
    part: Any = data.draw(st.sampled_from(message.parts))
    choice = data.draw(st.sampled_from(["content", "args", "parts", "instructions", "call_id", "bool_for_int"]))
    if choice == "parts":
        extra = UserPromptPart("added") if isinstance(message, ModelRequest) else TextPart("added")
        message.parts.append(extra)  # pyright: ignore[reportArgumentType]
    elif choice == "instructions" and isinstance(message, ModelRequest):
        message.instructions = data.draw(texts)
    elif choice == "call_id" and isinstance(part, ToolCallPart | ToolReturnPart):
        part.tool_call_id = data.draw(st.sampled_from(["pyd_ai_a", "pyd_ai_b", "fresh"]))
    elif choice == "args" and isinstance(part, ToolCallPart) and isinstance(part.args, dict):
        part.args[data.draw(texts)] = data.draw(json_values)
    elif choice == "bool_for_int" and isinstance(part, ToolCallPart) and isinstance(part.args, dict):
        # Equal under ==, different as JSON: only a check by value and type may call them the same.
        part.args["n"] = 1
        pin_of(messages, SemanticCallPolicy())
        part.args["n"] = True
    elif isinstance(part, ToolReturnPart) and isinstance(part.content, dict | list):
        content: Any = part.content
        if isinstance(content, dict):
            content["changed"] = data.draw(json_values)
        else:
            content.append(data.draw(json_values))
    elif isinstance(part, UserPromptPart | TextPart | ToolReturnPart):
        part.content = data.draw(texts)
    else:
        message.parts.append(TextPart("added") if isinstance(message, ModelResponse) else UserPromptPart("added"))  # pyright: ignore[reportArgumentType]


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_a_history_changed_in_place_is_keyed_as_from_scratch(messages: list[ModelMessage], data: st.DataObject) -> None:
    policy = SemanticCallPolicy()
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        # Keyed as a run keys it (the same objects, the history growing), then changed in place, then keyed again.
        pin_of(messages, policy)
        messages.append(ModelResponse(parts=[TextPart(data.draw(texts))]))
        pin_of(messages, policy)
        mutate(messages, data)
        assert pin_of(messages, policy) == pin_of(copy.deepcopy(messages), SemanticCallPolicy())
