"""Assertions on the tool calls a run made, read from its result, its messages or its recording."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_core import to_jsonable_python
from typing_extensions import override

from anagrapheus.timeline import EventTypeRegistry, PinPromoted, StoredEvent
from anagrapheus.timeline.events import events_of
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.stores.opening import read_events

__all__ = [
    "ToolCall",
    "assert_called",
    "assert_called_in_order",
    "assert_called_once",
    "assert_not_called",
    "tool_calls",
]

_MODEL_CALL = "model_call"
"""The kind of a model request's pin (the provider layer's `MODEL_CALL`), whose answer holds the calls asked for."""

_OUTPUT_TOOL = "final_result"
"""The name pydantic-ai gives an output tool when its parts carry no `tool_kind` (before it marked them)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool the model asked for: its name and its arguments, in the order the run made them."""

    tool_name: str
    """The tool's name."""
    args: dict[str, Any]
    """The arguments, as JSON values (a streamed call's argument text parsed)."""

    @override
    def __str__(self) -> str:
        arguments = ", ".join(f"{name}={value!r}" for name, value in self.args.items())
        return f"{self.tool_name}({arguments})"

    def matches(self, tool_name: str, args: Mapping[str, object]) -> bool:
        """Whether this is a call of `tool_name` whose arguments include every one of `args` with its value."""
        wanted = cast("dict[str, Any]", to_jsonable_python(dict(args)))
        return self.tool_name == tool_name and all(
            name in self.args and self.args[name] == value for name, value in wanted.items()
        )


def tool_calls(source: object, *, unit: str | None = None) -> list[ToolCall]:
    """The function-tool calls the model asked for, in order, read from `source`.

    `source` is a run result (`AgentRunResult`, a streamed result), its messages, the path of a recording or
    database, its `StoredEvent`s, or the `ToolCall`s this returned.
    A recording or database is read from its model-call pins, in log order; `unit` narrows it to one unit of
    work. Output-tool calls (`final_result`) are left out: they are how a run answers, not a tool it used.
    """
    if isinstance(source, str | os.PathLike):
        source = read_events(cast("str | os.PathLike[str]", source))
    items: list[object] = list(cast("Iterable[object]", source)) if _is_iterable(source) else []
    if items and all(isinstance(item, ToolCall) for item in items):
        return cast("list[ToolCall]", items)
    if items and all(isinstance(item, StoredEvent) for item in items):
        return _from_events(cast("list[StoredEvent]", items), unit=unit)
    if _is_iterable(source):
        messages = cast("list[ModelMessage]", items)
    else:
        all_messages = getattr(source, "all_messages", None)
        if not callable(all_messages):
            raise TypeError(
                "expected a run result, its messages, a recording's path or events, or tool calls;"
                f" not {type(source).__qualname__}"
            )
        messages = cast("list[ModelMessage]", all_messages())
    return _from_responses(
        cast("dict[str, Any]", message)
        for message in ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        if message.get("kind") == "response"
    )


def _is_iterable(source: object) -> bool:
    return isinstance(source, Iterable) and not isinstance(source, str | bytes | Mapping)


def _from_events(events: list[StoredEvent], *, unit: str | None) -> list[ToolCall]:
    registry = EventTypeRegistry()
    responses: list[dict[str, Any]] = []
    for stored in events_of(events, PinPromoted):
        pin = registry.decode(stored)
        assert isinstance(pin, PinPromoted)
        if pin.kind != _MODEL_CALL or pin.failed or (unit is not None and pin.unit_id != unit):
            continue
        answer = read_ordered(pin.raw)  # pyright: ignore[reportArgumentType]
        if isinstance(answer, dict) and isinstance(answer.get("parts"), list):
            responses.append(cast("dict[str, Any]", answer))
    return _from_responses(responses)


def _from_responses(responses: Iterable[dict[str, Any]]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for response in responses:
        for part in cast("list[dict[str, Any]]", response.get("parts") or []):
            if part.get("part_kind") != "tool-call":
                continue
            name = str(part.get("tool_name"))
            kind = part.get("tool_kind")
            if kind == "output" or (kind is None and name == _OUTPUT_TOOL):
                continue
            args: object = part.get("args")
            if isinstance(args, str):
                args = json.loads(args) if args.strip() else {}
            calls.append(ToolCall(name, cast("dict[str, Any]", args) if isinstance(args, dict) else {"args": args}))
    return calls


def _wanted(tool_name: str, args: Mapping[str, object]) -> str:
    return str(ToolCall(tool_name, dict(args))) if args else tool_name


def _made(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return "the run made no tool call"
    listed = "\n".join(f"  {index}. {call}" for index, call in enumerate(calls, start=1))
    return f"the run made {len(calls)} tool call(s):\n{listed}"


def assert_called(source: object, tool_name: str, /, **args: object) -> ToolCall:
    """Assert that the run called `tool_name` at least once with arguments including `args`; return the first such call.

    With no `args`, any call of the tool counts; with some, a call matches when each named argument has that
    value (other arguments may be anything). The `AssertionError` lists the calls the run made.
    """
    calls = tool_calls(source)
    found = [call for call in calls if call.matches(tool_name, args)]
    if not found:
        raise AssertionError(f"{_wanted(tool_name, args)} was not called; {_made(calls)}")
    return found[0]


def assert_called_once(source: object, tool_name: str, /, **args: object) -> ToolCall:
    """Assert that the run called `tool_name` (with arguments including `args`) exactly once; return that call."""
    calls = tool_calls(source)
    found = [call for call in calls if call.matches(tool_name, args)]
    if len(found) != 1:
        times = "was not called" if not found else f"was called {len(found)} times"
        raise AssertionError(f"{_wanted(tool_name, args)} {times}, not once; {_made(calls)}")
    return found[0]


def assert_not_called(source: object, tool_name: str, /, **args: object) -> None:
    """Assert that the run never called `tool_name` (with arguments including `args`, when given)."""
    calls = tool_calls(source)
    found = [index for index, call in enumerate(calls, start=1) if call.matches(tool_name, args)]
    if found:
        at = ", ".join(f"#{index}" for index in found)
        raise AssertionError(f"{_wanted(tool_name, args)} was called ({at}); {_made(calls)}")


def assert_called_in_order(source: object, /, *tool_names: str) -> None:
    """Assert that the run called `tool_names` in this order (other calls may come between and around them)."""
    calls = tool_calls(source)
    position = 0
    for wanted in tool_names:
        while position < len(calls) and calls[position].tool_name != wanted:
            position += 1
        if position == len(calls):
            order = " before ".join(tool_names)
            raise AssertionError(f"the calls were not made in the order {order} ({wanted} missing); {_made(calls)}")
        position += 1
