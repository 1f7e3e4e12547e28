"""Canonical key material walked straight from pydantic-ai's message and request dataclasses.

The walk writes canonical JSON text directly (sorted keys, NFC strings, one spelling per number), so a message
is visited once: no dump to Python values, no second normalising pass, no separate encode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from json.encoder import encode_basestring
from typing import Any, Final, cast

import pydantic_core
from pydantic_ai.messages import BaseToolCallPart, CachePoint

from anagrapheus.errors import CanonicalError

__all__ = [
    "CLASS_VOLATILE_FIELDS",
    "PROVIDER_PART_FIELDS",
    "VOLATILE_FIELDS",
    "FieldText",
    "MaterialWalk",
    "encode_canonical",
    "key_string",
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
    }
)
"""Fields of any pydantic-ai dataclass that differ between two runs of one call or are never sent to the model."""

PROVIDER_PART_FIELDS: Final = frozenset({"id", "provider_name"})
"""Dropped from a class that also carries `provider_details`: ids and names a provider stamped on what it produced."""

CLASS_VOLATILE_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "ModelResponse": frozenset(
        {"usage", "model_name", "model_id", "finish_reason", "canonical_system", "workspace_ref", "failed_attempts"}
    ),
    "ToolDefinition": frozenset({"sequential", "timeout", "toolset_id", "capability_id"}),
    "ModelRequestParameters": frozenset(
        {"_telemetry_mcp_url_ids", "_telemetry_mcp_url_toolset_ids", "_telemetry_mcp_url_tool_names", "cache"}
    ),
}
"""Further fields dropped per class (matched by class name along the MRO): bookkeeping that is not sent to the model,
and the resolved prompt-cache setting."""

_TAG_FIELDS = frozenset({"part_kind", "kind"})
_SAFE_INT = 2**53
_NO_DEFAULT: Final = object()
_PLAIN, _CALL_ID, _ARGS, _PROPERTY, _ENCRYPTED = range(5)

encode_canonical: Final[Callable[[object], str]] = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
).encode
"""Encode an already-canonical value exactly as `canonical_json` would (the same encoder settings)."""

_encode_text: Final[Callable[[str], str]] = encode_basestring
"""The string encoder `canonical_json` uses (`ensure_ascii=False`)."""


class _Refused(Exception):
    """Internal: carries the reason and the reversed path up the walk."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []


class _Omitted(Exception):
    """Internal: a special field holds its default and is left out."""


_Writer = Callable[[Any, "MaterialWalk"], str]
"""Writes one pydantic-ai object as canonical JSON; generated per class from the fields it keeps."""

_WRITERS: dict[type, _Writer] = {}
"""The writer for each type met so far; JSON's own types are added below `MaterialWalk`."""

FieldText = str | list[str]
"""One field's canonical JSON text, or, for a list, the text of each item (to be joined as `[a,b]`)."""

_FieldsWriter = Callable[[Any, "MaterialWalk"], list[tuple[str, FieldText]]]
"""Writes one pydantic-ai object as its kept fields' (name, text) pairs, in the order its writer joins them."""

_FIELDS_WRITERS: dict[type, _FieldsWriter | None] = {}
"""The fields writer for each type met so far (None: not a pydantic-ai dataclass)."""


def _from_pydantic_ai(cls: type) -> bool:
    return any(base.__module__.startswith("pydantic_ai") for base in cls.__mro__)


def _default_of(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    factory = field.default_factory
    if factory is dataclasses.MISSING:
        return _NO_DEFAULT
    try:
        # A factory minting fresh values (now, a new id) never compares equal, so nothing is lost by calling it.
        return factory()
    except Exception:
        return _NO_DEFAULT


def _layout(cls: type[Any]) -> tuple[str | None, list[tuple[str, str, object, int]]] | None:
    """The tag and kept fields of a pydantic-ai dataclass, sorted by output name; None for any other type."""
    if not (dataclasses.is_dataclass(cls) and _from_pydantic_ai(cls)):
        return None
    declared = dataclasses.fields(cls)
    names = {f.name for f in declared}
    drop = set(VOLATILE_FIELDS)
    if "provider_details" in names:
        drop |= PROVIDER_PART_FIELDS
    for base in cls.__mro__:
        drop |= CLASS_VOLATILE_FIELDS.get(base.__name__, frozenset())
    entries: list[tuple[str, str, object, int]] = []
    for field in declared:
        name = field.name
        if name in drop:
            continue
        if name in _TAG_FIELDS:
            entries.append((name, name, _NO_DEFAULT, _PLAIN))
            continue
        out, attr, how = name, name, _PLAIN
        if name.startswith("_"):
            out = name.lstrip("_")
            # A private field behind a public property (FileUrl.media_type, BinaryContent.identifier) is keyed
            # by the property: the effective value, the same before and after a JSON round trip.
            if isinstance(getattr(cls, out, None), property):  # pyright: ignore[reportUnknownArgumentType]
                attr, how = out, _PROPERTY
        elif name == "tool_call_id":
            how = _CALL_ID
        elif name == "args" and issubclass(cls, BaseToolCallPart):
            how = _ARGS
        entries.append((out, attr, _default_of(field) if how != _PROPERTY else _NO_DEFAULT, how))
    if cls.__name__ == "CompactionPart":
        # OpenAI keeps a compaction's whole content encrypted in provider_details: content, not a stamp.
        entries.append(("encrypted_content", "provider_details", None, _ENCRYPTED))
    tag = None if names & _TAG_FIELDS else cls.__name__
    return tag, sorted(entries, key=lambda entry: entry[0])


def _writer_for(cls: type[Any]) -> _Writer:
    """The writer for values of `cls`: generated for pydantic-ai's dataclasses, a deliberate conversion otherwise."""
    if cls in _WRITERS:
        return _WRITERS[cls]
    layout = _layout(cls)
    writer: _Writer = _converted if layout is None else _compile(cls, *layout)
    _WRITERS[cls] = writer
    return writer


def _fields_writer_for(cls: type[Any]) -> _FieldsWriter | None:
    """The fields writer for a pydantic-ai dataclass: the same walk as its writer, each kept field's text apart."""
    if cls in _FIELDS_WRITERS:
        return _FIELDS_WRITERS[cls]
    layout = _layout(cls)
    writer: _FieldsWriter | None = None if layout is None else _compile(cls, None, layout[1], apart=True)
    _FIELDS_WRITERS[cls] = writer
    return writer


def _converted(value: Any, walk: MaterialWalk) -> str:
    return walk._converted(value)  # pyright: ignore[reportPrivateUsage]


def _compile(
    cls: type[Any], tag: str | None, entries: list[tuple[str, str, object, int]], *, apart: bool = False
) -> Any:
    """Generate the writer for one class, as `dataclasses` generates `__init__`: one straight-line function.

    The walk visits every message of every request, so the per-field loop and dispatch of a generic writer
    would be most of the cost of a key. Each field is written only when it differs from its default, so a
    field a later pydantic-ai adds with a default leaves existing keys unchanged. With `apart`, the function
    returns the (name, text) pair of each field written instead of joining them (a list's items stay apart).
    """
    scope: dict[str, Any] = {
        "_encode_text": _encode_text,
        "_nfc": _nfc,
        "_Refused": _Refused,
        "_Omitted": _Omitted,
        "_NO_DEFAULT": _NO_DEFAULT,
        # Unbound, so a generated writer makes no bound method per object it writes.
        "text": MaterialWalk._text,  # pyright: ignore[reportPrivateUsage]
        "sequence": MaterialWalk._sequence,  # pyright: ignore[reportPrivateUsage]
        "mapping": MaterialWalk._mapping,  # pyright: ignore[reportPrivateUsage]
        "items": MaterialWalk._items,  # pyright: ignore[reportPrivateUsage]
        "special": MaterialWalk._special,  # pyright: ignore[reportPrivateUsage]
    }
    lines = ["def write(obj, walk):"]
    if any(how == _CALL_ID for _name, _attr, _default, how in entries):
        lines.append("    call_ids = walk.call_ids")
    if apart:
        lines.append("    pieces = []")
    else:
        lines.append(
            f"    pieces = [{_encode_text('$type') + ':' + _encode_text(tag)!r}]" if tag else "    pieces = []"
        )
    lines.append("    field = None")
    lines.append("    try:")
    lines.append("        pass")
    for index, (name, attr, default, how) in enumerate(entries):
        prefix, value = f"p{index}", f"d{index}"
        scope[value], scope[f"a{index}"] = default, attr
        scope[prefix] = name if apart else _encode_text(name) + ":"
        # Joined: '"name":' + text. Apart: ("name", text).
        start, end = (f"({prefix}, ", ")") if apart else (f"{prefix} + (", ")")
        lines.append(f"        field = {name!r}")
        if how in (_PROPERTY, _ENCRYPTED):
            lines += [
                "        try:",
                f"            pieces.append({start}special(walk, obj, a{index}, {value}, {how}){end})",
                "        except _Omitted:",
                "            pass",
            ]
            continue
        lines.append(f"        raw = obj.{attr}")
        if how == _CALL_ID:
            # `_call_id` inline: a tool call and its return each carry one, in every request of a run.
            write = (
                "if type(raw) is str:\n"
                "                ordinal = call_ids.get(raw)\n"
                "                if ordinal is None:\n"
                "                    ordinal = call_ids[raw] = len(call_ids) + 1\n"
                f"                pieces.append({start}int.__repr__(ordinal){end})\n"
                "            else:\n"
                f"                pieces.append({start}text(walk, raw){end})"
            )
        elif how == _ARGS:
            args = "text(walk, obj.args_as_dict())"
            if getattr(cls, "args_as_dict", None) is BaseToolCallPart.args_as_dict:
                # What `args_as_dict` returns for dict args (an empty one is written `{}` either way).
                args = f"mapping(walk, raw) if type(raw) is dict else {args}"
            write = f"pieces.append({start}{args}{end})"
        else:
            listed = (
                "items(walk, raw) if type(raw) is list or type(raw) is tuple"
                if apart
                else "sequence(walk, raw) if type(raw) is list"
            )
            write = (
                f"pieces.append({start}_encode_text(raw) if type(raw) is str and raw.isascii()"
                f" else {listed} else mapping(walk, raw) if type(raw) is dict else text(walk, raw){end})"
            )
        if default is _NO_DEFAULT:
            lines += ["        if True:", f"            {write}"]
        elif default is None:
            lines += ["        if raw is not None:", f"            {write}"]
        else:
            lines += [f"        if raw is not {value} and (type(raw) is not type({value}) or raw != {value}):"]
            lines.append(f"            {write}")
    lines += [
        "    except _Refused as refused:",
        "        refused.path.append('.' + field)",
        "        raise",
        "    return pieces" if apart else "    return '{' + ','.join(pieces) + '}'",
    ]
    exec("\n".join(lines), scope)
    writer = scope["write"]
    writer.__qualname__ = f"{'fields' if apart else 'write'}_{cls.__name__}"
    return writer


def _nfc(value: str) -> str:
    if unicodedata.is_normalized("NFC", value):
        return value if type(value) is str else str.__str__(value)
    return unicodedata.normalize("NFC", value)


def key_string(value: str) -> str:
    """Return a string as key material holds it (NFC), which is how `MaterialWalk` writes it."""
    return value if value.isascii() else _nfc(value)


def _integer(value: int) -> str:
    try:
        return int.__repr__(value)
    except ValueError:
        # Past Python's limit on integer digits (4,300 by default): no text is written, so none is keyed.
        raise _Refused(f"an integer of {value.bit_length()} bits is too long to write as JSON") from None


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise _Refused(f"{value!r} is not a JSON number")
    # One spelling per number: -0.0 is 0, and integral floats are written as integers.
    if value.is_integer() and abs(value) < _SAFE_INT:
        return int.__repr__(int(value))
    return float.__repr__(value)


def _key(key: object) -> str:
    if type(key) is str:
        return key if key.isascii() else _nfc(key)
    if isinstance(key, Enum):
        key = key.value
    if isinstance(key, str):
        return _nfc(key)
    if isinstance(key, bool) or not isinstance(key, int | float):
        raise _Refused(f"object key {key!r} is not a string")
    # pydantic sends a number key as its text (`1`, `1.5`, `1.0`), so that is what the model reads.
    if isinstance(key, int):
        return int.__repr__(int(key))
    if not math.isfinite(key):
        raise _Refused(f"object key {key!r} is not a finite number")
    return float.__repr__(float(key))


class MaterialWalk:
    """One walk over a call's objects: it numbers tool-call ids by first appearance, so links survive without ids."""

    __slots__ = ("call_ids",)

    def __init__(self) -> None:
        self.call_ids: dict[str, int] = {}

    def text(self, value: object, *, at: str = "$") -> str:
        """Return the canonical JSON of `value` as key material, refusing what has no deliberate JSON form."""
        try:
            return self._text(value)
        except _Refused as refused:
            raise CanonicalError(refused.reason, path=at + "".join(reversed(refused.path))) from None
        except RecursionError:
            raise CanonicalError("value is nested too deeply (or contains itself)", path=at) from None

    def texts(self, items: Sequence[object], *, at: str = "$") -> list[str]:
        """Return the canonical JSON of each item, in order (`at` names the sequence in an error)."""
        try:
            return [self._text(item) for item in items]
        except _Refused as refused:
            refused.path.append(f"[{self._failing_index(items)}]")
            raise CanonicalError(refused.reason, path=at + "".join(reversed(refused.path))) from None
        except RecursionError:
            raise CanonicalError("value is nested too deeply (or contains itself)", path=at) from None

    def fields(self, value: object, *, at: str = "$") -> list[tuple[str, FieldText]] | None:
        """Return the text of each field `text(value)` would write, in its order; None if `value` has no fields.

        Joining the pairs as `{"name":text,...}` (a list's items as `[a,b]`) gives exactly `text(value)` without
        its `$type` tag; the walk visits the same values in the same order, so tool-call ids number alike.
        """
        writer = _fields_writer_for(type(value))  # pyright: ignore[reportUnknownArgumentType]
        if writer is None:
            return None
        try:
            return writer(value, self)
        except _Refused as refused:
            raise CanonicalError(refused.reason, path=at + "".join(reversed(refused.path))) from None
        except RecursionError:
            raise CanonicalError("value is nested too deeply (or contains itself)", path=at) from None

    def value(self, value: object, *, at: str = "$") -> Any:
        """Return `value` as key material: JSON-shaped and already canonical."""
        return json.loads(self.text(value, at=at))

    def _text(self, value: Any) -> str:
        kind: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        if kind is str:
            return _encode_text(value if value.isascii() else _nfc(value))
        writer = _WRITERS.get(kind)
        if writer is None:
            writer = _writer_for(kind)
        return writer(value, self)

    def _sequence(self, value: Any) -> str:
        try:
            # A CachePoint marks where the provider may cache; the model reads the same content either way.
            return "[" + ",".join([self._text(item) for item in value if type(item) is not CachePoint]) + "]"
        except _Refused as refused:
            refused.path.append(f"[{self._failing_index(value)}]")
            raise

    def _items(self, value: Any) -> list[str]:
        # `_sequence` without the brackets; kept apart from it so the walk's hottest path pays no extra call.
        try:
            return [self._text(item) for item in value if type(item) is not CachePoint]
        except _Refused as refused:
            refused.path.append(f"[{self._failing_index(value)}]")
            raise

    def _converted(self, value: Any) -> str:
        return self._text(self._other(value))

    def _failing_index(self, items: Any) -> int:
        # Only on the error path: walk again item by item to say which one was refused.
        for index, item in enumerate(items):
            try:
                self._text(item)
            except _Refused:
                return index
        return -1

    def _mapping(self, value: Any) -> str:
        pairs: dict[str, str] = {}
        for key, item in value.items():
            name: str = key if type(key) is str and key.isascii() else _key(key)
            if name in pairs:
                raise _Refused("two object keys are equal once written as canonical JSON")
            try:
                # An ASCII string, the commonest value in a JSON schema or tool arguments, is written inline.
                pairs[name] = _encode_text(item) if type(item) is str and item.isascii() else self._text(item)
            except _Refused as refused:
                refused.path.append(f".{key}")
                raise
        return "{" + ",".join([_encode_text(name) + ":" + pairs[name] for name in sorted(pairs)]) + "}"

    def _special(self, obj: Any, attr: str, default: object, how: int) -> str:
        if how == _PROPERTY:
            try:
                return self._text(getattr(obj, attr))
            except ValueError:
                return "null"
        # _ENCRYPTED
        raw = getattr(obj, attr)
        if not isinstance(raw, dict) or "encrypted_content" not in raw:
            raise _Omitted
        return self._text(raw["encrypted_content"])

    def _other(self, value: Any) -> Any:
        """Convert a value that is not plainly JSON into one that is, deliberately, never by `repr`."""
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        serializer = getattr(cast(object, type(value)), "__pydantic_serializer__", None)
        if isinstance(serializer, pydantic_core.SchemaSerializer) and not isinstance(value, type):
            # A pydantic model or dataclass is dumped in Python mode, so the walk still sees its sets (and sorts
            # them); a JSON-mode dump would list them in the process's hash order.
            return serializer.to_python(value)
        if isinstance(value, bytes | bytearray | memoryview):
            # Bytes are keyed by value, never by how they are wrapped; a digest keeps the key small.
            return {"$bytes_sha256": hashlib.sha256(cast(bytes, value)).hexdigest()}
        if isinstance(value, set | frozenset):
            items = cast(set[Any], value)
            return [json.loads(text) for text in sorted(self._text(item) for item in items)]
        if isinstance(value, Mapping):
            return dict(cast(Mapping[Any, Any], value))
        if isinstance(value, list | tuple):
            return list(cast(list[Any], value))
        # Anything else (a pydantic model, a user dataclass, a datetime) is keyed as pydantic serialises it,
        # which is how pydantic-ai renders such a value for the model.
        try:
            return pydantic_core.to_jsonable_python(value, bytes_mode="base64")
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError):
            raise _Refused(
                f"{type(value).__qualname__} has no JSON form (write a CallPolicy that converts it deliberately)"
            ) from None


_WRITERS.update(
    {
        type(None): lambda _value, _walk: "null",
        bool: lambda value, _walk: "true" if value else "false",
        int: lambda value, _walk: _integer(value),
        float: lambda value, _walk: _number(value),
        list: lambda value, walk: walk._sequence(value),  # pyright: ignore[reportPrivateUsage]
        tuple: lambda value, walk: walk._sequence(value),  # pyright: ignore[reportPrivateUsage]
        dict: lambda value, walk: walk._mapping(value),  # pyright: ignore[reportPrivateUsage]
    }
)
