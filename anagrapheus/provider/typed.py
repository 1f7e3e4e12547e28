"""Values kept with their types: what JSON would bring back as something else is pinned as its JSON and its class.

A tool returning a `datetime`, a `Decimal`, an enum member, a pydantic model or a dataclass gives pydantic-ai
that object, and unpinned the run's messages hold it. A pin is JSON, so the value is kept as its JSON and the
class it validates back into (`module:qualname`), and rebuilt with pydantic on every path: live, the run
receives the rebuilt value, which the draw checked is equal, of the same class and of the same JSON; so does a
replay. What cannot be rebuilt so is refused while recording, saying what to do. Rebuilding only looks up
classes of modules the process imported already: a recording never makes the process import anything.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from pydantic import PydanticUserError, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from anagrapheus.errors import CanonicalError, PinResultError
from anagrapheus.timeline.canonical import JSONValue, stored_value

__all__ = ["needs_tags", "needs_type", "rebuilt", "typed", "typed_tree", "untyped_tree"]

_JSON_LEAVES: tuple[type, ...] = (str, int, float, bool, type(None))
"""The classes whose values JSON brings back as themselves (exactly these: a `str` enum is not one)."""


def needs_type(value: object) -> bool:
    """Whether `value` is one value JSON would not bring back as itself: neither a JSON leaf, nor a list or dict."""
    return type(value) not in _JSON_LEAVES and type(value) not in (list, dict)


def typed(value: object, *, what: str) -> dict[str, JSONValue]:
    """`value` as `{"type": "module:qualname", "v": its JSON}`, or `PinResultError` if it cannot be rebuilt as itself.

    `what` begins the error's sentence, saying where the value came from (`tool 'survey' returned`).
    """
    kind = type(value)
    held = kind.__qualname__
    try:
        jsonable: JSONValue = to_jsonable_python(value)
        stored_value(jsonable)
    except (CanonicalError, PydanticSerializationError) as e:
        raise PinResultError(f"{what} {held}, which has no JSON form ({e})") from e
    node: dict[str, JSONValue] = {"type": f"{kind.__module__}:{held}", "v": jsonable}
    try:
        again = rebuilt(node)
        # Not the same value, or another JSON: the run would receive, or the model be sent, something else on replay.
        same = type(again) is kind and again == value and to_jsonable_python(again) == jsonable
        why = "" if same else f"its JSON validates back as {again!r:.200}"
    except PinResultError as e:
        why = str(e)
    if why:
        raise PinResultError(
            f"{what} {held}, which a replay cannot rebuild as itself ({why}): return its JSON"
            " instead (.model_dump(mode='json'), .isoformat(), str(...)), or a type defined at a module's top level"
            " that validates back from its JSON and compares equal (a pydantic model, a dataclass, an enum, a"
            " datetime, a Decimal, a UUID)"
        )
    return node


def rebuilt(node: dict[str, JSONValue]) -> Any:
    """The value `typed` wrote as `node`, validated by pydantic into its class; `PinResultError` if it cannot be."""
    named = node.get("type")
    if not isinstance(named, str):
        raise PinResultError(f"a typed value names no class: {node!r:.200}")
    jsonable = node.get("v")
    module_name, _, qualname = named.partition(":")
    found: object = sys.modules.get(module_name)
    for name in qualname.split(".") if found is not None else ():
        found = getattr(found, name, None)
    if not isinstance(found, type):
        raise PinResultError(f"type {named} is not a class of an imported module (import it before replaying)")
    try:
        return TypeAdapter(cast(type[Any], found)).validate_python(jsonable)
    except (ValidationError, PydanticUserError, TypeError, ValueError) as e:
        raise PinResultError(f"a value of type {named} cannot be rebuilt from {jsonable!r:.200} ({e})") from e


def needs_tags(value: object) -> bool:
    """Whether `value` is, or holds in a list or dict at any depth, something JSON alone would not bring back as itself.

    That is any value that is not JSON itself: a `datetime`, a `Decimal`, an enum member, a pydantic model, a
    dataclass, a tuple (JSON has only lists), and what pydantic-ai sends the model as more than JSON (a
    `ToolReturn`, an image, a message part). Such a value is kept with its type, so the run receives it as itself.
    """
    if type(value) is list:
        return any(needs_tags(item) for item in cast("list[object]", value))
    if type(value) is dict:
        return any(needs_tags(item) for item in cast("dict[object, object]", value).values())
    return needs_type(value)


def typed_tree(value: object, *, what: str) -> JSONValue:
    """`value` as a tree of nodes tagged as a tool result's are: `list`, `tuple`, `dict`, `typed` and `json`."""
    if type(value) in (list, tuple):
        items = [typed_tree(item, what=what) for item in cast("list[object]", value)]
        return {"$t": "tuple" if type(value) is tuple else "list", "v": items}
    if type(value) is dict:
        entries = cast("dict[object, object]", value)
        return {"$t": "dict", "v": {str(name): typed_tree(item, what=what) for name, item in entries.items()}}
    if needs_type(value):
        return {"$t": "typed", **typed(value, what=what)}
    return {"$t": "json", "v": cast(JSONValue, value)}


def untyped_tree(node: JSONValue) -> Any:
    """The value `typed_tree` wrote as `node`; `PinResultError` for a node it could not have written."""
    tag = node.get("$t") if isinstance(node, dict) else None
    value = node.get("v") if isinstance(node, dict) else None
    if tag == "json":
        return value
    if tag == "typed" and isinstance(node, dict):
        return rebuilt(node)
    if tag in ("list", "tuple") and isinstance(value, list):
        items = [untyped_tree(item) for item in value]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(value, dict):
        return {name: untyped_tree(item) for name, item in value.items()}
    raise PinResultError(f"a typed tree holds a node anagrapheus cannot rebuild: {node!r:.200}")
