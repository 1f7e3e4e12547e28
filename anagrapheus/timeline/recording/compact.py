"""A pin's or a run's inputs' line as a version 4 recording writes it: without the fields every such line holds alike.

Each `pin_promoted` (event version 2) and `run_inputs` (event version 1) line of a recording repeats what a reader
knows without being told: no causation, the built-in namespace, the event version, the payload's `unit_id` (the
line's correlation id) and, for a pin, one attempt, not failed, no fingerprint (issue #43). A version 4 recording
writes such a line without them (and a pin's without its type): `{"correlation_id":...,"created_at":...,
"event_id":...,"payload":{...},"seq":...}`. A line lacking envelope fields is read as one of those, each field put
back as it was; any other line is written and read whole. Nothing else is left out, so a line stands alone: a reader
of one line (a key looked up through the index) reads it as a reader of the whole file does.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PinPromoted, RunInputs

__all__ = ["COMPACT_VERSIONS", "compact_line", "restore_compact"]

COMPACT_VERSIONS: dict[str, int] = {"pin_promoted": 2, "run_inputs": 1}
"""The event version of each type a compact line may hold, fixed by the recording format (not by the code's
current event versions, which may move on: a line of another version is written whole)."""

_PIN = "pin_promoted"
_DELTA = "fingerprint_delta"
_ELIDED = frozenset(("causation_id", "namespace", "schema_version"))
_ELIDED_PIN = _ELIDED | {"type"}
_HEAD = '{"causation_id":null,"correlation_id":'
_STRING = r'"(?:[^"\\]|\\.)*"'
_MIDDLE = re.compile(
    rf'(?P<times>,"created_at":{_STRING},"event_id":{_STRING}),"namespace":"{BUILTIN_NAMESPACE}","payload":\{{'
)
_TAIL = re.compile(
    rf',"unit_id":(?P<unit>{_STRING})\}},"schema_version":(?P<version>\d+),"seq":(?P<seq>\d+),'
    rf'"type":"(?P<type>{_PIN}|{RunInputs.event_type})"\}}\Z'
)
_PIN_DEFAULTS = '"attempts":1,"failed":false,'
_NO_FINGERPRINT = '"fingerprint":null,'
_FINGERPRINTS = (_PIN_DEFAULTS + '"fingerprint":', _PIN_DEFAULTS + '"fingerprint_delta":')
_decode_at = json.JSONDecoder().raw_decode

assert PinPromoted.event_type == _PIN  # the format names the type: a rename would be a new format


def compact_line(text: str) -> str:
    """`text`, a canonical event line, without what every pin or run's inputs line holds alike; else as it is."""
    if not text.startswith(_HEAD):
        return text
    try:
        unit, after_unit = _decode_at(text, len(_HEAD))
    except ValueError:
        return text
    middle = _MIDDLE.match(text, after_unit)
    if middle is None or not isinstance(unit, str):
        return text
    tail = _TAIL.search(text, max(middle.end(), len(text) - 256))
    unit_text = text[len(_HEAD) : after_unit]
    if tail is None or tail["unit"] != unit_text or tail["version"] != str(COMPACT_VERSIONS[tail["type"]]):
        return text
    body = text[middle.end() : tail.start()]
    kind = tail["type"]
    if kind == _PIN:
        # Only a pin of one attempt, not failed, whose fingerprint (or delta) follows: the reader puts those back.
        if not body.startswith(_FINGERPRINTS):
            return text
        body = body[len(_PIN_DEFAULTS) :]
        if body.startswith(_NO_FINGERPRINT):
            body = body[len(_NO_FINGERPRINT) :]
    named = "" if kind == _PIN else f',"type":"{kind}"'
    return f'{{"correlation_id":{unit_text}{middle["times"]},"payload":{{{body}}},"seq":{tail["seq"]}{named}}}'


def restore_compact(fields: dict[str, Any], missing: frozenset[str], *, where: str, line: int) -> None:
    """Put back, in place, the fields a compact line leaves out (`missing`: the envelope's), or refuse the line."""
    kind: object = fields.get("type", _PIN)
    if missing != (_ELIDED_PIN if "type" in missing else _ELIDED) or not isinstance(kind, str):
        raise RecordingError(f"not a stored event: missing {sorted(missing)}", path=where, line=line)
    if kind not in COMPACT_VERSIONS:
        raise RecordingError(f"not a stored event: missing {sorted(missing)}", path=where, line=line)
    payload, unit = fields.get("payload"), fields.get("correlation_id")
    if not isinstance(payload, dict) or not isinstance(unit, str):
        raise RecordingError("a compact line must hold a payload object and a correlation id", path=where, line=line)
    payload = cast(dict[str, Any], payload)
    fields["causation_id"] = None
    fields["namespace"] = BUILTIN_NAMESPACE
    fields["type"] = kind
    fields["schema_version"] = COMPACT_VERSIONS[kind]
    # A field the line holds after all (written by hand: the seal names the edit) is kept as it holds it.
    payload.setdefault("unit_id", unit)
    if kind == _PIN:
        payload.setdefault("attempts", 1)
        payload.setdefault("failed", False)
        if "fingerprint" not in payload and _DELTA not in payload:
            payload["fingerprint"] = None
