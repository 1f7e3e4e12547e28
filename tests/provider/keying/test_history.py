"""Keying a growing conversation walks only what is new or changed, and always keys as from scratch.

`SemanticCallPolicy` keeps each message's material between requests (`provider/keying/history.py`). These tests
drive one policy through conversations that grow, shrink, fork and are changed in place in every way a hook
could, and compare each key and fingerprint with those of the material computed from scratch.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from anagrapheus.errors import CanonicalError
from anagrapheus.provider import CallPin, SemanticCallPolicy, call_pin
from anagrapheus.provider.keying.history import CHAINS, SEEN_BEFORE_KEPT, SIGHTINGS
from anagrapheus.provider.policy import MODEL_CALL
from anagrapheus.timeline.canonical import pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of
from tests.provider.test_policy_properties import json_values, texts

TOOL = ToolDefinition(name="quota", parameters_json_schema={"type": "object"}, description="Quota.")
PLAIN = ModelRequestParameters(function_tools=[TOOL])


def instructed(text: str) -> ModelRequestParameters:
    """Parameters whose instructions come before the messages in the material's text."""
    from pydantic_ai.messages import InstructionPart

    return ModelRequestParameters(function_tools=[TOOL], instruction_parts=[InstructionPart(content=text)])


SETTINGS: ModelSettings = {"temperature": 0.5}


def pin_of(
    policy: SemanticCallPolicy,
    messages: list[ModelMessage],
    parameters: ModelRequestParameters,
    settings_: ModelSettings = SETTINGS,
) -> CallPin:
    return call_pin(policy, messages, settings_, parameters, model_id="function:uk")


def from_scratch(
    messages: list[ModelMessage], parameters: ModelRequestParameters, settings_: ModelSettings = SETTINGS
) -> tuple[str, dict[str, str]]:
    """The key and fingerprint of the material as `SemanticCallPolicy.material` writes it, over a deep copy."""
    material = SemanticCallPolicy().material(
        copy.deepcopy(messages), copy.deepcopy(settings_), parameters, model_id="function:uk"
    )
    return pin_key(MODEL_CALL, material), fingerprint_of(material)


def assert_keyed_as_from_scratch(
    policy: SemanticCallPolicy,
    messages: list[ModelMessage],
    parameters: ModelRequestParameters,
    settings_: ModelSettings = SETTINGS,
) -> None:
    expected = from_scratch(messages, parameters, settings_)
    # Enough times that the conversation is kept, and the last is keyed through what was kept; those before it
    # are walked whole, without watches.
    for _ in range(SEEN_BEFORE_KEPT + 1):
        pinned = pin_of(policy, messages, parameters, settings_)
        assert (pinned.key, dict(pinned.fingerprint)) == expected


class Quota(BaseModel):
    """A tool's return value that is not plain JSON: its messages are walked on every request."""

    tonnes: int
    zones: list[str]


def request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def turn(index: int, args: Any) -> list[ModelMessage]:
    call_id = f"call_{index}"
    return [
        ModelResponse(parts=[ToolCallPart("quota", args, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart("quota", {"tonnes": index, "zones": ["north"]}, tool_call_id=call_id)]),
        ModelResponse(parts=[TextPart(f"answer {index}")]),
        request(f"question {index + 1}"),
    ]


def mutate(messages: list[ModelMessage], data: st.DataObject) -> None:
    """Change one message in place, as a hook or a history processor could."""
    message: Any = data.draw(st.sampled_from(messages))
    part: Any = data.draw(st.sampled_from(message.parts)) if message.parts else None
    how = data.draw(
        st.sampled_from(
            [
                "text",
                "parts_append",
                "parts_pop",
                "parts_reverse",
                "parts_copy_then_append",
                "instructions",
                "call_id",
                "args_set",
                "args_delete",
                "args_bool_for_int",
                "args_copy_then_set",
                "args_as_text",
                "content_inner",
                "content_model",
                "class_swap",
                "dict_swap",
            ]
        )
    )
    if how == "parts_append":
        message.parts.append(UserPromptPart("added") if isinstance(message, ModelRequest) else TextPart("added"))
    elif how == "parts_pop" and len(message.parts) > 1:
        message.parts.pop(0)
    elif how == "parts_reverse":
        message.parts.reverse()
    elif how == "parts_copy_then_append":
        # An equal copy put in place first: the watch must follow the new list, not the old one.
        message.parts = list(message.parts)
        message.parts.append(UserPromptPart("late") if isinstance(message, ModelRequest) else TextPart("late"))
    elif how == "instructions" and isinstance(message, ModelRequest):
        message.instructions = data.draw(texts)
    elif how == "call_id" and isinstance(part, ToolCallPart | ToolReturnPart):
        part.tool_call_id = data.draw(st.sampled_from(["call_0", "call_1", "fresh"]))
    elif how == "args_set" and isinstance(part, ToolCallPart) and isinstance(part.args, dict):
        part.args[data.draw(texts)] = data.draw(json_values)
    elif how == "args_delete" and isinstance(part, ToolCallPart) and isinstance(part.args, dict) and part.args:
        del part.args[next(iter(part.args))]
    elif how == "args_bool_for_int" and isinstance(part, ToolCallPart) and isinstance(part.args, dict):
        # Equal under ==, another value in JSON: only a check by identity tells them apart.
        part.args["n"] = True if part.args.get("n") == 1 and part.args.get("n") is not True else 1
    elif how == "args_copy_then_set" and isinstance(part, ToolCallPart) and isinstance(part.args, dict):
        part.args = dict(part.args)
        part.args["late"] = data.draw(json_values)
    elif how == "args_as_text" and isinstance(part, ToolCallPart):
        part.args = '{"zone": "south"}'
    elif how == "content_inner" and isinstance(part, ToolReturnPart) and isinstance(part.content, dict):
        inner: Any = part.content
        inner["zones"].append(data.draw(texts))
    elif how == "content_model" and isinstance(part, ToolReturnPart):
        if isinstance(part.content, Quota):
            part.content.zones.append("east")  # changed inside a pydantic model, which no watch reads
        else:
            part.content = Quota(tonnes=3, zones=["west"])
    elif how == "class_swap" and type(part) is UserPromptPart:
        part.__class__ = SystemPromptPart
    elif how == "dict_swap" and part is not None:
        # A new attribute dict, then a change through it: the watch reads attributes, not one dict.
        part.__dict__ = dict(part.__dict__)
        if hasattr(part, "content") and isinstance(part.content, str):
            part.content = part.content + "!"
    elif isinstance(part, UserPromptPart | TextPart | ToolReturnPart):
        part.content = data.draw(texts)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_conversation_grown_shrunk_forked_and_changed_in_place_is_keyed_as_from_scratch(
    data: st.DataObject,
) -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0")]
    parameters = PLAIN
    for step in range(data.draw(st.integers(min_value=1, max_value=8))):
        action = data.draw(st.sampled_from(["grow", "grow", "mutate", "shrink", "fork", "instructions", "again"]))
        if action == "grow":
            messages += turn(step, data.draw(st.sampled_from([{"zone": "north", "n": 1}, '{"zone": "north"}', None])))
        elif action == "mutate":
            mutate(messages, data)
        elif action == "shrink" and len(messages) > 1:
            # A history processor may drop messages: a shorter list of the same objects.
            messages = messages[: data.draw(st.integers(min_value=1, max_value=len(messages) - 1))]
        elif action == "fork":
            # The same opening, then another branch: the objects after it are new.
            keep = data.draw(st.integers(min_value=1, max_value=len(messages)))
            messages = messages[:keep] + copy.deepcopy(messages[keep:])
        elif action == "instructions":
            parameters = instructed(data.draw(texts))
        assert_keyed_as_from_scratch(policy, messages, parameters)


class CountedCall(ToolCallPart):
    """A tool call that counts how often its arguments are read (once a walk), in no field the walk reads."""

    def args_as_dict(self, *, raise_if_invalid: bool = False) -> dict[str, Any]:
        self.__dict__["reads"] = self.reads + 1
        return super().args_as_dict(raise_if_invalid=raise_if_invalid)

    @property
    def reads(self) -> int:
        return self.__dict__.get("reads", 0)


def test_each_message_is_walked_once_while_the_conversation_grows_and_again_once_changed() -> None:
    policy = SemanticCallPolicy()
    counted = CountedCall("quota", {"zone": "north"}, tool_call_id="call_a")
    messages: list[ModelMessage] = [request("question 0"), ModelResponse(parts=[counted])]
    messages.append(ModelRequest(parts=[ToolReturnPart("quota", "12 tonnes", tool_call_id="call_a")]))
    for index in range(30):
        messages += turn(index, {"zone": "south"})
        assert_keyed_as_from_scratch(policy, messages, PLAIN)
    # from_scratch walks a deep copy, whose reads are its own. This one was walked by the requests keyed from
    # scratch before the conversation was kept, and once more when it was: never again while it stood.
    assert counted.reads == SEEN_BEFORE_KEPT + 1

    messages[0].parts[0].content = "question 0, reworded"  # pyright: ignore[reportAttributeAccessIssue]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    assert counted.reads == SEEN_BEFORE_KEPT + 1  # a change before it, of the same tool-call numbering, leaves it be

    assert isinstance(counted.args, dict)
    counted.args["zone"] = "west"
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    assert counted.reads == SEEN_BEFORE_KEPT + 2


def echoing(call_id: str) -> ModelSettings:
    """Settings holding a tool call, whose id the rest of the request numbers after the messages' ids."""
    return {"temperature": 0.5, "extra_body": {"echo": ToolCallPart("quota", {"zone": "east"}, tool_call_id=call_id)}}


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_rest_numbering_tool_call_ids_of_its_own_is_keyed_as_from_scratch(data: st.DataObject) -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0")]
    for step in range(data.draw(st.integers(min_value=1, max_value=6))):
        action = data.draw(st.sampled_from(["grow", "grow", "mutate", "shrink", "fresh"]))
        if action == "grow":
            messages += turn(step, {"zone": "north", "n": 1})
        elif action == "mutate":
            mutate(messages, data)
        elif action == "shrink" and len(messages) > 1:
            messages = messages[: data.draw(st.integers(min_value=1, max_value=len(messages) - 1))]
        elif action == "fresh":
            # Another conversation (its first message another object): walked whole until it is kept in turn.
            messages = copy.deepcopy(messages)
        # An id the messages numbered takes their number; another follows theirs (and is no id of theirs after).
        echoed = data.draw(st.sampled_from(["call_0", "call_1", "call_5", "elsewhere"]))
        assert_keyed_as_from_scratch(policy, messages, PLAIN, echoing(echoed))


def test_a_rest_numbering_tool_call_ids_of_its_own_still_walks_each_kept_message_once() -> None:
    policy = SemanticCallPolicy()
    counted = CountedCall("quota", {"zone": "north"}, tool_call_id="call_a")
    messages: list[ModelMessage] = [request("question 0"), ModelResponse(parts=[counted])]
    for index in range(4):
        messages += turn(index, {"zone": "south"})
        assert_keyed_as_from_scratch(policy, messages, PLAIN, echoing("elsewhere" if index % 2 else "call_a"))
    # The messages are walked before the rest, which numbers its ids after theirs: what they numbered is kept.
    assert counted.reads == SEEN_BEFORE_KEPT + 1
    # The rest's own ids are not the conversation's: a later message with that id is numbered after the messages'.
    messages += [ModelResponse(parts=[ToolCallPart("quota", {"zone": "east"}, tool_call_id="elsewhere")])]
    assert_keyed_as_from_scratch(policy, messages, PLAIN, echoing("elsewhere"))
    assert_keyed_as_from_scratch(policy, messages, PLAIN)


def test_a_conversation_of_few_requests_is_keyed_from_scratch_and_keeps_nothing() -> None:
    policy = SemanticCallPolicy()
    counted = CountedCall("quota", {"zone": "north"}, tool_call_id="call_a")
    messages: list[ModelMessage] = [request("question 0"), ModelResponse(parts=[counted])]
    for count in range(1, SEEN_BEFORE_KEPT + 1):
        pin_of(policy, messages, PLAIN)
        assert counted.reads == count
    pin_of(policy, messages, PLAIN)  # kept from here on
    pin_of(policy, messages, PLAIN)
    assert counted.reads == SEEN_BEFORE_KEPT + 1


def test_a_message_holding_an_object_no_watch_reads_is_walked_on_every_request() -> None:
    policy = SemanticCallPolicy()
    quota = Quota(tonnes=5, zones=["north"])
    messages: list[ModelMessage] = [
        request("question 0"),
        ModelResponse(parts=[ToolCallPart("quota", {}, tool_call_id="c")]),
        ModelRequest(parts=[ToolReturnPart("quota", quota, tool_call_id="c")]),
    ]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    before = pin_of(policy, messages, PLAIN).key
    quota.zones.append("east")
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    assert pin_of(policy, messages, PLAIN).key != before


def test_a_refused_message_leaves_nothing_half_kept() -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0"), *turn(0, {"n": 1})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    # Refused among the new messages, after others were walked: none of them may be kept without its hash.
    messages += [request("an aside"), *turn(1, {"n": float("nan")})]
    with pytest.raises(CanonicalError) as refused:
        pin_of(policy, messages, PLAIN)
    assert refused.value.path == "$.messages[6].parts[0].args.n"
    call = messages[6].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(call.args, dict)
    call.args["n"] = 2
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    # Refused among the messages already kept.
    call.args["n"] = float("inf")
    with pytest.raises(CanonicalError) as refused:
        pin_of(policy, messages, PLAIN)
    assert refused.value.path == "$.messages[6].parts[0].args.n"
    call.args["n"] = 3
    assert_keyed_as_from_scratch(policy, messages, PLAIN)


def test_an_equal_value_of_another_type_put_in_place_changes_the_key() -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0"), *turn(0, {"n": 1, "tonnes": 10**20})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    call = messages[1].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(call.args, dict)
    # Each equal under == to what it replaces, and written otherwise in JSON.
    call.args["n"] = True
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    call.args["tonnes"] = 1e20
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    # An equal dict in place of the arguments, and a list in place of the parts, holding such a value.
    call.args = {"n": 1, "tonnes": 1e20}
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    returned = messages[2].parts[0]
    assert isinstance(returned, ToolReturnPart)
    returned.content = {"tonnes": 0, "zones": ["north"]}
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    returned.content = {"tonnes": False, "zones": ["north"]}
    assert_keyed_as_from_scratch(policy, messages, PLAIN)


@dataclass
class Stamped(UserPromptPart):
    """A user prompt keyed with one more field."""

    stamp: str = "plain"


def test_an_object_whose_class_is_swapped_is_read_by_its_new_class() -> None:
    policy = SemanticCallPolicy()
    prompt = UserPromptPart("question 0")
    prompt.__dict__["stamp"] = "red"  # no field of a UserPromptPart: not keyed
    messages: list[ModelMessage] = [ModelRequest(parts=[prompt]), *turn(0, {"n": 1})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    before = pin_of(policy, messages, PLAIN).key
    prompt.__class__ = Stamped
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    assert pin_of(policy, messages, PLAIN).key != before


class Zone(int):
    """A number written as a key through `__int__`, which reads a field that can change."""

    name = 1

    def __int__(self) -> int:
        return self.name


class Colour(Enum):
    """An enum member is written as a key by its value."""

    RED = "red"


def test_a_key_whose_written_form_changes_in_place_changes_the_key() -> None:
    # The key object stays the very same, and so does every value of its dict: only the key's own state moves.
    policy = SemanticCallPolicy()
    zone = Zone(0)
    messages: list[ModelMessage] = [request("question 0"), *turn(0, {"n": 1})]
    returned = messages[2].parts[0]
    assert isinstance(returned, ToolReturnPart)
    returned.content = {zone: "north", Colour.RED: "east"}
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    before = pin_of(policy, messages, PLAIN).key
    zone.name = 2
    check(policy, messages)
    assert pin_of(policy, messages, PLAIN).key != before
    before = pin_of(policy, messages, PLAIN).key
    Colour.RED._value_ = "blue"  # pyright: ignore[reportAttributeAccessIssue]
    try:
        check(policy, messages)
        assert pin_of(policy, messages, PLAIN).key != before
    finally:
        Colour.RED._value_ = "red"  # pyright: ignore[reportAttributeAccessIssue]


def test_a_swapped_class_missing_a_field_the_old_one_read_is_keyed_as_from_scratch() -> None:
    policy = SemanticCallPolicy()
    returned = ToolReturnPart("quota", "12 tonnes", tool_call_id="call_r")
    messages: list[ModelMessage] = [request("question 0"), ModelRequest(parts=[returned]), request("question 1")]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    returned.__class__ = UserPromptPart
    del returned.tool_name  # read by the old class's watch; a user prompt has no such field
    check(policy, messages)


def test_a_part_missing_a_field_its_walk_leaves_out_is_keyed_as_from_scratch() -> None:
    from pydantic_ai.messages import ImageUrl

    @dataclass
    class TaggedImage(ImageUrl):
        """An image with a field the walk leaves out (a volatile name) and no class default to fall back on."""

        metadata: dict[str, str] = field(default_factory=dict[str, str])

    policy = SemanticCallPolicy()
    image = TaggedImage(url="https://example.com/north.png")
    del image.metadata  # a class with a property field has every field watched: this one cannot be read
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(["Look:", image])]), *turn(0, {"n": 0})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    image.url = "https://example.com/south.png"  # walked on every request, so a change is still seen
    check(policy, messages)


def test_of_two_broken_messages_the_first_is_named_as_from_scratch() -> None:
    # The check of the kept messages reads every one of them before any is walked again: a message it cannot
    # read must not be reported ahead of an earlier one the walk refuses.
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0"), *turn(0, {"n": 1})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    call = messages[1].parts[0]
    answer = messages[3].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(call.args, dict) and isinstance(answer, TextPart)
    call.args["n"] = float("nan")
    del answer.content
    with pytest.raises(CanonicalError) as refused:
        pin_of(policy, messages, PLAIN)
    assert refused.value.path == "$.messages[1].parts[0].args.n"
    with pytest.raises(CanonicalError):
        from_scratch(messages, PLAIN)


def test_more_conversations_than_are_kept_still_key_as_from_scratch() -> None:
    policy = SemanticCallPolicy()
    conversations = [[request(f"opening {index}"), *turn(index, {"n": index})] for index in range(CHAINS + 3)]
    for _ in range(2):
        for messages in conversations:
            messages += turn(len(messages), {"n": len(messages)})
            assert_keyed_as_from_scratch(policy, messages, PLAIN)


def test_one_policy_keys_conversations_growing_on_several_threads_as_from_scratch() -> None:
    policy = SemanticCallPolicy()
    failures: list[BaseException] = []

    def converse(name: str) -> None:
        try:
            messages: list[ModelMessage] = [request(f"opening of {name}")]
            for index in range(15):
                messages += turn(index, {"thread": name, "n": index})
                assert_keyed_as_from_scratch(policy, messages, PLAIN)
        except BaseException as failure:  # reported on the main thread
            failures.append(failure)

    threads = [threading.Thread(target=converse, args=(f"t{index}",)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    assert not any(thread.is_alive() for thread in threads)


def check(policy: SemanticCallPolicy, messages: list[ModelMessage], parameters: ModelRequestParameters = PLAIN) -> None:
    """One request, keyed as from scratch."""
    pinned = pin_of(policy, messages, parameters)
    assert (pinned.key, dict(pinned.fingerprint)) == from_scratch(messages, parameters)


class ReadCall(ToolCallPart):
    """A tool call that counts how often its tool name is read: by a walk, and by each check of a kept conversation."""

    @property
    def tool_name(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        self.__dict__["name_reads"] = self.name_reads + 1
        return self.__dict__["_tool_name"]

    @tool_name.setter
    def tool_name(self, value: str) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        self.__dict__["_tool_name"] = value

    @property
    def name_reads(self) -> int:
        return self.__dict__.get("name_reads", 0)


def test_a_kept_conversation_reads_each_field_once_a_request_whatever_changed_before() -> None:
    policy = SemanticCallPolicy()
    read = ReadCall("quota", {"zone": "north"}, tool_call_id="call_r")
    messages: list[ModelMessage] = [
        request("question 0"),
        ModelResponse(parts=[read]),
        ModelRequest(parts=[ToolReturnPart("quota", "12 tonnes", tool_call_id="call_r")]),
        *turn(0, {"n": 0}),
    ]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)

    def once_a_request() -> None:
        # Twice unchanged: the first may walk what the step before changed; the second only checks.
        check(policy, messages)
        before = read.name_reads
        check(policy, messages)
        assert read.name_reads == before + 1

    once_a_request()
    messages[0].parts[0].content = "question 0, reworded"  # pyright: ignore[reportAttributeAccessIssue]
    once_a_request()
    messages[2].parts.append(UserPromptPart("a note"))  # pyright: ignore[reportArgumentType]
    once_a_request()  # the message's watch grew: the ones after it moved
    returned = messages[2].parts[0]
    assert isinstance(returned, ToolReturnPart)
    quota = Quota(tonnes=4, zones=["north"])
    returned.content = quota
    once_a_request()  # walked on every request now, and the others still read once
    quota.zones.append("east")
    check(policy, messages)
    returned.content = "13 tonnes"
    once_a_request()  # watched again
    messages += turn(1, {"n": 1})
    once_a_request()
    last = messages[-3].parts[0]
    assert isinstance(last, ToolReturnPart)
    last.content = Quota(tonnes=5, zones=[])
    check(policy, messages)
    del messages[-3:]  # the message no watch reads is dropped
    once_a_request()
    messages += turn(2, {"n": 2})
    once_a_request()


def test_a_tool_call_id_changed_in_place_renumbers_the_calls_after_it() -> None:
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0")]
    for index in range(4):
        messages += turn(index, {"n": index})
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    call = messages[5].parts[0]
    assert isinstance(call, ToolCallPart)
    call.tool_call_id = "renamed"  # its return still names the old id, which now first appears there
    check(policy, messages)
    returned = messages[6].parts[0]
    assert isinstance(returned, ToolReturnPart)
    returned.tool_call_id = "renamed"
    check(policy, messages)
    returned.content = {"tonnes": 9, "zones": []}  # the same numbering: walked alone
    check(policy, messages)


def test_two_messages_changed_in_place_before_one_request_are_both_keyed_anew() -> None:
    # Each message a watch cannot vouch for is walked again; with two in one request, both walks must reach the key.
    policy = SemanticCallPolicy()
    messages: list[ModelMessage] = [request("question 0")]
    for index in range(3):
        messages += turn(index, {"n": index})
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    first, second = messages[2].parts[0], messages[6].parts[0]
    assert isinstance(first, ToolReturnPart) and isinstance(second, ToolReturnPart)
    first.content = {"tonnes": 7, "zones": ["south"]}
    second.content = {"tonnes": 8, "zones": []}
    check(policy, messages)


def test_a_call_renamed_right_after_another_numbers_from_the_ids_before_it() -> None:
    # Walked again alone, the renamed call starts from the ids its predecessors numbered: here, exactly one.
    policy = SemanticCallPolicy()
    first = ToolCallPart("quota", {"n": 0}, tool_call_id="call_a")
    second = ToolCallPart("quota", {"n": 1}, tool_call_id="call_b")
    messages: list[ModelMessage] = [
        request("question 0"),
        ModelResponse(parts=[first]),
        ModelResponse(parts=[second]),
        ModelRequest(parts=[ToolReturnPart("quota", "1", tool_call_id="call_a")]),
        *turn(0, {"n": 2}),
    ]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    second.tool_call_id = "call_renamed"
    check(policy, messages)
    check(policy, messages)


def test_a_history_opening_with_a_tool_call_renamed_in_place_keys_as_from_scratch() -> None:
    policy = SemanticCallPolicy()
    call = ToolCallPart("quota", {"n": 0}, tool_call_id="call_first")
    messages: list[ModelMessage] = [
        ModelResponse(parts=[call]),
        ModelRequest(parts=[ToolReturnPart("quota", "12 tonnes", tool_call_id="call_first")]),
        *turn(0, {"n": 1}),
    ]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    call.tool_call_id = "call_renamed"
    check(policy, messages)
    check(policy, messages)


def test_a_fork_walks_only_the_messages_after_it() -> None:
    counted = [CountedCall("quota", {"n": index}, tool_call_id=f"call_{index}") for index in range(6)]
    whole: list[ModelMessage] = [request("question 0")]
    for index, call in enumerate(counted):
        whole += [ModelResponse(parts=[call]), request(f"question {index + 1}")]
    for fork in range(1, len(whole)):
        policy = SemanticCallPolicy()
        messages = list(whole)
        assert_keyed_as_from_scratch(policy, messages, PLAIN)
        reads = [call.reads for call in counted]
        messages = messages[:fork] + copy.deepcopy(messages[fork:])
        check(policy, messages)
        assert [call.reads for call in counted] == reads, fork  # the originals before the fork: not walked again


def test_as_many_conversations_as_are_kept_are_each_walked_once() -> None:
    def conversations(count: int) -> tuple[list[list[ModelMessage]], list[CountedCall]]:
        calls = [CountedCall("quota", {"n": index}, tool_call_id="call_a") for index in range(count)]
        return [[request(f"opening {index}"), ModelResponse(parts=[call])] for index, call in enumerate(calls)], calls

    policy = SemanticCallPolicy()
    kept, calls = conversations(CHAINS)
    for _ in range(SEEN_BEFORE_KEPT + 3):
        for messages in kept:
            pin_of(policy, messages, PLAIN)
    assert {call.reads for call in calls} == {SEEN_BEFORE_KEPT + 1}

    policy = SemanticCallPolicy()
    crowded, calls = conversations(CHAINS + 1)
    for _ in range(SEEN_BEFORE_KEPT + 3):
        for messages in crowded:
            pin_of(policy, messages, PLAIN)
    # The first kept was dropped for the last, so it was walked again when its turn came round.
    assert calls[0].reads > SEEN_BEFORE_KEPT + 1
    assert {call.reads for call in calls[1:]} == {SEEN_BEFORE_KEPT + 1}


@pytest.mark.parametrize("others", [SIGHTINGS - 1, SIGHTINGS])
def test_requests_are_counted_for_so_many_conversations_not_yet_kept(others: int) -> None:
    policy = SemanticCallPolicy()
    call = CountedCall("quota", {"n": 0}, tool_call_id="call_a")
    watched: list[ModelMessage] = [request("the one watched"), ModelResponse(parts=[call])]
    for _ in range(SEEN_BEFORE_KEPT):
        pin_of(policy, watched, PLAIN)
    for index in range(others):
        pin_of(policy, [request(f"another {index}")], PLAIN)
    for _ in range(3):
        pin_of(policy, watched, PLAIN)
    if others < SIGHTINGS:
        assert call.reads == SEEN_BEFORE_KEPT + 1  # kept at its next request, then never walked again
    else:
        assert call.reads == SEEN_BEFORE_KEPT + 3  # forgotten: counted from the start again, kept at the last


def test_an_empty_history_is_keyed_as_from_scratch() -> None:
    policy = SemanticCallPolicy()
    for _ in range(SEEN_BEFORE_KEPT + 2):
        check(policy, [])


def test_a_part_inside_a_tuple_changed_in_place_changes_the_key() -> None:
    from pydantic_ai.messages import ImageUrl

    policy = SemanticCallPolicy()
    image = ImageUrl(url="https://example.com/north.png")
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(("Look:", image))]), *turn(0, {"n": 0})]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    image.url = "https://example.com/south.png"
    check(policy, messages)


@pytest.mark.parametrize(
    ("content", "change"),
    [
        # One value more, read by the watch already there; one list more to watch, holding no value.
        (["question 0"], lambda prompt: prompt.content.append("and the zones?")),
        ("question 0", lambda prompt: setattr(prompt, "content", [])),
    ],
    ids=["a value added to a list", "an empty list for a text"],
)
def test_a_message_whose_watch_grew_leaves_the_later_ones_read_once_a_request(content: Any, change: Any) -> None:
    policy = SemanticCallPolicy()
    prompt = UserPromptPart(content)
    read = ReadCall("quota", {"zone": "north"}, tool_call_id="call_r")
    returned = ToolReturnPart("quota", "12 tonnes", tool_call_id="call_r")
    messages: list[ModelMessage] = [
        ModelRequest(parts=[prompt]),
        ModelResponse(parts=[read]),
        ModelRequest(parts=[returned]),
        *turn(0, {"n": 0}),
    ]
    assert_keyed_as_from_scratch(policy, messages, PLAIN)
    change(prompt)
    check(policy, messages)
    # A message after the grown one, changed in place: walked again where its watch now sits.
    returned.content = "13 tonnes"
    check(policy, messages)
    before = read.name_reads
    check(policy, messages)
    assert read.name_reads == before + 1
