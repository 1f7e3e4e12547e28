"""Key material of values that are not plainly JSON: each keyed as the model reads it, whatever wraps it.

The expectations are written from what a model is sent: a value keys as the JSON pydantic-ai renders of it, so a
wrapper (a subclass of `str` or `int`, a read-only mapping, a named tuple) that renders the same keys the same, and
an order the model is not shown (a set's, a dict's) moves no key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest
from pydantic import BaseModel
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters

from anagrapheus.errors import CanonicalError
from anagrapheus.provider import SemanticCallPolicy, call_pin
from anagrapheus.provider.keying.material import MaterialWalk

NO_PARAMETERS = ModelRequestParameters()


def key_of(messages: list[ModelMessage]) -> str:
    return call_pin(SemanticCallPolicy(), messages, None, NO_PARAMETERS, model_id="function:uk").key


def returning(content: object) -> str:
    """The key of a conversation whose tool returned `content`."""
    return key_of(
        [
            ModelRequest(parts=[UserPromptPart("Quota?")]),
            ModelResponse(parts=[ToolCallPart("quota", {}, tool_call_id="c1")]),
            ModelRequest(parts=[ToolReturnPart("quota", content, tool_call_id="c1")]),
        ]
    )


def calling(args: dict[str, Any]) -> str:
    """The key of a conversation in which the model called a tool with `args`."""
    return key_of(
        [ModelRequest(parts=[UserPromptPart("Quota?")]), ModelResponse(parts=[ToolCallPart("quota", args, "c1")])]
    )


class Species(str):
    """A `str` subclass, as an application's own string type."""

    __slots__ = ()


class Tonnes(int):
    """An `int` subclass."""


class Share(float):
    """A `float` subclass."""


class Point(NamedTuple):
    """A named tuple: rendered as a JSON array."""

    lat: int
    lon: int


def test_a_subclass_of_a_json_type_keys_as_the_value_it_holds() -> None:
    assert returning(Species("cod")) == returning("cod")
    assert returning(Species("cod")) != returning("hake")
    assert returning({"tonnes": Tonnes(3)}) == returning({"tonnes": 3})
    assert returning({"tonnes": Tonnes(3)}) != returning({"tonnes": 4})
    assert returning({"share": Share(0.25)}) == returning({"share": 0.25})
    assert returning({"share": Share(0.25)}) != returning({"share": 0.5})


def test_a_mapping_that_is_not_a_dict_keys_as_the_dict_it_holds() -> None:
    assert returning(MappingProxyType({"zone": "north", "tonnes": 3})) == returning({"tonnes": 3, "zone": "north"})
    assert returning(MappingProxyType({"zone": "north"})) != returning({"zone": "south"})


def test_a_named_tuple_keys_as_the_array_it_is_rendered_as() -> None:
    assert returning(Point(51, 0)) == returning([51, 0])
    assert returning(Point(51, 0)) != returning([0, 51])


def test_the_order_of_a_dicts_entries_moves_no_key() -> None:
    # Canonical JSON sorts object keys: two entries or more, in any order, key alike.
    assert calling({"species": "cod", "year": 2026}) == calling({"year": 2026, "species": "cod"})
    three = {"species": "cod", "year": 2026, "zone": "north"}
    assert calling(three) == calling(dict(reversed(three.items())))
    assert calling({"species": "cod", "year": 2026}) != calling({"species": "cod", "year": 2027})


@pytest.mark.parametrize("entries", [{"year": 2026, "species": "cod"}, {"zone": "north", "year": 2026, "species": "c"}])
def test_a_dicts_material_lists_its_entries_in_the_order_its_key_writes_them(entries: dict[str, Any]) -> None:
    # A custom policy or a reader of the material sees the entries as the key's canonical JSON holds them.
    messages: list[ModelMessage] = [ModelResponse(parts=[ToolCallPart("quota", entries, "c1")])]
    material = SemanticCallPolicy().material(messages, None, NO_PARAMETERS, model_id="function:uk")
    args = material["messages"][0]["parts"][0]["args"]  # pyright: ignore[reportIndexIssue,reportOptionalSubscript,reportCallIssue,reportArgumentType]
    assert list(args) == sorted(entries)  # pyright: ignore[reportArgumentType]


class Catch(BaseModel):
    """A pydantic model holding a set: JSON lists a set in the order the process happens to iterate it."""

    zones: set[int]


def test_a_pydantic_models_set_keys_alike_whatever_order_it_iterates_in() -> None:
    # 1 and 9 share a slot of a small set's table, so the order they were added in is the order they iterate in.
    one_way, other_way = Catch(zones={1}), Catch(zones={9})
    one_way.zones.add(9)
    other_way.zones.add(1)
    assert list(one_way.zones) != list(other_way.zones), "the two sets must iterate in different orders"
    assert returning(one_way) == returning(other_way)
    assert returning(one_way) == returning({"zones": [1, 9]})
    assert returning(one_way) != returning(Catch(zones={1, 8}))


@dataclass
class Blob:
    """A plain dataclass holding bytes, returned by a tool."""

    name: str
    data: bytes


def test_bytes_inside_a_plain_dataclass_are_keyed_as_pydantic_ai_renders_them_in_base64() -> None:
    blob = Blob("chart", b"\xff\xfe\x00")
    rendered = json.loads(ToolReturnPart("quota", blob, tool_call_id="c1").model_response_str())
    assert rendered == {"name": "chart", "data": "__4A"}  # URL-safe base64
    assert returning(blob) == returning(rendered)
    assert returning(blob) != returning(Blob("chart", b"\xff\xfe\x01"))


def test_tool_call_ids_that_are_not_text_link_by_their_value() -> None:
    def answered(call_id: object, return_id: object) -> str:
        return key_of(
            [
                ModelResponse(parts=[ToolCallPart("quota", {}, tool_call_id=call_id)]),  # pyright: ignore[reportArgumentType]
                ModelRequest(parts=[ToolReturnPart("quota", "3t", tool_call_id=return_id)]),  # pyright: ignore[reportArgumentType]
            ]
        )

    # A return answering another call than the one made is another conversation, whatever the ids' type.
    assert answered(7, 7) != answered(7, 8)
    assert answered(7, 7) == answered(7, 7)


def test_a_compaction_without_provider_details_is_keyed_apart_from_one_holding_encrypted_content() -> None:
    def compacted(part: CompactionPart) -> str:
        return key_of([ModelRequest(parts=[UserPromptPart("Go on.")]), ModelResponse(parts=[part])])

    bare = compacted(CompactionPart(None, provider_name="openai"))
    assert bare == compacted(CompactionPart(None, provider_name="openai", provider_details={"created": 1}))
    assert bare != compacted(CompactionPart(None, provider_name="openai", provider_details={"encrypted_content": "E"}))


@dataclass
class Annotated(UserPromptPart):
    """A user prompt with two fields a later pydantic-ai might add, each with a default."""

    tags: list[str] = field(default_factory=list)
    tone: str = "plain"


def test_a_field_added_later_leaves_existing_keys_alone_until_it_is_set() -> None:
    def asked(part: UserPromptPart) -> str:
        return key_of([ModelRequest(parts=[part])])

    plain = asked(UserPromptPart("Quota?"))
    assert asked(Annotated("Quota?")) == plain
    assert asked(Annotated("Quota?", tags=["urgent"])) != plain
    assert asked(Annotated("Quota?", tone="curt")) != plain


def test_a_walk_refuses_a_value_naming_its_place_from_the_root() -> None:
    with pytest.raises(CanonicalError) as refused:
        MaterialWalk().value({"zones": ["north", object()]})
    assert refused.value.path == "$.zones[1]"


def test_a_walk_of_its_own_numbers_tool_call_ids_by_first_appearance() -> None:
    # A value walked on its own (a key of the user's, an entity id) numbers its calls' ids from one, as a request's
    # walk does: ids renamed consistently key alike, and a call that shares its id with another stays linked to it.
    walked = MaterialWalk().value([ToolCallPart("quota", {}, tool_call_id="x"), ToolReturnPart("quota", 1, "x")])
    again = MaterialWalk().value([ToolCallPart("quota", {}, tool_call_id="y"), ToolReturnPart("quota", 1, "y")])
    other = MaterialWalk().value([ToolCallPart("quota", {}, tool_call_id="y"), ToolReturnPart("quota", 1, "z")])
    assert walked == again != other
    assert [part["tool_call_id"] for part in walked] == [1, 1]
