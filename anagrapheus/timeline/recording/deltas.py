"""A pin's fingerprint as a recording line holds it: what changed since the last one of its kind in its unit.

A conversation's n-th model call is fingerprinted with one digest per message of its request, so a fingerprint
written whole costs every earlier message again and the recording grows with the square of the conversation
(issue #43). In memory, in a log and in every event a reader returns, a fingerprint is whole. Only the recording
file writes a pin's fingerprint as a delta, `"fingerprint_delta": {"set": {...}, "drop": [...]}` in place of
`"fingerprint"`: the entries that differ from (or are not in) the last fingerprint of a pin of the same kind in the
same unit (`unit_id`), and the names of those that are gone. Its base is a line of the same unit in the same run of
that unit's pin lines: a pin of another unit in between ends the run, and the next pin of each kind is written whole.
So a read of one unit's lines (`view --unit`, the index) expands it as a read of the whole file does, and a reader
holds the bases of one unit only, however many units the file holds. Only a pin of the current
event version is a base or a delta: an older one (read through upcasts) is written whole and left unread. A delta
is written only where it is shorter than the whole fingerprint, and only in a version 3 (or later) recording,
which an older reader refuses by its version rather than read a delta as a fingerprint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, cast

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.canonical import encode_normalised
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PinPromoted
from anagrapheus.timeline.provenance import stamping_or_default
from anagrapheus.timeline.recording.header import FINGERPRINT_DELTAS_VERSION, RECORDING_VERSION
from anagrapheus.timeline.recording.responses import ResponseResolver
from anagrapheus.timeline.recording.strict_json import parse_object

__all__ = [
    "DELTA_FIELD",
    "FingerprintDeltas",
    "FingerprintExpander",
    "expanded",
    "holds_deltas",
    "holds_references",
]

DELTA_FIELD = "fingerprint_delta"
"""The payload field of a pin line whose fingerprint is written as a delta (it sorts where `fingerprint` did)."""

_LONGER = len(DELTA_FIELD) - len("fingerprint")

_SET = "set"
_DROP = "drop"
_PARTS = frozenset((_SET, _DROP))
_NO_ENTRIES: dict[str, str] = {}
_NO_NAMES: list[str] = []
_STR = {str}
_ABSENT = object()
_PIN_TYPE = PinPromoted.event_type
_CURRENT = PinPromoted.schema_version

Bases = dict[tuple[str, str], dict[str, str]]
"""The last whole fingerprint of each (unit, kind) in the current run of one unit's pins: all either side holds."""


def _is_pin(fields: dict[str, Any]) -> bool:
    return fields["namespace"] == BUILTIN_NAMESPACE and fields["type"] == PinPromoted.event_type


def _scope(payload: dict[str, Any]) -> tuple[str, str] | None:
    """The (unit, kind) a pin's fingerprint is a base within; None when its payload names no such pair."""
    unit, kind = payload.get("unit_id"), payload.get("kind")
    return (unit, kind) if isinstance(unit, str) and isinstance(kind, str) else None


def _strings(values: Iterable[object]) -> bool:
    """Whether every one of `values` is a string (the types gathered at C speed: a load checks every fingerprint)."""
    return set(map(type, values)) <= _STR


def _flat(fingerprint: object) -> dict[str, str] | None:
    """`fingerprint` when it is an object of strings (what a base or a delta's entries must be); else None."""
    if type(fingerprint) is not dict:
        return None
    entries = cast(dict[object, object], fingerprint)
    return cast(dict[str, str], entries) if _strings(entries.values()) else None


class FingerprintDeltas:
    """The writer's side: each pin line's fingerprint written as a delta against its base, where that is shorter."""

    def __init__(self) -> None:
        self._bases: Bases = {}
        self._unit: str | None = None
        self.written = False
        """Whether any line so far was written with a delta (the recording is then version 3)."""

    def line(self, text: str) -> str:
        """The line `text` (a whole event line, as written and searched for secrets) as the recording holds it.

        The delta is taken from `text` as it stands, redacted or not, so a reader that expands it gets `text` back.
        """
        # Only a current pin's fingerprint is a base or a delta: any other line is written as it is, unread.
        tail = _PIN_TAIL.search(text, max(0, len(text) - 128))
        if tail is None or '"fingerprint":{' not in text:
            return text
        found = _located(text, tail.start())
        if found is None:
            return self._parsed(text)
        start, end, scope, whole = found
        delta = self._delta(scope, whole)
        if delta is None:
            return text
        # The field sorts where `fingerprint` did, so the line stays canonical with the rest of it as it was.
        return f'{text[:start]}"{DELTA_FIELD}":{encode_normalised(delta)}{text[end:]}'

    def _parsed(self, text: str) -> str:
        """`line` for a line not laid out as `_located` reads a current pin: parsed whole."""
        fields = parse_object(text, where="<writing>", line=0)
        if not _is_pin(fields) or fields["schema_version"] != PinPromoted.schema_version:
            return text
        payload = cast(dict[str, Any], fields["payload"])
        scope = _scope(payload)
        whole = _flat(payload.get("fingerprint"))
        if scope is None or whole is None:
            return text
        delta = self._delta(scope, whole)
        if delta is None:
            return text
        del payload["fingerprint"]
        payload[DELTA_FIELD] = delta
        # `text` is the encoder's own writing of what it parsed back, so the rest of the line keeps its bytes.
        return encode_normalised(fields)

    def _delta(self, scope: tuple[str, str], whole: dict[str, str]) -> dict[str, Any] | None:
        """What `whole` changes in its scope's base (which it then becomes); None to write it whole."""
        if scope[0] != self._unit:
            # Another unit's pin ended the run: no base before it is used again (the reader drops them too).
            self._bases.clear()
            self._unit = scope[0]
        base = self._bases.get(scope)
        self._bases[scope] = whole
        if base is None:
            return None
        delta: dict[str, Any] = {}
        changed = {name: digest for name, digest in whole.items() if base.get(name) != digest}
        if len(changed) == len(whole):
            return None  # every entry again, and more: never shorter
        dropped = sorted(name for name in base if name not in whole)
        if changed:
            delta[_SET] = changed
        if dropped:
            delta[_DROP] = dropped
        if len(encode_normalised(delta)) + _LONGER >= len(encode_normalised(whole)):
            return None
        self.written = True
        return delta


# A current pin's line as the writer writes it (sorted keys, compact): its envelope's scalars, then the payload's
# `attempts`, `failed` and `fingerprint`, ..., `unit_id`, then the envelope's last three. A quote inside a string is
# escaped, so neither pattern can match inside one; a line laid out otherwise is parsed whole.
_PIN_HEAD = re.compile(
    r',"namespace":"anagrapheus","payload":\{"attempts":-?\d+,"failed":(?:true|false),"fingerprint":\{'
)
_PIN_TAIL = re.compile(
    rf'\}},"schema_version":{PinPromoted.schema_version},"seq":\d+,"type":"{PinPromoted.event_type}"\}}\Z'
)
_decode_at = json.JSONDecoder().raw_decode


def _located(text: str, tail: int) -> tuple[int, int, tuple[str, str], dict[str, str]] | None:
    """Where a current pin line's `"fingerprint":{...}` starts and ends, its (unit, kind) and fingerprint.

    Read from those fields alone, not the whole line (whose result may be most of it); None for any other layout.
    `tail` is where `_PIN_TAIL` matched: the payload's end.
    """
    head = _PIN_HEAD.search(text)
    if head is None:
        return None
    try:
        fingerprint, end = _decode_at(text, head.end() - 1)
        if not text.startswith(',"key":', end):
            return None
        _, after_key = _decode_at(text, end + len(',"key":'))
        if not text.startswith(',"kind":', after_key):
            return None
        kind, _ = _decode_at(text, after_key + len(',"kind":'))
        at = text.rfind(',"unit_id":', end, tail)
        unit, unit_end = _decode_at(text, at + len(',"unit_id":'))
    except ValueError:
        return None
    whole = _flat(fingerprint)
    if at < 0 or unit_end != tail or whole is None or not isinstance(unit, str) or not isinstance(kind, str):
        return None
    return head.end() - len('"fingerprint":{'), end, (unit, kind), whole


class FingerprintExpander:
    """The reader's side: each pin line's fingerprint made whole again, in file order, holding only the bases."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._bases: Bases = {}
        self._unit: str | None = None

    def _in_run(self, unit: str) -> Bases:
        """The bases of the run of `unit`'s pin lines this line belongs to: none held once another unit's pin came."""
        if unit != self._unit:
            self._bases.clear()
            self._unit = unit
        return self._bases

    def expand(self, number: int, fields: dict[str, Any]) -> None:
        """Make line `number`'s fingerprint whole in `fields`, in place, or refuse a delta with nothing to apply to."""
        # Every line of a replay's load passes here: the common cases first, each in as few steps as it takes.
        if fields["type"] != _PIN_TYPE or fields["namespace"] != BUILTIN_NAMESPACE:
            return
        payload = cast(dict[str, Any], fields["payload"])
        delta: object = payload.pop(DELTA_FIELD, _ABSENT)
        current = fields["schema_version"] == _CURRENT
        if delta is _ABSENT:
            whole = _flat(payload.get("fingerprint"))
            scope = _scope(payload)
            if whole is not None and scope is not None and current:
                self._in_run(scope[0])[scope] = whole
            return
        if "fingerprint" in payload:
            self._refuse(number, f"a pin holds both fingerprint and {DELTA_FIELD}")
        if not current:
            self._refuse(number, f"{DELTA_FIELD} on a pin of schema version {fields['schema_version']!r}")
        scope = _scope(payload)
        base = None if scope is None else self._in_run(scope[0]).get(scope)
        if scope is None or base is None:
            self._refuse(
                number,
                f"{DELTA_FIELD} with no earlier fingerprint of its kind in its run of its unit's pins to apply to"
                " (a line deleted or moved?)",
            )
        changed, dropped = self._parts(number, delta)
        if dropped:
            gone = frozenset(dropped)
            if not gone <= base.keys():
                self._refuse(number, f"{DELTA_FIELD} drops {sorted(gone - base.keys())}, which its base does not hold")
            whole = {name: digest for name, digest in base.items() if name not in gone}
        else:
            whole = base.copy()
        whole.update(changed)
        payload["fingerprint"] = self._bases[scope] = whole

    def _parts(self, number: int, delta: object) -> tuple[dict[str, str], list[str]]:
        """The entries a delta sets and the names it drops, refusing any other shape."""
        parts = cast(dict[str, object], delta) if type(delta) is dict else None
        if parts is None or not parts.keys() <= _PARTS:
            self._refuse(number, f"{DELTA_FIELD} must be an object of {_SET!r} and {_DROP!r}")
        changed = _flat(parts.get(_SET, _NO_ENTRIES))
        dropped: object = parts.get(_DROP, _NO_NAMES)
        if changed is None:
            self._refuse(number, f"{DELTA_FIELD}.{_SET} must be an object of strings")
        if type(dropped) is not list or not _strings(cast(list[object], dropped)):
            self._refuse(number, f"{DELTA_FIELD}.{_DROP} must be a list of strings")
        return changed, cast(list[str], dropped)

    def _refuse(self, number: int, message: str) -> NoReturn:
        raise RecordingError(message, path=self._where, line=number)


def expanded(entries: Iterator[tuple[int, dict[str, Any]]], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each checked line's number and fields, every pin's fingerprint and every run's history whole.

    See `FingerprintExpander` and `responses.ResponseResolver`.
    """
    expander = FingerprintExpander(where)
    resolver = ResponseResolver(where, stamping_or_default(None).stamped_fields)
    for number, fields in entries:
        expander.expand(number, fields)
        resolver.resolve(number, fields)
        yield number, fields


def holds_deltas(path: Path) -> bool:
    """Whether the recording at `path` is of a version that may hold deltas; a file that cannot tell, as if so.

    What rewrites a file as it stands (`reseal`, `upcast`) keeps its form: one an older reader reads stays so.
    """
    version = _version(path)
    return version is None or version in (FINGERPRINT_DELTAS_VERSION, RECORDING_VERSION)


def holds_references(path: Path) -> bool:
    """Whether the recording at `path` is of the version that may refer to pinned responses; unknown: as if so."""
    version = _version(path)
    return version is None or version == RECORDING_VERSION


def _version(path: Path) -> object:
    """The version the header of the recording at `path` names; None when it cannot be read."""
    try:
        with path.open("rb") as file:
            header: object = json.loads(file.readline())
    except (OSError, ValueError):
        return None
    return cast(dict[str, Any], header).get("version") if isinstance(header, dict) else None
