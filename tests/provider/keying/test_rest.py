"""The rest of a request (parameters, model id, settings) is walked again only when it reads otherwise.

pydantic-ai builds new request parameters for every request, holding the same values; the default policy keeps the
last rest's material while the next reads the same. Whatever it keeps, every key must be the key the generic path
(`CallPolicy.material`, walked whole) writes of the same request, however the rest changed in between.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider import CallPin, SemanticCallPolicy, call_pin
from anagrapheus.provider.keying.request import request_material
from anagrapheus.provider.keying.rest import rest_tokens
from tests.provider.test_policy_properties import histories, json_values, texts


class Generic:
    """The default policy's material through the generic path: walked whole, keyed from scratch, every request."""

    def material(self, messages: Any, settings: Any, parameters: Any, *, model_id: str) -> dict[str, Any]:
        return request_material(messages, settings, parameters, model_id=model_id)


class Tier(enum.Enum):
    """A value the tokens cannot vouch for (an enum member writes its value, which can change)."""

    FLEX = "flex"


def pins(
    policy: SemanticCallPolicy, messages: list[ModelMessage], settings: Any, parameters: ModelRequestParameters
) -> tuple[CallPin, CallPin]:
    kept = call_pin(policy, messages, settings, parameters, model_id="function:uk")
    fresh = call_pin(
        Generic(), copy.deepcopy(messages), copy.deepcopy(settings), copy.deepcopy(parameters), model_id="function:uk"
    )
    return kept, fresh


def same(kept: CallPin, fresh: CallPin) -> bool:
    return kept.key == fresh.key and dict(kept.fingerprint) == dict(fresh.fingerprint)


# Values equal under == yet keyed apart (or alike) by their JSON, which only a check of class and value tells.
lookalikes = st.sampled_from([0, 0.0, -0.0, False, 1, 1.0, True, "1", None, Tier.FLEX, b"1", (1,), [1], {1}])
leaves = json_values | lookalikes


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_every_request_is_keyed_as_the_generic_path_keys_it_however_its_rest_changed(
    messages: list[ModelMessage], data: st.DataObject
) -> None:
    policy = SemanticCallPolicy()
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    settings_given: dict[str, Any] = {"temperature": 0.5}
    for _ in range(data.draw(st.integers(min_value=2, max_value=6))):
        # As pydantic-ai builds them: new parameters and tool definitions each request, the schema dict shared.
        tool = ToolDefinition(
            name=data.draw(st.sampled_from(["quota", "quota", "catch"])), parameters_json_schema=schema
        )
        parameters = ModelRequestParameters(
            function_tools=[tool],
            allow_text_output=data.draw(st.sampled_from([True, 1])),  # pyright: ignore[reportArgumentType]
        )
        kept, fresh = pins(policy, messages, settings_given, parameters)
        assert same(kept, fresh)
        # Then changed, in place or not, or left alone (most often: the kept rest answers).
        change = data.draw(st.sampled_from(["none", "none", "schema", "nested", "setting", "drop", "message"]))
        if change == "schema":
            schema[data.draw(texts)] = data.draw(leaves)
        elif change == "nested":
            properties: dict[str, Any] = schema.setdefault("properties", {})
            properties["n"] = data.draw(leaves)
        elif change == "setting":
            settings_given[data.draw(st.sampled_from(["temperature", "top_p", "seed"]))] = data.draw(leaves)
        elif change == "drop" and len(schema) > 1:
            del schema[next(iter(schema))]
        elif change == "message":
            messages.append(ModelRequest.user_text_prompt(data.draw(texts)))


def test_a_zero_of_either_sign_and_a_one_of_any_class_are_never_taken_for_each_other() -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt("State the UK position on fisheries.")]
    for value in (0.0, -0.0, 0.0, 0, False, 1, True, 1.0, 1):
        tool = ToolDefinition(name="quota", parameters_json_schema={"type": "object", "default": value})
        parameters = ModelRequestParameters(function_tools=[tool])
        assert same(*pins(policy, messages, {"temperature": value}, parameters))


def test_the_tokens_read_a_float_by_its_bits_and_refuse_what_they_cannot_vouch_for() -> None:
    tool = ToolDefinition(name="quota", parameters_json_schema={"type": "object"})
    parameters = ModelRequestParameters(function_tools=[tool])
    zero = rest_tokens((parameters, "function:uk", {"temperature": 0.0}))
    assert zero is not None
    assert zero != rest_tokens((parameters, "function:uk", {"temperature": -0.0}))
    # New parameters holding equal values read the same: the kept rest answers them.
    assert zero == rest_tokens(
        (replace(parameters, function_tools=[replace(tool)]), "function:uk", {"temperature": 0.0})
    )
    for unvouched in (Tier.FLEX, float("nan"), {1: "a"}, object()):
        assert rest_tokens((parameters, "function:uk", {"service_tier": unvouched})) is None
