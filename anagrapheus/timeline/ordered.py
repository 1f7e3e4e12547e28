"""Ordered JSON: how a pin keeps a value exactly as it was drawn, inside a log that writes canonical JSON.

The log writes every payload as canonical JSON (keys sorted, integral floats as integers, strings in
NFC). That is right for keys, and wrong for an answer whose bytes matter: a provider's response comes
back with its `provider_details`, usage details and tool arguments in another key order, and a
log-probability of `0.0` as `0`. Such an answer is pinned as `{"ordered_json": text}`, the value's JSON
text as written, which canonical JSON keeps byte for byte.
"""

from __future__ import annotations

import json
import unicodedata

from anagrapheus.errors import PinResultError
from anagrapheus.timeline.canonical import JSONValue

__all__ = ["ORDERED_FIELD", "ordered", "ordered_json", "read_ordered"]

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
        and all(name == ORDERED_FIELD or name.startswith("$") for name in raw)
    ):
        try:
            return json.loads(text)  # pyright: ignore[reportAny]
        except ValueError as e:
            raise PinResultError(f"a pin's {ORDERED_FIELD} is not JSON ({e})") from e
    return raw
