"""Ordered JSON: how a pin keeps a value exactly as it was drawn, inside a log that writes canonical JSON.

The log writes every payload as canonical JSON (keys sorted, integral floats as integers, strings in
NFC). That is right for keys, and wrong for an answer whose bytes matter: a provider's response comes
back with its `provider_details`, usage details and tool arguments in another key order, and a
log-probability of `0.0` as `0`. Such an answer is pinned as `{"ordered_json": text}`, the value's JSON
text as written, which canonical JSON keeps byte for byte.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Callable
from typing import Any

from pydantic_core import from_json

from anagrapheus.errors import PinResultError
from anagrapheus.timeline.canonical import JSONValue

__all__ = ["ORDERED_FIELD", "ordered", "ordered_json", "parsed_json", "read_ordered"]

ORDERED_FIELD = "ordered_json"
"""The one field of a value pinned as ordered JSON text."""


def ordered_json(value: object) -> str:
    """Write JSON `value` as compact text in its own key order, every float spelled as Python writes it.

    Non-ASCII text is kept readable unless it is not NFC (canonical JSON would normalise it) or not
    UTF-8 (a lone surrogate); then it is escaped, so the text survives the log unchanged.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if not text.isascii():
        try:
            text.encode("utf-8")
            readable = unicodedata.is_normalized("NFC", text)
        except UnicodeEncodeError:
            readable = False
        if not readable:
            text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text


_PARSER_DIGITS = 4300
"""The most digits pydantic-core's parser reads in an integer (Python's default limit on `int` from text)."""


def parsed_json(text: str, *, loads: Callable[[str], Any] = json.loads, allow_inf_nan: bool = True) -> Any:
    """`loads(text)` (`json.loads`), parsed by pydantic-core where it can: the same values, in about half the time.

    Every text pydantic-core's parser accepts, it reads as `json.loads` does (floats bit for bit, integers of any
    length up to the digit limit, escapes and surrogate pairs, key order, a repeated key's last value; tested
    against `json.loads`). What it refuses (a lone surrogate, nesting past 200 levels, an integer past 4,300
    digits, a `str` that is not UTF-8) is read by `loads`, which accepts it or raises as it always did. A `loads`
    that refuses NaN and the infinities is asked with `allow_inf_nan=False`, so the parser refuses them too.
    """
    # Python's digit limit can be lowered below the parser's: then `loads` alone says what is too long.
    limit = sys.get_int_max_str_digits()
    if limit == 0 or limit >= _PARSER_DIGITS:
        try:
            return from_json(text, allow_inf_nan=allow_inf_nan)
        except (ValueError, TypeError):
            pass
    return loads(text)


def ordered(value: object) -> JSONValue:
    """Return `value` as a pin keeps it byte for byte: `{"ordered_json": text}`."""
    return {ORDERED_FIELD: ordered_json(value)}


def read_ordered(raw: JSONValue) -> JSONValue:
    """The value a pin holds: parsed from its ordered text, or, as pins before it held it, the raw value itself.

    A marker beside the text (a key starting with `$`, as a tool pin's `$anagrapheus.tool_result`) says how
    the parsed value is to be read; it is left to the reader that knows it.
    """
    if (
        isinstance(raw, dict)
        and isinstance(text := raw.get(ORDERED_FIELD), str)
        # (One name, the text's own, is the common case: no generator for it.)
        and (len(raw) == 1 or all(name == ORDERED_FIELD or name.startswith("$") for name in raw))
    ):
        try:
            return parsed_json(text)
        except ValueError as e:
            raise PinResultError(f"a pin's {ORDERED_FIELD} is not JSON ({e})") from e
    return raw
