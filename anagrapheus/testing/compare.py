"""Comparing two runs field by field, with what differs between two runs of the same thing left out."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, cast

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_core import to_jsonable_python

__all__ = [
    "PAIRED_FIELDS",
    "PER_RUN_FIELDS",
    "PROVIDER_ASSIGNED_FIELDS",
    "assert_same_run",
    "comparable",
    "first_difference",
]

PER_RUN_FIELDS = frozenset({"timestamp", "run_id", "conversation_id", "request_timestamp", "duration"})
"""The fields `assert_same_run` drops: wall-clock instants and the ids a run is given, not drawn.

(`request_timestamp` and `duration` are pydantic-ai 2.78's timing of each response, from the wall clock.)

(Formerly `VOLATILE_FIELDS`, a name the key's material uses for another set.)"""

PROVIDER_ASSIGNED_FIELDS = frozenset({"provider_response_id"})
"""The ids a provider gives each response (OpenAI's `chatcmpl-...`, Anthropic's `msg_...`): new on every call of an
unchanged run, so dropped like run ids unless asked for (`provider_ids=True`, the command line's `--all`)."""

PAIRED_FIELDS = frozenset({"tool_call_id"})
"""The fields compared by how they pair up rather than by value: each distinct value is renumbered
in order of first appearance (`<call 1>`, `<call 2>`), so two runs whose tool calls were given other
ids are equal while each return still answers the same call."""

_SHOWN = 80


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def comparable(value: object, *, ignore: Iterable[str] = (), provider_ids: bool = False) -> Any:
    """Return a JSON-shaped value as runs are compared: volatile fields dropped, paired fields renumbered.

    `PER_RUN_FIELDS`, `PROVIDER_ASSIGNED_FIELDS` (unless `provider_ids`) and the names in `ignore` are dropped at
    any depth; each distinct value of a `PAIRED_FIELDS` field becomes `<call N>`, numbered in order of first
    appearance.
    """
    dropped = PER_RUN_FIELDS | frozenset(ignore)
    if not provider_ids:
        dropped |= PROVIDER_ASSIGNED_FIELDS
    numbers: dict[str, int] = {}

    def walk(item: object) -> object:
        if isinstance(item, dict):
            fields: dict[str, object] = {}
            for name, field in cast("dict[str, object]", item).items():
                if name in dropped:
                    continue
                if name in PAIRED_FIELDS and isinstance(field, str):
                    fields[name] = f"<call {numbers.setdefault(field, len(numbers) + 1)}>"
                else:
                    fields[name] = walk(field)
            return fields
        if isinstance(item, list):
            return [walk(element) for element in cast("list[object]", item)]
        return item

    return walk(value)


def first_difference(a: object, b: object, *, path: str = "$", ignore: Iterable[str] = ()) -> str | None:
    """Name the first place where two JSON-shaped values differ, as `path: a != b`, or None when equal.

    Object keys named in `ignore` are skipped at any depth; lists are compared item by item, so a
    list that grew or shrank names the first index present on one side only.
    """
    ignored = frozenset(ignore)
    if isinstance(a, dict) and isinstance(b, dict):
        left, right = cast("dict[str, Any]", a), cast("dict[str, Any]", b)
        for name in sorted(left.keys() | right.keys()):
            if name in ignored:
                continue
            where = f"{path}.{name}"
            if name not in right:
                return f"{where}: only in the first ({_shown(left[name])})"
            if name not in left:
                return f"{where}: only in the second ({_shown(right[name])})"
            found = first_difference(left[name], right[name], path=where, ignore=ignored)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        left_items, right_items = cast("list[Any]", a), cast("list[Any]", b)
        for index, (x, y) in enumerate(zip(left_items, right_items, strict=False)):
            found = first_difference(x, y, path=f"{path}[{index}]", ignore=ignored)
            if found is not None:
                return found
        if len(left_items) != len(right_items):
            index = min(len(left_items), len(right_items))
            extra = left_items[index] if len(left_items) > index else right_items[index]
            side = "first" if len(left_items) > index else "second"
            return f"{path}[{index}]: only in the {side} ({_shown(extra)})"
        return None
    left_value: Any = cast("Any", a)
    right_value: Any = cast("Any", b)
    numbers = isinstance(left_value, int | float) and isinstance(right_value, int | float)
    # bool is an int to Python, but True and 1 are different answers.
    if (type(left_value) is not type(right_value) and not numbers) or isinstance(left_value, bool) != isinstance(
        right_value, bool
    ):
        return f"{path}: {_shown(left_value)} != {_shown(right_value)}"
    if left_value != right_value:
        return f"{path}: {_shown(left_value)} != {_shown(right_value)}"
    return None


def _messages(run: object) -> list[ModelMessage]:
    if isinstance(run, Sequence) and not isinstance(run, str | bytes):
        return list(cast("Sequence[ModelMessage]", run))
    all_messages = getattr(run, "all_messages", None)
    if not callable(all_messages):
        raise TypeError(f"expected a run result or a list of messages, not {type(run).__qualname__}")
    return cast("list[ModelMessage]", all_messages())


def _outcome(run: object) -> dict[str, Any] | None:
    """The output and usage of a run result; None for a bare message list."""
    if isinstance(run, Sequence) and not isinstance(run, str | bytes):
        return None
    usage = getattr(run, "usage", None)
    if inspect.ismethod(usage):  # a streamed result's usage is a method, a finished run's a property
        usage = usage()
    return {"output": to_jsonable_python(getattr(run, "output", None)), "usage": to_jsonable_python(usage)}


def assert_same_run(a: object, b: object, *, ignore: Iterable[str] = (), provider_ids: bool = False) -> None:
    """Assert that two runs (results or message lists) asked and answered the same, in the same order.

    Compares the sequence of messages and their parts (kinds, content, tool calls with their
    arguments), then the output and the usage when both are run results. Wall-clock instants and
    run ids are dropped (`PER_RUN_FIELDS`), the provider's response ids unless `provider_ids`
    (`PROVIDER_ASSIGNED_FIELDS`), and the field names in `ignore`; tool call ids
    are compared by how calls and returns pair up, not by value (`PAIRED_FIELDS`). The
    `AssertionError` names the first field or message index that moved.
    """
    ignored = frozenset(ignore)

    def compared(value: object) -> Any:
        return comparable(value, ignore=ignored, provider_ids=provider_ids)

    dumped_a = compared(ModelMessagesTypeAdapter.dump_python(_messages(a), mode="json"))
    dumped_b = compared(ModelMessagesTypeAdapter.dump_python(_messages(b), mode="json"))
    found = first_difference(dumped_a, dumped_b, path="messages")
    if found is None:
        outcome_a, outcome_b = _outcome(a), _outcome(b)
        if outcome_a is not None and outcome_b is not None:
            for name in ("output", "usage"):
                found = first_difference(compared(outcome_a[name]), compared(outcome_b[name]), path=name)
                if found is not None:
                    break
    if found is not None:
        raise AssertionError(f"the runs differ at {found}")
