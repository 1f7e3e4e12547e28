"""Values kept with their types: what JSON would bring back as something else is pinned as its JSON and its class.

A tool returning a `datetime`, a `Decimal`, an enum member, a pydantic model or a dataclass gives pydantic-ai
that object, and unpinned the run's messages hold it. A pin is JSON, so the value is kept as its JSON and the
class it validates back into (`module:qualname`), and rebuilt with pydantic on every path: live, the run
receives the rebuilt value, which the draw checked is equal, of the same class and of the same JSON; so does a
replay. What cannot be rebuilt so is refused while recording, saying what to do.

The class is the tool's, never the file's (issue #41): a tag is looked up only among the classes the tool's
signature declares (`DeclaredTypes`: its return annotation walked through containers, unions, `Annotated`, and the
fields of the models and dataclasses it names) and the fixed value types (`VALUE_TYPES`). A tag naming anything
else is `UndeclaredType` and builds nothing; no lookup reads a module, so a recording never imports anything nor
runs a module's `__getattr__`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any, Final, Literal, cast, get_args, get_origin
from uuid import UUID

from pydantic import BaseModel, PydanticUserError, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from anagrapheus.errors import CanonicalError, PinResultError, UndeclaredType
from anagrapheus.timeline.canonical import JSONValue, stored_value

__all__ = [
    "VALUE_TYPES",
    "DeclaredTypes",
    "needs_tags",
    "needs_type",
    "rebuilt",
    "tag_of",
    "typed",
    "typed_tree",
    "untyped_tree",
]

_JSON_LEAVES: tuple[type, ...] = (str, int, float, bool, type(None))
"""The classes whose values JSON brings back as themselves (exactly these: a `str` enum is not one)."""

VALUE_TYPES: Final[tuple[type, ...]] = (datetime, date, time, timedelta, Decimal, UUID)
"""The value types every typed pin may hold without a signature naming them (exactly these classes)."""

_DEPTH = 32


def tag_of(kind: type) -> str:
    """The tag a typed value of class `kind` is kept under: `module:qualname`."""
    return f"{kind.__module__}:{kind.__qualname__}"


class DeclaredTypes:
    """The classes a typed pin's values may be rebuilt as: `VALUE_TYPES`, and those a signature declares.

    Walked from the annotation on first use (a result holding no typed value never walks it), then kept.
    """

    __slots__ = ("_annotation", "_classes", "key", "source")

    def __init__(self, annotation: object = None, *, source: str, key: str | None = None) -> None:
        # The annotation, or a function to read it from on first use (its module may still be importing now).
        self._annotation: Callable[[], object] = lambda: annotation
        # One table, shared with each copy bound to a pin (`for_pin`): walked once.
        self._classes: list[dict[str, type]] = []
        self.source = source
        """What declares the types (`the signature of tool 'survey'`), as errors name it."""
        self.key = key
        """The key of the pin read, for the error naming it."""

    @classmethod
    def returned_by(cls, func: Callable[..., object] | None, *, source: str) -> DeclaredTypes:
        """The types `func`'s return annotation declares (only `VALUE_TYPES` for None or no annotation)."""
        declared = cls(source=source)
        if func is not None:
            declared._annotation = lambda: _return_annotation(func)
        return declared

    def for_pin(self, key: str) -> DeclaredTypes:
        """The same types, reading the pin under `key` (errors name it)."""
        bound = DeclaredTypes(source=self.source, key=key)
        bound._annotation = self._annotation
        bound._classes = self._classes
        return bound

    def _table(self) -> dict[str, type]:
        if not self._classes:
            classes = {tag_of(kind): kind for kind in VALUE_TYPES}
            _declared(self._annotation(), classes, set(), 0)
            self._classes.append(classes)
        return self._classes[0]

    def declares(self, kind: type) -> bool:
        """Whether a value of class `kind` may be kept typed: the class under its tag is this very class."""
        return self._table().get(tag_of(kind)) is kind

    def named(self, tag: str) -> type:
        """The class under `tag`, or `UndeclaredType` naming the pin when the signature declares none."""
        found = self._table().get(tag)
        if found is None:
            raise UndeclaredType(tag, source=self.source, key=self.key)
        return found


def _return_annotation(func: Callable[..., object]) -> object:
    """`func`'s return annotation, resolved (through `functools.partial` and callable objects); None where it has none.

    An annotation that does not resolve (a name defined inside a function) declares nothing.
    """
    target: object = func
    while isinstance(target, functools.partial):
        target = cast("functools.partial[object]", target).func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target).__call__  # a callable object: its method's annotation
    try:
        return typing.get_type_hints(target, include_extras=True).get("return")
    except Exception:
        return None


def _declared(annotation: object, found: dict[str, type], seen: set[int], depth: int) -> None:
    """Note in `found` every class `annotation` names: through containers, unions, models' and dataclasses' fields."""
    if depth > _DEPTH or id(annotation) in seen:
        return
    seen.add(id(annotation))
    origin: object = get_origin(annotation)
    if origin is Literal:
        return
    if origin is Annotated:
        _declared(get_args(annotation)[0], found, seen, depth + 1)
        return
    if origin is not None:
        for argument in get_args(annotation):
            _declared(argument, found, seen, depth + 1)
        if not (isinstance(origin, type) and _field_types(origin)):
            return  # a container (list, dict, Sequence) or a union: only what it holds is declared
        annotation = origin  # a generic model or dataclass (`ToolReturn[Landing]`): the class, then its fields
    value = getattr(annotation, "__value__", None)
    if value is not None and not isinstance(annotation, type):
        _declared(value, found, seen, depth + 1)  # a `type X = ...` alias
        return
    if not isinstance(annotation, type):
        return
    kind: type = annotation
    found.setdefault(tag_of(kind), kind)
    for field_type in _field_types(kind):
        _declared(field_type, found, seen, depth + 1)


def _field_types(kind: type[Any]) -> list[object]:
    """The annotations of the fields of a pydantic model or dataclass `kind` (none for any other class)."""
    if issubclass(kind, BaseModel):
        return [info.annotation for info in kind.model_fields.values()]
    declared: type[Any] = kind
    if dataclasses.is_dataclass(declared):
        try:
            hints = typing.get_type_hints(declared, include_extras=True)
        except Exception:
            hints = {}
        return [hints.get(field.name, field.type) for field in dataclasses.fields(declared)]
    return []


def needs_type(value: object) -> bool:
    """Whether `value` is one value JSON would not bring back as itself: neither a JSON leaf, nor a list or dict."""
    return type(value) not in _JSON_LEAVES and type(value) not in (list, dict)


def typed(value: object, *, what: str, declared: DeclaredTypes) -> dict[str, JSONValue]:
    """`value` as `{"type": "module:qualname", "v": its JSON}`, or `PinResultError` if it cannot be rebuilt as itself.

    `what` begins the error's sentence, saying where the value came from (`tool 'survey' returned`); `declared`
    holds the classes a replay may rebuild it as, which must include its own.
    """
    kind = type(value)
    held = kind.__qualname__
    try:
        jsonable: JSONValue = to_jsonable_python(value)
        stored_value(jsonable)
    except (CanonicalError, PydanticSerializationError) as e:
        raise PinResultError(f"{what} {held}, which has no JSON form ({e})") from e
    if not declared.declares(kind):
        raise PinResultError(
            f"{what} {held}, which {declared.source} does not declare: a replay rebuilds only the classes its"
            f" signature names (and {', '.join(k.__name__ for k in VALUE_TYPES)}). Name it in the return"
            f" annotation (-> {held}, or a union, a container or a model holding it), or return its JSON"
        )
    node: dict[str, JSONValue] = {"type": tag_of(kind), "v": jsonable}
    try:
        again = rebuilt(node, declared)
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


def rebuilt(node: dict[str, JSONValue], declared: DeclaredTypes) -> Any:
    """The value `typed` wrote as `node`, validated by pydantic into its declared class.

    `UndeclaredType` when the tag names a class `declared` does not hold; `PinResultError` when the value cannot
    be rebuilt as it.
    """
    named = node.get("type")
    if not isinstance(named, str):
        raise PinResultError(f"a typed value names no class: {node!r:.200}")
    jsonable = node.get("v")
    found = declared.named(named)
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


def typed_tree(value: object, *, what: str, declared: DeclaredTypes) -> JSONValue:
    """`value` as a tree of nodes tagged as a tool result's are: `list`, `tuple`, `dict`, `typed` and `json`."""
    if type(value) in (list, tuple):
        items = [typed_tree(item, what=what, declared=declared) for item in cast("list[object]", value)]
        return {"$t": "tuple" if type(value) is tuple else "list", "v": items}
    if type(value) is dict:
        entries = cast("dict[object, object]", value)
        tree = {str(name): typed_tree(item, what=what, declared=declared) for name, item in entries.items()}
        return {"$t": "dict", "v": tree}
    if needs_type(value):
        return {"$t": "typed", **typed(value, what=what, declared=declared)}
    return {"$t": "json", "v": cast(JSONValue, value)}


def untyped_tree(node: JSONValue, declared: DeclaredTypes) -> Any:
    """The value `typed_tree` wrote as `node`; `PinResultError` for a node it could not have written."""
    tag = node.get("$t") if isinstance(node, dict) else None
    value = node.get("v") if isinstance(node, dict) else None
    if tag == "json":
        return value
    if tag == "typed" and isinstance(node, dict):
        return rebuilt(node, declared)
    if tag in ("list", "tuple") and isinstance(value, list):
        items = [untyped_tree(item, declared) for item in value]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(value, dict):
        return {name: untyped_tree(item, declared) for name, item in value.items()}
    raise PinResultError(f"a typed tree holds a node anagrapheus cannot rebuild: {node!r:.200}")
