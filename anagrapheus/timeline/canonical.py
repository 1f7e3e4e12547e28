"""Canonical JSON and the pin key derived from it."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from anagrapheus.errors import CanonicalError, UsageError
from anagrapheus.timeline.json_value import JSONValue

__all__ = [
    "KEY_SCHEME",
    "JSONValue",
    "asking_key",
    "canonical_float",
    "canonical_integer",
    "canonical_json",
    "canonical_json_of_parsed",
    "canonical_number",
    "canonical_string",
    "canonical_value",
    "digest_key",
    "encode_normalised",
    "pin_key",
    "sha256_hex",
    "stored_json",
    "stored_json_of_parsed",
    "stored_value",
]


KEY_SCHEME = "p1"
"""Bumped whenever what goes into key material changes, so old keys miss instead of matching wrongly."""

_KIND = re.compile(r"^[a-z][a-z0-9_.\-]*$")
_SAFE_INT = 2**53
# Below this many bits an integer has fewer than 4,300 digits, Python's default limit on writing one.
_CHECKED_INT_BITS = 14_000
_encode = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
).encode
encode_normalised = _encode
"""Write a value that is already canonical (as `canonical_value` returns it) without walking it again."""


class Refused(Exception):
    """Internal to the walks of key material (here and `anagrapheus.provider.keying`): the reason and reversed path."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []


def _text(value: str) -> str:
    # ASCII is always NFC and always UTF-8; the check is the common fast path.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused("string holds a lone surrogate, which UTF-8 cannot encode") from None
        if not unicodedata.is_normalized("NFC", value):
            return unicodedata.normalize("NFC", value)
    return value if type(value) is str else str.__str__(value)


def _utf8(value: str) -> str:
    # A stored string keeps its code points: only one UTF-8 cannot write is refused. NFC is the key's, never the
    # answer's.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused("string holds a lone surrogate, which UTF-8 cannot encode") from None
    return value if type(value) is str else str.__str__(value)


def _spelled(number: float) -> int | float:
    # One spelling per number: -0.0 is 0, and integral floats are written as integers.
    if number.is_integer() and abs(number) < _SAFE_INT:
        return int(number)
    return number


def _normalise(value: object, text: Callable[[str], str] = _text) -> Any:
    kind = type(value)
    if kind is str:
        return text(value)  # pyright: ignore[reportArgumentType]
    if kind is int:
        integer: int = value  # pyright: ignore[reportAssignmentType]
        if integer.bit_length() > _CHECKED_INT_BITS:
            _integer_text(integer)
        return value
    if value is None or kind is bool:
        return value
    if kind is float:
        number: float = value  # pyright: ignore[reportAssignmentType]
        if not math.isfinite(number):
            raise Refused(f"{number!r} is not a JSON number")
        return _spelled(number)
    if kind is dict:
        mapping: dict[Any, Any] = value  # pyright: ignore[reportAssignmentType]
        out: dict[str, Any] = {}
        for k, v in mapping.items():
            if type(k) is not str:
                raise Refused(f"object key {k!r} is not a string")
            try:
                out[text(k)] = _normalise(v, text)
            except Refused as refused:
                refused.path.append(f".{k}")
                raise
        if len(out) != len(mapping):
            raise Refused("two object keys are equal once NFC-normalised")
        return out
    if kind is list or kind is tuple:
        sequence: list[Any] = value  # pyright: ignore[reportAssignmentType]
        items: list[Any] = []
        for i, v in enumerate(sequence):
            try:
                items.append(_normalise(v, text))
            except Refused as refused:
                refused.path.append(f"[{i}]")
                raise
        return items
    if isinstance(value, str):
        # The characters it holds, as the walk of key material and every JSON encoder write them: its own
        # `__str__` (a `(str, Enum)` member's `Cls.NAME`, a masking wrapper's `***`) could make two values one.
        return text(str.__str__(value))
    if isinstance(value, int):
        return _normalise(int(value), text)
    if isinstance(value, float):
        return _normalise(float(value), text)
    raise Refused(f"{kind.__qualname__} is not a JSON type (convert it deliberately before pinning)")


def _integer_text(number: int) -> str:
    try:
        return int.__repr__(number)
    except ValueError:
        # Past Python's limit on integer digits (4,300 by default): no text is written, so none is keyed.
        raise Refused(f"an integer of {number.bit_length()} bits is too long to write as JSON") from None


def _refusing(normalise: Any, value: Any) -> Any:
    try:
        return normalise(value)
    except Refused as refused:
        raise CanonicalError(refused.reason, path="$") from None


def canonical_string(value: str) -> str:
    """Return a string as canonical JSON holds it (NFC), or raise `CanonicalError` if UTF-8 cannot encode it."""
    return value if type(value) is str and value.isascii() else _refusing(_text, value)


def canonical_integer(value: int) -> int:
    """Return an integer as canonical JSON holds it, or raise `CanonicalError` if it is too long to write."""
    if value.bit_length() > _CHECKED_INT_BITS:
        _refusing(_integer_text, value)
    return int(value)


def canonical_float(value: float) -> int | float:
    """Return a float spelled as canonical JSON writes it (integral ones as integers), refusing NaN and infinities."""
    if not math.isfinite(value):
        raise CanonicalError(f"{value!r} is not a JSON number", path="$")
    return _spelled(float(value))


def canonical_value(value: object) -> JSONValue:
    """Return `value` normalised for canonical JSON, or raise `CanonicalError` naming where it is not JSON."""
    try:
        return _normalise(value)
    except Refused as refused:
        raise CanonicalError(refused.reason, path="$" + "".join(reversed(refused.path))) from None
    except RecursionError:
        raise CanonicalError("value is nested too deeply (or contains itself)", path="$") from None


def stored_value(value: object) -> JSONValue:
    """Return `value` as the log stores it: `canonical_value` without NFC, so every string keeps its code points.

    A key is computed from NFC text, so two spellings of one text ask the same thing; a stored answer is given
    back as it was drawn (U+F900 stays itself, where NFC makes it U+8C48). Refuses as `canonical_value` does.
    """
    try:
        return _normalise(value, _utf8)
    except Refused as refused:
        raise CanonicalError(refused.reason, path="$" + "".join(reversed(refused.path))) from None
    except RecursionError:
        raise CanonicalError("value is nested too deeply (or contains itself)", path="$") from None


def stored_json(value: object) -> str:
    """Write `value` as the log stores it: sorted keys, compact, one spelling per number, strings as they are."""
    return _encode(stored_value(value))


def stored_json_of_parsed(value: JSONValue) -> str:
    """`stored_json` of a value `json.loads` returned with `parse_float=canonical_number`, at the C encoder's speed."""
    # As `canonical_json_of_parsed`, less the NFC check: only a refusal sends the value through the walk.
    try:
        text = _encode(value)
        if not text.isascii():
            text.encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError: a lone surrogate
        return stored_json(value)
    return text


def canonical_json(value: object) -> str:
    """Write `value` as canonical JSON: sorted keys, compact, NFC strings, one spelling per number."""
    return _encode(canonical_value(value))


def canonical_number(literal: str) -> int | float:
    """Read a JSON number literal with a fraction or exponent as `canonical_value` spells it (`parse_float=`)."""
    # A non-finite one (1e400) stays a float, for the encoder to refuse.
    return _spelled(float(literal))


def canonical_json_of_parsed(value: JSONValue) -> str:
    """`canonical_json` of a value `json.loads` returned with `parse_float=canonical_number`, at the C encoder's speed.

    Such a value holds only JSON's own types, with numbers already spelled canonically, so the C
    encoder writes it canonically unless a string is not NFC or not UTF-8: only then is it walked.
    """
    # A value written here skips `_normalise`: a refusal rule added there must be checked here too.
    # tests/timeline/test_canonical.py holds the two equal, refusals included, over generated JSON.
    try:
        text = _encode(value)
    except (ValueError, RecursionError):
        return canonical_json(value)  # a non-finite number, an integer too long, too deep: refused, with its path
    if text.isascii():
        return text
    # NFC holds for the whole text exactly when it holds for every string in it: JSON's own
    # punctuation is ASCII and never combines with a neighbour.
    if not unicodedata.is_normalized("NFC", text):
        return canonical_json(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return canonical_json(value)  # a lone surrogate: refused, with its path
    return text


def pin_key(
    kind: str, material: object, *, walk: Callable[[object], Any] = canonical_value, normalised: bool = False
) -> str:
    """Return `p1:<kind>:<sha256 of the canonical JSON of material>`, its material read by `walk`.

    The default walk takes JSON values (`canonical_value`); the provider's walk of key material
    (`anagrapheus.provider.keying.keys.walked`, which every key of a call uses) also takes what a tool call's arguments
    may hold (sets, enums, bytes, pydantic models) and writes every JSON value as the default does. What has no
    JSON form raises `CanonicalError` naming its path. With `normalised`, `material` is taken as already walked
    (canonical JSON values) and is written without being walked again.
    """
    text = _encode(material if normalised else walk(material))
    return digest_key(kind, sha256_hex(text))


# Copied, never updated: a copy skips the look-up of the algorithm that `hashlib.sha256()` makes in OpenSSL each time.
_EMPTY_SHA256 = hashlib.sha256()


def sha256_empty() -> Any:
    """A new sha256 hash object, as `hashlib.sha256()` returns, copied from an empty one (cheaper than a new one)."""
    return _EMPTY_SHA256.copy()


def sha256_hex(text: str) -> str:
    """`hashlib.sha256(text.encode()).hexdigest()`, the digest of a key's canonical text."""
    digest = _EMPTY_SHA256.copy()
    digest.update(text.encode())
    return digest.hexdigest()


def digest_key(kind: str, digest: str) -> str:
    """Return `p1:<kind>:<digest>` for the hex sha256 `digest` of material's canonical JSON, as `pin_key` hashes it.

    For material whose text is hashed piece by piece, as the kept messages of a conversation are.
    """
    if not _KIND.match(kind):
        raise UsageError(f"pin kind {kind!r} must be lowercase letters, digits, '_', '.' or '-'")
    return f"{KEY_SCHEME}:{kind}:{digest}"


# Typed: a place given as True is keyed `true`, apart from 1. Cached because a replay's look-ups and the asking's own
# key share their first parts: each is hashed once.
@functools.lru_cache(maxsize=4096, typed=True)
def asking_key(kind: str, asked: str, *, twin: int = 0, run: int | str = 0, occurrence: int = 1) -> str:
    """The key of one asking: `asked` (the key of what was asked) as its `twin`, run and `occurrence` ask it.

    What was asked is keyed once (`pin_key`; a tool call's caller is part of its material). A first asking, a
    single call and a unit's first run keep that key, so recordings made before each rule keep theirs. Otherwise
    each part re-keys the key before it, in this order, as recordings hold them: the `twin`th call identical to
    an earlier one in one model response, `{"twin_of": key, "twin": twin}`; the run at place `run` in its unit
    (a position, or a run id as given), `{"run_of": key, "run": run}`; the `occurrence`th asking in that run,
    `{"occurrence_of": key, "occurrence": occurrence}`. Each is written as it is (a key is ASCII, a place an
    integer or a run's id), never walked.
    """
    key = asked
    if twin != 0:
        key = _rekeyed(kind, "twin", twin, key)
    if run != 0:
        key = _rekeyed(kind, "run", run, key)
    if occurrence != 1:
        key = _rekeyed(kind, "occurrence", occurrence, key)
    return key


# Text JSON writes as itself between quotes: printable ASCII but for the quote and the backslash (every key is).
_UNESCAPED = re.compile(r"[ !#-\[\]-~]*")


def _rekeyed(kind: str, name: str, at: object, key: str) -> str:
    """`pin_key(kind, {name + "_of": key, name: at}, normalised=True)`; its text written directly where it can be.

    The two names sort as `name` then `name_of`; an `int` (never a `bool`, written `true`) is written as `str` writes
    it, and a key of plain characters between quotes: what the encoder writes. Anything else goes to the encoder.
    """
    if type(at) is int and _UNESCAPED.fullmatch(key):
        text = f'{{"{name}":{at},"{name}_of":"{key}"}}'
    else:
        text = _encode({f"{name}_of": key, name: at})
    return digest_key(kind, sha256_hex(text))
