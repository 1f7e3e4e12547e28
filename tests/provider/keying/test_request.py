"""A model request walks the key path once: each room of it is entered once, for one uninterrupted stay.

The rooms are the modules a request's key is made in: `PinnedModel` (provider/model.py), the call policy
(provider/policy.py) and the keying package (provider/keying/). A room left and entered again is a bounce, which
issue 23 removed: the kept history was asked whether to keep a conversation and then again for its digest, and
the walk was entered for the rest of the request and then again for the messages.
"""

from __future__ import annotations

import sys
from collections import Counter
from types import FrameType
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider import PinnedModel
from anagrapheus.provider.keying.history import SEEN_BEFORE_KEPT
from anagrapheus.timeline import PinLedger

KEY_PATH = [
    "anagrapheus.provider.model",
    "anagrapheus.provider.policy",
    "anagrapheus.provider.keying.request",
    "anagrapheus.provider.keying.settings",
    "anagrapheus.provider.keying.history",
    "anagrapheus.provider.keying.material",
    "anagrapheus.provider.keying.rest",
]
"""The rooms of a request's key, in the order they are entered (the rest, read as the last request's, not walked)."""
PARAMETERS = ModelRequestParameters(
    function_tools=[ToolDefinition(name="quota", parameters_json_schema={"type": "object"}, description="Quota.")]
)


def answer(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("The UK holds firm.")])


def turns(start: int, stop: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for index in range(start, stop):
        messages += [
            ModelResponse(parts=[ToolCallPart("quota", {"zone": "north"}, tool_call_id=f"call_{index}")]),
            ModelRequest(parts=[ToolReturnPart("quota", f"{index}00t", tool_call_id=f"call_{index}")]),
        ]
    return messages


class Stays:
    """The provider's modules a profiled thread enters, in order: a module left and entered again is listed again."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self._depth: Counter[str] = Counter()

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if event not in ("call", "return") or not module.startswith("anagrapheus.provider."):
            return
        if event == "call":
            if not self._depth[module]:
                self.entered.append(module)
            self._depth[module] += 1
        else:
            self._depth[module] -= 1


@pytest.mark.anyio
@pytest.mark.parametrize("kept", [False, True], ids=["first_request", "kept_conversation"])
async def test_a_request_enters_each_room_of_the_key_path_once(ledger: PinLedger, kept: bool) -> None:
    model = PinnedModel(FunctionModel(answer, model_name="scripted-uk"), ledger)
    # The process-wide caches filled once per class (its key layout, the fields the key scheme knows of it, which
    # the stored answer is pruned by) are filled by another conversation first, as by any request before: what is
    # checked is each request's own path, not a process's first sight of a class.
    await model.request([ModelRequest.user_text_prompt("Warm up."), *turns(0, 3)], None, PARAMETERS)
    messages = [ModelRequest.user_text_prompt("State the UK position on fisheries."), *turns(0, 3)]
    if kept:
        for _ in range(SEEN_BEFORE_KEPT + 1):
            await model.request(messages, None, PARAMETERS)
        messages += turns(3, 4)  # grown by a turn: new messages are walked besides the kept ones checked
    stays = Stays()
    sys.setprofile(stays)
    try:
        await model.request(messages, None, PARAMETERS)
    finally:
        sys.setprofile(None)
    # A conversation not kept yet is walked whole, without watches, and hashed as a kept one is (around its messages).
    path = KEY_PATH
    assert stays.entered[: len(path)] == path
    # After the key the request goes on to draw (and the model's stay is cut by its awaits): no room of the key
    # path but the model is entered again.
    assert not set(stays.entered[len(path) :]) & set(path[1:])
