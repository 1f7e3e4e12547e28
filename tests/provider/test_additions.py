"""What a later pydantic-ai adds is left out of a stored dump while it holds its default (issue #33)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any, Literal, cast

import pytest
from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider.additions import known_dump, without_new_defaults
from anagrapheus.provider.keying.material import known_fields
from anagrapheus.provider.timing import TIMED

RESPONSES = TypeAdapter(ModelResponse)
DEFINITIONS = TypeAdapter(list[ToolDefinition])


def test_nothing_the_scheme_knows_is_left_out() -> None:
    response = ModelResponse(parts=[TextPart("The UK holds firm.")])
    dumped = known_dump(RESPONSES, response)
    assert set(dumped) == set(RESPONSES.dump_python(response, mode="json")) & (known_fields(ModelResponse) or set())
    assert RESPONSES.validate_python(dumped) == response


@pytest.mark.skipif(not TIMED, reason="needs a pydantic-ai that added fields after the scheme (2.78)")
def test_a_field_added_later_is_left_out_at_its_default_and_kept_when_set() -> None:
    response = ModelResponse(parts=[TextPart("The UK holds firm.")])
    assert "request_timestamp" not in known_dump(RESPONSES, response)
    response.request_timestamp = datetime(2026, 1, 5, 9, tzinfo=UTC)  # pyright: ignore[reportAttributeAccessIssue]
    assert known_dump(RESPONSES, response)["request_timestamp"] == "2026-01-05T09:00:00Z"
    tools = [ToolDefinition(name="quota", parameters_json_schema={"type": "object"})]
    assert {"durable", "ui_visibility"}.isdisjoint(known_dump(DEFINITIONS, tools)[0])


def test_a_history_is_dumped_as_the_scheme_knows_it_and_loads_back_whole() -> None:
    history = [ModelRequest(parts=[UserPromptPart("Round 1.")]), ModelResponse(parts=[TextPart("Firm.")])]
    dumped = known_dump(ModelMessagesTypeAdapter, history)
    assert ModelMessagesTypeAdapter.validate_python(dumped) == history
    assert set(dumped[1]) <= (known_fields(ModelResponse) or set())


def test_a_shortened_dump_that_would_not_load_back_the_same_is_kept_whole() -> None:
    response = ModelResponse(parts=[TextPart("The UK holds firm.")])
    whole = {**RESPONSES.dump_python(response, mode="json"), "brand_new": None}

    @dataclasses.dataclass
    class Later(ModelResponse):
        brand_new: object = None

    Later.__name__ = "ModelResponse"
    later = Later(parts=[TextPart("The UK holds firm.")])
    # Loading the shortened form gives back a dump without `brand_new`: not the dump it came from, so kept whole.
    kept = without_new_defaults(
        later, whole, load=RESPONSES.validate_python, dump=lambda r: RESPONSES.dump_python(r, mode="json")
    )
    assert kept == whole
    # Where it loads back to the same dump, the field is left out.
    shortened = without_new_defaults(
        later,
        whole,
        load=RESPONSES.validate_python,
        dump=lambda r: {**RESPONSES.dump_python(r, mode="json"), "brand_new": None},
    )
    assert "brand_new" not in shortened


def test_a_dump_kept_whole_keeps_every_key_in_its_order_at_every_depth() -> None:
    @dataclasses.dataclass
    class Later(ModelResponse):
        brand_new: object = None

    Later.__name__ = "ModelResponse"
    later = Later(parts=[TextPart("The UK holds firm.")])
    whole = {**RESPONSES.dump_python(later, mode="json"), "brand_new": None}
    as_dumped = json.dumps(whole)

    kept = without_new_defaults(
        later, whole, load=RESPONSES.validate_python, dump=lambda r: RESPONSES.dump_python(r, mode="json")
    )

    assert json.dumps(kept) == as_dumped


class _Counting:
    """A type adapter's dump and load, counted: what `known_dump` asks of pydantic for one value."""

    def __init__(self, adapter: TypeAdapter[ModelResponse]) -> None:
        self.adapter = adapter
        self.dumps = 0
        self.loads = 0

    def dump_python(self, value: ModelResponse, *, mode: Literal["json"]) -> Any:
        self.dumps += 1
        return self.adapter.dump_python(value, mode=mode)

    def validate_python(self, data: Any) -> ModelResponse:
        self.loads += 1
        return self.adapter.validate_python(data)


@pytest.mark.skipif(not TIMED, reason="needs a pydantic-ai that added fields after the scheme (2.78)")
def test_a_response_is_dumped_once_and_checked_by_one_load_and_dump_back() -> None:
    response = ModelResponse(parts=[TextPart("The UK holds firm.")])
    counting = _Counting(RESPONSES)

    dumped = known_dump(cast(TypeAdapter[ModelResponse], counting), response)

    # Its later fields at their default were left out, and the shortened form checked: no second dump to prune.
    assert (counting.dumps, counting.loads) == (2, 1)
    assert "request_timestamp" not in dumped
    whole = RESPONSES.dump_python(response, mode="json")
    assert json.dumps(dumped) == json.dumps({name: value for name, value in whole.items() if name in dumped})
