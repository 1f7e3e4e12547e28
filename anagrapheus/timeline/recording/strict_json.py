"""The strict JSON of a recording line: one meaning per line, numbers spelled as canonical JSON spells them."""

from __future__ import annotations

import json
from typing import Any

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.canonical import canonical_number

__all__ = ["parse_object"]


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields = dict(pairs)
    if len(fields) != len(pairs):
        # JSON leaves a repeated name undefined and Python keeps the last: a line must say one thing.
        seen: set[str] = set()
        repeated = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise ValueError(f"the name {repeated!r} appears twice in one object")
    return fields


# Numbers are read as canonical JSON spells them, so a payload is written back by the C encoder. One decoder
# for every line: json.loads with hooks would build a new one per call.
_decode = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_refuse_constant, parse_float=canonical_number
).decode


def parse_object(text: str, *, where: str, line: int) -> dict[str, Any]:
    """Parse one line as a JSON object, refusing anything else with a `RecordingError` naming the file and line."""
    try:
        value = _decode(text)
    except ValueError as e:
        raise RecordingError(f"line is not valid JSON ({e})", path=where, line=line) from None
    except RecursionError:
        raise RecordingError("line is nested too deeply to read", path=where, line=line) from None
    if not isinstance(value, dict):
        raise RecordingError("line is not a JSON object", path=where, line=line)
    return value  # pyright: ignore[reportUnknownVariableType]
