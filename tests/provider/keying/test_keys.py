"""Every kind of key, pinned as literal strings computed before keys went through one walk: none may move.

The keys (and a digest of each fingerprint) of a model request (from scratch, with tool calls and settings, and
from a conversation's kept history), a custom call policy, tool calls (plain, and with sets, bytes, enums,
pydantic models, a dataclass and deps), output calls, an entity id and `pin_key` itself. Then the one rule of
the walk: every key accepts what any key accepts, and writes a value alike on every path.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from anagrapheus.errors import CanonicalError
from anagrapheus.identity import mint_entity_id
from anagrapheus.provider import SemanticCallPolicy, call_pin
from anagrapheus.provider.keying.keys import key_of, walked
from anagrapheus.provider.outputs import output_pin
from anagrapheus.provider.tools import tool_pin
from anagrapheus.timeline import pin_key


class Colour(enum.Enum):
    RED = "red"


class Mode(str, enum.Enum):  # noqa: UP042 (a str mixin, deliberately not a StrEnum)
    FAST = "fast"


class Rank(enum.IntEnum):
    HIGH = 3


class Query(BaseModel):
    city: str
    tags: set[str]


@dataclass
class Box:
    label: str
    size: float


class Terse:
    name = "terse"
    version = 2

    def material(self, messages: Any, settings: Any, parameters: Any, *, model_id: str) -> dict[str, Any]:
        return {
            "model": model_id,
            "turns": len(messages),
            "last": str(messages[-1].parts[0].content),
            "x": (1.0, -0.0, "é"),
        }


class Minted:
    def __init__(self) -> None:
        self.keys: list[tuple[str, dict[str, str]]] = []

    def resolve(self, key: str, *, kind: str, effect: Any, interpret: Any, fingerprint: Any = None) -> Any:
        self.keys.append((key, dict(fingerprint or {})))
        return interpret(effect())


def conversation(turns: int) -> list[Any]:
    messages: list[Any] = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Which treaty governs fisheries?")])
    ]
    for turn in range(turns):
        call_id = f"call-{turn}-x"
        messages += [
            ModelResponse(
                parts=[ToolCallPart("lookup", {"topic": f"fisheries {turn}", "n": turn}, tool_call_id=call_id)]
            ),
            ModelRequest(parts=[ToolReturnPart("lookup", {"fact": f"fact {turn}"}, tool_call_id=call_id)]),
            ModelResponse(parts=[TextPart(f"The record says fact {turn}.")]),
            ModelRequest(parts=[UserPromptPart(f"And then {turn}?")]),
        ]
    return messages


PARAMS = ModelRequestParameters(
    function_tools=[
        ToolDefinition(
            name="lookup", parameters_json_schema={"type": "object", "properties": {"topic": {"type": "string"}}}
        )
    ],
    allow_text_output=True,
)
SETTINGS: Any = {
    "temperature": 0.5,
    "seed": 7,
    "timeout": 3,
    "extra_body": {"user": "u1", "reasoning": {"effort": "low"}},
}


def fp(fingerprint: Any) -> str:
    return hashlib.sha256(json.dumps(dict(fingerprint), sort_keys=True).encode()).hexdigest()[:16]


def samples() -> dict[str, str]:
    out: dict[str, str] = {}
    pin = call_pin(SemanticCallPolicy(), conversation(0), None, PARAMS, model_id="function:uk")
    out["model_call, one request"] = pin.key
    out["model_call, one request, fingerprint"] = fp(pin.fingerprint)
    pin = call_pin(SemanticCallPolicy(), conversation(3), SETTINGS, PARAMS, model_id="openai:gpt-4o")
    out["model_call, settings"] = pin.key
    out["model_call, settings, fingerprint"] = fp(pin.fingerprint)
    # The kept (incremental) history: the same conversation keyed from its third request on.
    policy = SemanticCallPolicy()
    messages = conversation(0)
    for turn in range(5):
        pin = call_pin(policy, messages, SETTINGS, PARAMS, model_id="openai:gpt-4o")
        messages = messages + conversation(turn + 1)[len(messages) :]
    out["model_call, kept history"] = pin.key
    out["model_call, kept history, fingerprint"] = fp(pin.fingerprint)
    pin = call_pin(Terse(), conversation(1), None, PARAMS, model_id="function:uk")  # type: ignore[arg-type]
    out["model_call, custom policy"] = pin.key
    out["model_call, custom policy, fingerprint"] = fp(pin.fingerprint)
    tool = tool_pin("lookup", {"city": "Hull", "n": 3, "ratio": 2.0, "when": None})
    out["tool_call, plain"] = tool.key
    out["tool_call, plain, fingerprint"] = fp(tool.fingerprint)
    tool = tool_pin(
        "lookup",
        {
            "tags": {"b", "a"},
            "blob": b"\xff\x00",
            "colour": Colour.RED,
            "rank": Rank.HIGH,
            "query": Query(city="Hull", tags={"y", "x"}),
            "box": Box("a", 1.5),
            "by_n": {1: "one", 2.5: "x"},
        },
        deps={"region": "eu", "ids": frozenset({3, 1})},
    )
    out["tool_call, rich"] = tool.key
    out["tool_call, rich, fingerprint"] = fp(tool.fingerprint)
    out["tool_call, str enum"] = tool_pin("lookup", {"mode": Mode.FAST, "modes": [Mode.FAST]}).key
    key, fingerprint = output_pin("final", {"answer": "yes", "score": 1.0}, partial=False)
    out["output_call"] = key
    out["output_call, fingerprint"] = fp(fingerprint)
    key, _ = output_pin("final", Query(city="Hull", tags={"b", "a"}), partial=True)
    out["output_call, partial model"] = key
    minted = Minted()
    mint_entity_id(
        {"kind": "vessel", "name": "Cod Ness", "rank": Rank.HIGH, "tonnage": 12.0, "é": ["e\u0301"]}, resolver=minted
    )  # type: ignore[arg-type]
    out["entity_id"] = minted.keys[0][0]
    out["entity_id, fingerprint"] = fp(minted.keys[0][1])
    out["pin_key, plain"] = pin_key("run_id", {"unit": "u", "run": 0})
    out["pin_key, numbers and text"] = pin_key("x", {"f": [1.0, -0.0, 1e300, 0.1], "s": "e\u0301", "t": (1, 2)})
    return out


PINNED = {
    "model_call, one request": "p1:model_call:5e2d771ab75cf8a1ae90a3c022c093a5700a9a8fe2757ec406f7635162d84a92",
    "model_call, one request, fingerprint": "9385ab8e08cd98eb",
    "model_call, settings": "p1:model_call:83b31270aac91b751124087e64ae9d0785cb6ce391ac102a832b67ad51139a3e",
    "model_call, settings, fingerprint": "e26c3b32177a8c2a",
    "model_call, kept history": "p1:model_call:9e6343b6b4355e5503d09bae476656c9958555658865539e5d62bf976224c098",
    "model_call, kept history, fingerprint": "def62f595253f764",
    "model_call, custom policy": "p1:model_call:ca5fa7af5f3e4896f718b405d1441f62852eef9e53eb6ffd6ef310cf76cba10f",
    "model_call, custom policy, fingerprint": "50b703f244bac940",
    "tool_call, plain": "p1:tool_call:fa3236d415f1148cd55b16ffaf0a3428dcf1750d0179e46b9649e1e0f5c775ed",
    "tool_call, plain, fingerprint": "5ac2e5eb4f8d1fa4",
    "tool_call, rich": "p1:tool_call:8f92270242f6c6d016d055f44b1608b1026b2deee0e3d7d4c51a8e65ec18ea39",
    "tool_call, rich, fingerprint": "9a249d8e27884a65",
    "tool_call, str enum": "p1:tool_call:89d49d795307dcb64f38855ea7a5468ef9e80ec2622e0b65f82eaa1dfaaef29f",
    "output_call": "p1:output_call:5e4eeec877d17237576d9b6a702541b6af7b18f61cd100e6637dacf256f66da4",
    "output_call, fingerprint": "1d2b5de49d72a5bb",
    "output_call, partial model": "p1:output_call:b28f555a1f6f2df98b53a8ce966ff008f633c46d458bcefa20eed43f6982cbea",
    "entity_id": "p1:entity_id:c1aca936a71dbc6eadd16a5c03a9317a4d7e1481ae8803e545ecb577e66fc90f",
    "entity_id, fingerprint": "0cf30da629602c5d",
    "pin_key, plain": "p1:run_id:631d8f979932ff0fdcf3994f7743aa00876bafe19b242527ba4e79bac9304ba3",
    "pin_key, numbers and text": "p1:x:3f80938653600d9651072ed929ed544770fec19de6d23b517ce1f5ce17ed5f23",
}
"""Computed at 57548a9, before every key went through one walk."""


def test_no_key_moved() -> None:
    assert samples() == PINNED


def entity_key(material: object) -> str:
    minted = Minted()
    mint_entity_id(material, resolver=minted)  # type: ignore[arg-type]
    return minted.keys[0][0]


class Loose:
    """A custom policy whose material holds what only the walk converts: a set, bytes, an enum."""

    def __init__(self, extra: object) -> None:
        self.extra = extra

    def material(self, messages: Any, settings: Any, parameters: Any, *, model_id: str) -> dict[str, Any]:
        return {"model": model_id, "extra": self.extra}


def custom_key(extra: object) -> str:
    return call_pin(Loose(extra), conversation(0), None, PARAMS, model_id="m").key  # type: ignore[arg-type]


def test_a_set_keys_on_every_path_as_its_sorted_members() -> None:
    # Once only a tool's arguments took a set; an entity id and a custom policy refused it.
    assert (
        entity_key({"tags": {"b", "a"}})
        == entity_key({"tags": ["a", "b"]})
        == pin_key("entity_id", {"tags": ["a", "b"]})
    )
    assert custom_key(frozenset({2, 1})) == custom_key([1, 2])
    assert tool_pin("t", {"tags": {"b", "a"}}).key == tool_pin("t", {"tags": ["a", "b"]}).key
    # pin_key too, given the walk (issue #23); the timeline's own walk takes JSON values only, and says so.
    assert pin_key("entity_id", {"tags": {"b", "a"}}, walk=walked) == entity_key({"tags": ["a", "b"]})
    with pytest.raises(CanonicalError, match="set is not a JSON type"):
        pin_key("entity_id", {"tags": {"b", "a"}})


def test_pin_key_writes_the_key_every_other_path_writes_of_the_same_material() -> None:
    # What only the walk converts: a set, an enum member, bytes, a number key, a pydantic model, a dataclass.
    material = {
        "tags": {"b", "a"},
        "colour": Colour.RED,
        "rank": Rank.HIGH,
        "blob": b"\x00\x01",
        "by_number": {1: "one"},
        "query": Query(city="Hull", tags={"y", "x"}),
        "box": Box(label="crate", size=2.0),
    }
    assert pin_key("tool_call", material, walk=walked) == key_of("tool_call", walked(material))[0]
    assert pin_key("entity_id", material, walk=walked) == entity_key(material)
    # A tool call's material is its name and its arguments, each walked: pin_key of that is its key.
    assert pin_key("tool_call", {"tool": "t", "args": material}, walk=walked) == tool_pin("t", material).key


def test_a_str_subclass_keys_as_the_characters_it_holds_on_every_path() -> None:
    # Its own str() (`Mode.FAST`, or a mask) could make two values one key: every path writes what it holds.
    tool = tool_pin("t", {"mode": Mode.FAST}).key
    assert tool == tool_pin("t", {"mode": "fast"}).key
    assert entity_key({"mode": Mode.FAST}) == entity_key({"mode": "fast"})
    assert pin_key("k", {"mode": Mode.FAST}, walk=walked) == pin_key("k", {"mode": "fast"})
    assert custom_key(Mode.FAST) == custom_key("fast")


def test_what_no_path_can_write_is_refused_alike_naming_where() -> None:
    class Opaque:
        pass

    # The walk every key uses refuses it, and so does the timeline's own (pin_key without a walk), alike.
    for keyed in (
        lambda v: entity_key({"x": v}),
        lambda v: custom_key({"x": v}),
        lambda v: tool_pin("t", {"x": v}),
        lambda v: pin_key("k", {"x": v}, walk=walked),
    ):
        with pytest.raises(CanonicalError, match="has no JSON form") as caught:
            keyed(Opaque())
        assert caught.value.path.endswith(".x")


def test_a_tool_calls_arguments_are_walked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The key and the fingerprint are both written from the walked material: neither walks it again.
    def walked_again(value: object) -> Any:
        raise AssertionError("walked again")

    monkeypatch.setattr("anagrapheus.timeline.canonical.canonical_value", walked_again)
    monkeypatch.setattr("anagrapheus.timeline.fingerprint.canonical_json", walked_again)
    tool = tool_pin("lookup", {"city": "Hull", "tags": {"b", "a"}}, deps={"region": "eu"})
    assert tool.key == tool_pin("lookup", {"city": "Hull", "tags": ["a", "b"]}, deps={"region": "eu"}).key
    assert set(tool.fingerprint) == {"args.city", "args.tags", "deps.region", "tool"}
    key, fingerprint = output_pin("final", {"answer": "yes"}, partial=False)
    assert key.startswith("p1:output_call:") and set(fingerprint) == {"function", "output.answer"}
    assert entity_key({"kind": "vessel"}).startswith("p1:entity_id:")


def test_a_walk_names_where_it_refused_and_a_kept_value_stands_beside_its_digest() -> None:
    for at, expected in (({}, "$.x"), ({"at": "$.deps"}, "$.deps.x")):
        with pytest.raises(CanonicalError) as caught:
            walked({"x": object()}, **at)
        assert caught.value.path == expected
    _, fingerprint = key_of("k", walked({"a": "held"}), values=True)
    assert fingerprint["=a"] == '"held"' and "=a" not in key_of("k", walked({"a": "held"}))[1]
