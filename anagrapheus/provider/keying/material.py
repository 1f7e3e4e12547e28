"""The walk of key material: every value a key is made of, read once into canonical JSON values.

It accepts what `canonical_value` accepts, and writes each such value as `canonical_value` does; beyond JSON's own
types it converts deliberately (never by `repr`): pydantic-ai's message and request dataclasses by the fields a
call's key keeps, sets sorted by their members' canonical JSON, bytes by digest, an enum by its value, a pydantic
model or other object as pydantic serialises it. The primitives of `anagrapheus.timeline.canonical` spell its
strings and numbers; that module alone writes them as text.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from functools import cache
from itertools import islice
from typing import Any, Final, NamedTuple, cast

import pydantic_core
from pydantic import Secret, SecretBytes, SecretStr
from pydantic_ai.messages import BaseToolCallPart, BaseToolReturnPart, CachePoint

from anagrapheus.errors import CanonicalError
from anagrapheus.provider.keying.known_fields import KNOWN_FIELDS
from anagrapheus.timeline.canonical import (
    Refused,
    canonical_float,
    canonical_integer,
    canonical_string,
    encode_normalised,
)

__all__ = [
    "CLASS_VOLATILE_FIELDS",
    "NO_DEFAULT",
    "PROVIDER_PART_FIELDS",
    "VOLATILE_FIELDS",
    "MaterialWalk",
    "RequestRest",
    "field_default",
    "known_fields",
    "layout_reads",
    "new_fields_set",
    "plain_reads",
    "walk_messages",
    "walk_request",
    "walk_rest",
]

VOLATILE_FIELDS: Final = frozenset(
    {
        "timestamp",
        "run_id",
        "conversation_id",
        "metadata",
        "provider_details",
        "provider_response_id",
        "provider_url",
        "signature",
        "history_digest",
        # pydantic-ai 2.78: which tool calls and returns a UI event stream shows, never sent to the model.
        "ui_visibility",
    }
)
"""Fields of any pydantic-ai dataclass that differ between two runs of one call or are never sent to the model."""

PROVIDER_PART_FIELDS: Final = frozenset({"id", "provider_name"})
"""Dropped from a class that also carries `provider_details`: ids and names a provider stamped on what it produced."""

CLASS_VOLATILE_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "ModelResponse": frozenset(
        {
            "usage",
            "model_name",
            "model_id",
            "finish_reason",
            "canonical_system",
            "workspace_ref",
            "failed_attempts",
            # pydantic-ai 2.78: when the request was sent and how long the model took, from the wall clock.
            "request_timestamp",
            "duration",
        }
    ),
    "ToolDefinition": frozenset({"sequential", "timeout", "toolset_id", "capability_id", "durable"}),
    # pydantic-ai 2.78: a fresh uuid7 per part, as its timestamp is a fresh time.
    "CapabilityPart": frozenset({"record_id"}),
    "ModelRequestParameters": frozenset(
        {"_telemetry_mcp_url_ids", "_telemetry_mcp_url_toolset_ids", "_telemetry_mcp_url_tool_names", "cache"}
    ),
}
"""Further fields dropped per class (matched by class name along the MRO): bookkeeping that is not sent to the model,
and the resolved prompt-cache setting."""

_MESSAGES: Final = "$.messages"
_OUTPUT_FIELDS: Final = {
    "output_mode": "mode",
    "output_object": "object",
    "output_tools": "tools",
    "prompted_output_template": "prompted_template",
    "allow_text_output": "allow_text",
    "allow_image_output": "allow_image",
}
_TAG_FIELDS = frozenset({"part_kind", "kind"})
OUTPUT_TOOL_PART_KIND: Final = "output"
"""The `tool_kind` pydantic-ai 2.78 writes on an output tool's call and return parts (2.68 wrote none)."""
NO_DEFAULT: Final = object()
"""A field without a default: equal to nothing, so always kept."""


RequestRest = tuple[object, str, Mapping[str, object]]
"""The rest of a model request, walked after its messages: its parameters, the model id, its reduced settings."""


class _How(Enum):
    """How one kept field is read."""

    PLAIN = "plain"
    CALL_ID = "call_id"  # numbered by first appearance, so runs with fresh ids key alike
    ARGS = "args"  # `args_as_dict()`: streamed args are a JSON string, others a dict
    PROPERTY = "property"  # a private field keyed by its public property
    ENCRYPTED = "encrypted"  # a compaction's content, kept in provider_details
    TOOL_KIND = "tool_kind"  # a tool part's kind: pydantic-ai 2.78's "output" keys as unset, as 2.68 left it


_PLAIN: Final = _How.PLAIN


class _Field(NamedTuple):
    name: str
    """The name in the material."""
    attr: str
    """The attribute read."""
    default: object
    """Left out when the value is its default (`NO_DEFAULT`, equal to nothing else: always kept)."""
    how: _How


class _Layout(NamedTuple):
    tag: str | None
    """The class name, for a class the key scheme knows no `kind`/`part_kind` field of, to tell it apart."""
    fields: tuple[_Field, ...]


def _from_pydantic_ai(cls: type) -> bool:
    return any(base.__module__.startswith("pydantic_ai") for base in cls.__mro__)


def field_default(field: dataclasses.Field[Any]) -> object:
    """The default of a dataclass field (its factory called once), or `NO_DEFAULT`."""
    if field.default is not dataclasses.MISSING:
        return field.default
    factory = field.default_factory
    if factory is dataclasses.MISSING:
        return NO_DEFAULT
    try:
        # A factory minting fresh values (now, a new id) never compares equal, so nothing is lost by calling it.
        return factory()
    except Exception:
        return NO_DEFAULT


@cache
def known_fields(cls: type[Any]) -> frozenset[str] | None:
    """The fields the key scheme knows of a pydantic-ai dataclass (its nearest known class's); None for a new class.

    The table is frozen with the scheme (`KNOWN_FIELDS`): whatever a later pydantic-ai adds is unknown to it.
    """
    for base in cls.__mro__:
        fields = KNOWN_FIELDS.get(base.__name__)
        if fields is not None and _from_pydantic_ai(base):
            return frozenset(fields.split())
    return None


@cache
def _layout(cls: type[Any]) -> _Layout | None:
    """The tag and kept fields of a pydantic-ai dataclass; None for any other type. Read once per class.

    A field the key scheme knows is keyed as the scheme keys it; one it does not know (a later pydantic-ai's) only
    when it holds a value other than its default, so an upstream field added with a default moves no key. A tag
    field (`kind`, `part_kind`) is kept whatever it holds only where the scheme knows it; a class it knows no tag
    field of is told apart by its name (`$type`), as before the field existed.
    """
    if not (dataclasses.is_dataclass(cls) and _from_pydantic_ai(cls)):
        return None
    declared = dataclasses.fields(cls)
    names = {f.name for f in declared}
    known = known_fields(cls) or frozenset[str]()
    drop = set(VOLATILE_FIELDS)
    if "provider_details" in names:
        drop |= PROVIDER_PART_FIELDS
    for base in cls.__mro__:
        drop |= CLASS_VOLATILE_FIELDS.get(base.__name__, frozenset())
    fields: list[_Field] = []
    for field in declared:
        name = field.name
        if name in drop:
            continue
        if name in _TAG_FIELDS and name in known:
            fields.append(_Field(name, name, NO_DEFAULT, _How.PLAIN))
            continue
        out, attr, how = name, name, _How.PLAIN
        if name.startswith("_"):
            out = name.lstrip("_")
            # A private field behind a public property (FileUrl.media_type, BinaryContent.identifier) is keyed
            # by the property: the effective value, the same before and after a JSON round trip.
            if isinstance(getattr(cls, out, None), property):  # pyright: ignore[reportUnknownArgumentType]
                attr, how = out, _How.PROPERTY
        elif name == "tool_call_id":
            how = _How.CALL_ID
        elif name == "args" and issubclass(cls, BaseToolCallPart):
            how = _How.ARGS
        elif name == "tool_kind" and issubclass(cls, BaseToolCallPart | BaseToolReturnPart):
            how = _How.TOOL_KIND
        fields.append(_Field(out, attr, NO_DEFAULT if how is _How.PROPERTY else field_default(field), how))
    if cls.__name__ == "CompactionPart":
        # OpenAI keeps a compaction's whole content encrypted in provider_details: content, not a stamp.
        fields.append(_Field("encrypted_content", "provider_details", None, _How.ENCRYPTED))
    tag = None if known & _TAG_FIELDS else cls.__name__
    return _Layout(tag, tuple(sorted(fields, key=lambda field: field.name)))


@cache
def layout_reads(cls: type[Any]) -> tuple[str, ...] | None:
    """The attributes the walk reads of a pydantic-ai dataclass (None for any other type).

    A field keyed by a property is computed from the others, so a class with one has every field read.
    """
    layout = _layout(cls)
    if layout is None:
        return None
    reads: dict[str, None] = {}
    for field in layout.fields:
        if field.how is _How.PROPERTY:
            reads.update(dict.fromkeys(f.name for f in dataclasses.fields(cls)))
        elif field.how is _How.ENCRYPTED:
            reads["provider_details"] = None
        else:
            reads[field.attr] = None
    return tuple(reads)


def new_fields_set(value: object, *, at: str = "$") -> list[str]:
    """Where `value` holds a keyed field the key scheme does not know, set off its default (or a class it never saw).

    Each such field moves a key that a recording made before it existed holds: a miss names them. Only names and
    paths are given, never values (a miss is printed in logs).
    """
    found: list[str] = []
    _new_fields(value, at, found, 0)
    return found


def _new_fields(value: object, at: str, found: list[str], depth: int) -> None:
    if depth > 64:
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(cast(Sequence[object], value)):
            _new_fields(item, f"{at}[{index}]", found, depth + 1)
        return
    if isinstance(value, dict):
        for name, item in cast(dict[object, object], value).items():
            _new_fields(item, f"{at}.{name}", found, depth + 1)
        return
    layout = _layout(type(value))
    if layout is None:
        return
    known = known_fields(type(value))
    if known is None:
        found.append(f"{at} (a {type(value).__name__}, a class the key scheme does not know)")
        known = frozenset[str]()
    for field in layout.fields:
        item = getattr(value, field.attr, None)
        if field.name not in known and field.attr not in known and known:
            default = field.default
            if not (item is default or (type(item) is type(default) and item == default)):
                found.append(f"{at}.{field.name} ({type(value).__name__}.{field.name})")
        _new_fields(item, f"{at}.{field.name}", found, depth + 1)


class MaterialWalk:
    """One walk over a call's objects: it numbers tool-call ids by first appearance, so links survive without ids."""

    __slots__ = ("call_ids",)

    def __init__(self) -> None:
        self.call_ids: dict[str, int] = {}

    def value(self, value: object, *, at: str = "$") -> Any:
        """Return `value` as key material: canonical JSON values, refusing what has no deliberate JSON form."""
        try:
            return self._value(value)
        except Refused as refused:
            raise CanonicalError(refused.reason, path=at + "".join(reversed(refused.path))) from None
        except RecursionError:
            raise CanonicalError("value is nested too deeply (or contains itself)", path=at) from None

    def fields(self, given: Mapping[str, object], *, at: str) -> dict[str, Any]:
        """Each entry of `given` walked in turn: a refusal names the entry (`at.<name>`), even one nested too deeply."""
        return {name: self.value(item, at=f"{at}.{name}") for name, item in given.items()}

    def each(self, values: Sequence[object], indices: Iterable[int], *, at: str) -> list[tuple[Any, tuple[str, ...]]]:
        """`values[index]` walked for each index in turn, each with the tool-call ids it numbered first (in order)."""
        walked: list[tuple[Any, tuple[str, ...]]] = []
        call_ids = self.call_ids
        for index in indices:
            before = len(call_ids)
            material = self.value(values[index], at=f"{at}[{index}]")
            walked.append((material, tuple(islice(call_ids, before, None)) if len(call_ids) > before else ()))
        return walked

    def _value(self, value: Any) -> Any:
        kind: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        if kind is str:
            return value if value.isascii() else self._leaf(canonical_string, value)
        if kind is list or kind is tuple:
            return self._items(value)
        if kind is dict:
            return self._mapping(value)
        layout = _layout(kind)
        if layout is not None:
            return self._dataclass(value, layout)
        if kind is int:
            return value if -(2**63) < value < 2**63 else self._leaf(canonical_integer, value)
        if value is None or kind is bool:
            return value
        if kind is float:
            return self._leaf(canonical_float, value)
        return self._value(self._other(value))

    @staticmethod
    def _leaf(normalise: Any, value: Any) -> Any:
        try:
            return normalise(value)
        except CanonicalError as e:
            raise Refused(e.reason) from None

    def _items(self, items: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for index, item in enumerate(items):
            # A CachePoint marks where the provider may cache; the model reads the same content either way.
            if type(item) is CachePoint:
                continue
            try:
                out.append(self._value(item))
            except Refused as refused:
                refused.path.append(f"[{index}]")
                raise
        return out

    def _mapping(self, mapping: Mapping[Any, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in mapping.items():
            # An ASCII string, the commonest key and value, inline: written as it is.
            name = key if type(key) is str and key.isascii() else self._key(key)
            if name in out:
                raise Refused("two object keys are equal once written as canonical JSON")
            try:
                out[name] = item if type(item) is str and item.isascii() else self._value(item)
            except Refused as refused:
                refused.path.append(f".{key}")
                raise
        # In the order canonical JSON writes it, so the material reads as its key's text does.
        return out if len(out) < 2 else {name: out[name] for name in sorted(out)}

    def _key(self, key: object) -> str:
        if isinstance(key, Enum):
            key = key.value
        if isinstance(key, str):
            return self._value(str.__str__(key))
        if isinstance(key, bool) or not isinstance(key, int | float):
            raise Refused(f"object key {key!r} is not a string")
        # pydantic sends a number key as its text (`1`, `1.5`, `1.0`), so that is what the model reads.
        if isinstance(key, int):
            return int.__repr__(int(key))
        self._leaf(canonical_float, key)  # refuses a non-finite key
        return float.__repr__(float(key))

    def _dataclass(self, obj: Any, layout: _Layout) -> dict[str, Any]:
        out: dict[str, Any] = {} if layout.tag is None else {"$type": layout.tag}
        for name, attr, default, how in layout.fields:
            try:
                if how is _PLAIN:
                    raw: Any = getattr(obj, attr)
                    # Left out at its default, so a field a later pydantic-ai adds leaves existing keys as they are.
                    if raw is default or (type(raw) is type(default) and raw == default):
                        continue
                    value: Any = raw  # (not narrowed by the comparison with the default)
                    kind: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
                    # The commonest values inline: an ASCII string, and a list of parts or contents.
                    if kind is str and value.isascii():
                        out[name] = value
                    elif kind is list:
                        out[name] = self._items(value)
                    else:
                        out[name] = self._value(value)
                else:
                    self._special(obj, name, attr, default, how, out)
            except Refused as refused:
                refused.path.append(f".{name}")
                raise
        return out

    def _special(self, obj: Any, name: str, attr: str, default: object, how: _How, out: dict[str, Any]) -> None:
        if how is _How.CALL_ID:
            raw = obj.tool_call_id
            if raw is default or (type(raw) is type(default) and raw == default):
                return
            if type(raw) is str:
                ordinal = self.call_ids.get(raw)
                if ordinal is None:
                    ordinal = self.call_ids[raw] = len(self.call_ids) + 1
                out[name] = ordinal
            else:
                out[name] = self._value(raw)
        elif how is _How.ARGS:
            raw = obj.args
            if not (raw is default or (type(raw) is type(default) and raw == default)):
                out[name] = self._value(obj.args_as_dict())
        elif how is _How.TOOL_KIND:
            raw = obj.tool_kind
            # pydantic-ai 2.78 marks an output tool's call and return parts "output"; 2.68 left them unset, and the
            # request's output tools already name the tool (no 2.68 part could carry "output": it was no kind then).
            if not (raw is default or raw == OUTPUT_TOOL_PART_KIND):
                out[name] = self._value(raw)
        elif how is _How.PROPERTY:
            try:
                out[name] = self._value(getattr(obj, attr))
            except ValueError:
                out[name] = None
        else:  # _How.ENCRYPTED
            details = obj.provider_details
            if isinstance(details, dict) and "encrypted_content" in details:
                out[name] = self._value(details["encrypted_content"])

    def _other(self, value: Any) -> Any:
        """Convert a value that is not plainly JSON into one that is, deliberately, never by `repr`."""
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, str):
            return str.__str__(value)
        # (No bool here: `_value` returns a bool as it is, and bool cannot be subclassed.)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, Secret | SecretStr | SecretBytes):
            # Its dump is itself (or a mask, which every secret shares): a secret never joins a key, even digested.
            secret: type[Any] = type(cast(object, value))
            raise Refused(
                f"{secret.__name__} is a secret, which never joins a key: key what it stands for instead"
                " (for a run's caller, Pinning(caller=lambda deps: deps.user_id))"
            )
        serializer = getattr(cast(object, type(value)), "__pydantic_serializer__", None)
        if isinstance(serializer, pydantic_core.SchemaSerializer) and not isinstance(value, type):
            # A pydantic model or dataclass is dumped in Python mode, so the walk still sees its sets (and sorts
            # them); a JSON-mode dump would list them in the process's hash order.
            return serializer.to_python(value)
        if isinstance(value, bytes | bytearray | memoryview):
            # Bytes are keyed by value, never by how they are wrapped; a digest keeps the key small.
            return {"$bytes_sha256": hashlib.sha256(cast(bytes, value)).hexdigest()}
        if isinstance(value, set | frozenset):
            # Sorted by each item's canonical JSON, which no hash seed changes.
            items = [self._value(item) for item in cast(set[Any], value)]
            return sorted(items, key=encode_normalised)
        if isinstance(value, Mapping):
            return dict(cast(Mapping[Any, Any], value))
        if isinstance(value, list | tuple):
            return list(cast(list[Any], value))
        fields = _fields_holding_a_set(value)
        if fields is not None:
            return fields
        # Anything else (a user dataclass, a datetime) is keyed as pydantic serialises it, which is how pydantic-ai
        # renders such a value for the model.
        try:
            return pydantic_core.to_jsonable_python(value, bytes_mode="base64")
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError):
            raise Refused(
                f"{type(value).__qualname__} has no JSON form"
                " (convert it deliberately first: for a model call, in a CallPolicy)"
            ) from None


def walk_request(
    messages: Sequence[object],
    again: Sequence[tuple[int, int]],
    start: int,
    rest: RequestRest,
    *,
    numbered: dict[str, int] | None = None,
) -> tuple[list[tuple[Any, tuple[str, ...]]], list[tuple[Any, tuple[str, ...]]], dict[str, Any]]:
    """A request walked as the default policy keys it, in one walk: the messages it names, then the rest, shaped.

    Each `(index, known)` of `again` is a message walked anew with only the first `known` ids of `numbered` (the
    tool-call ids numbered so far, added to in place) numbered; then `messages[start:]` (see `MaterialWalk.each`),
    and last the rest, `(parameters, model id, settings)`, after every id the messages numbered: the
    conversation's order numbers tool-call ids, and the rest's own follow.
    """
    walk, walked_again, walked = walk_messages(messages, again, start, numbered=numbered)
    return walked_again, walked, walk_rest(walk, rest)


def walk_messages(
    messages: Sequence[object],
    again: Sequence[tuple[int, int]],
    start: int,
    *,
    numbered: dict[str, int] | None = None,
) -> tuple[MaterialWalk, list[tuple[Any, tuple[str, ...]]], list[tuple[Any, tuple[str, ...]]]]:
    """The messages of `walk_request`, walked; and the walk, numbering as they left it, for the rest (`walk_rest`)."""
    numbered = {} if numbered is None else numbered
    walk = MaterialWalk()
    walked_again: list[tuple[Any, tuple[str, ...]]] = []
    for index, known in again:
        walk.call_ids = dict(islice(numbered.items(), known))
        walked_again += walk.each(messages, (index,), at=_MESSAGES)
    walk.call_ids = numbered
    walked = walk.each(messages, range(start, len(messages)), at=_MESSAGES)
    return walk, walked_again, walked


def walk_rest(walk: MaterialWalk, rest: RequestRest) -> dict[str, Any]:
    """The rest of a request, `(parameters, model id, settings)`, walked after its messages and shaped."""
    parameters, model_id, settings = rest
    shaped = _shaped(walk.value(parameters, at="$.parameters"))
    shaped["model"] = walk.value(model_id, at="$.model")
    shaped["settings"] = walk.fields(settings, at="$.settings")
    return shaped


@cache
def plain_reads(cls: type[Any]) -> tuple[str, ...] | None:
    """The attributes the walk reads of a pydantic-ai dataclass whose every kept field is read plainly; else None.

    Plainly: the attribute's value is walked as it is (no tool-call id numbered, no arguments parsed, no property).
    """
    layout = _layout(cls)
    if layout is None or any(field.how is not _PLAIN for field in layout.fields):
        return None
    return tuple(field.attr for field in layout.fields)


def _shaped(parameters: dict[str, Any]) -> dict[str, Any]:
    """The walked parameters of a request regrouped into tools, output and the rest, as the default policy keys them."""
    parameters.pop("$type", None)
    output: dict[str, Any] = {}
    for name, short in _OUTPUT_FIELDS.items():
        if name in parameters:
            output[short] = parameters.pop(name)
    if "tools" in output:
        output["tools"] = _by_name(output["tools"])
    material: dict[str, Any] = {"tools": _by_name(parameters.pop("function_tools", [])), "output": output}
    for name, top in (("instruction_parts", "instructions"), ("native_tools", "native_tools")):
        if name in parameters:
            material[top] = parameters.pop(name)
    if parameters:
        material["parameters"] = parameters
    return material


def _by_name(definitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Index tool definitions by name: the order they are listed in is not something the model is told."""
    indexed: dict[str, Any] = {}
    for definition in definitions:
        name = str(definition.get("name"))
        # pydantic-ai refuses duplicate names; should two slip through, neither may hide the other.
        while name in indexed:
            name += "#"
        indexed[name] = definition
    return indexed


def _fields_holding_a_set(value: object) -> dict[str, Any] | None:
    """A plain dataclass's fields, to be walked, where a set sits in them; None for anything else."""
    if not (dataclasses.is_dataclass(value) and not isinstance(value, type) and _holds_set(value)):
        return None
    # pydantic would list its sets in the process's hash order, so its fields are walked, which sorts them. Only
    # then: the walk also keys bytes by digest where pydantic writes base64, so other keys stay as they were.
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _holds_set(value: object) -> bool:
    """Whether a set sits anywhere in `value`: in a container, a dataclass's field, or a pydantic model's dump."""
    if isinstance(value, set | frozenset):
        return True
    if isinstance(value, Mapping):
        return any(_holds_set(key) or _holds_set(item) for key, item in cast(Mapping[Any, Any], value).items())
    if isinstance(value, list | tuple):
        return any(map(_holds_set, cast(list[Any], value)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_holds_set(getattr(value, field.name)) for field in dataclasses.fields(value))
    serializer = getattr(cast(object, type(value)), "__pydantic_serializer__", None)
    if isinstance(serializer, pydantic_core.SchemaSerializer):
        return _holds_set(serializer.to_python(value))
    return False
