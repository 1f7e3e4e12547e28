"""A recording's index, a file beside it: where each unit's lines and each pin's key sit, so a reader seeks, not reads.

`write_recording` writes `run.jsonl.index` beside `run.jsonl` (for recordings of `INDEX_MIN_EVENTS` events or more,
or when asked). The recording itself is unchanged, so a reader that knows no index reads it as before. The index is
tied to the recording by the recording's size and the sha256 of its header line (which holds the seal, a digest of
every line), and to itself by a trailing sha256; every line read through it is checked against the seal before it
is believed. An index that disagrees with its recording is ignored with a `RecordingIndexWarning`, and the whole
file is read as it would be without one: the index changes how fast an answer comes, never what it is.

The file: one JSON line (what the index covers: the recording's size, its header's length and digest, where the seal
sits in the header, each unit's rows, the keys' count, the units answering and the ambiguous keys), then each unit's
line rows (`<QII4s`: offset, length, line number, the seal's short digest of the line), then one row per distinct pin
key sorted by the key's digest (`<16sQII4s`: the key's blake2b-128, then the row of the line that pins it first),
then the sha256 of all that. The index is written only for a recording whose lines match its seal, so a line that
matches its row's digest matches the seal.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from struct import Struct
from typing import Any, cast

from anagrapheus.errors import AnagrapheusError, RecordingError
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.durable_file import replace_durably
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, EventTypeRegistry, PinPromoted, PinText, is_current_pin
from anagrapheus.timeline.recording.deltas import FingerprintExpander
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES, checked_entries
from anagrapheus.timeline.recording.seal import SEAL_DETAIL, read_seal
from anagrapheus.timeline.recording.strict_json import parse_object

__all__ = [
    "INDEX_FORMAT",
    "INDEX_MIN_EVENTS",
    "INDEX_SUFFIX",
    "IndexMismatch",
    "RecordingIndex",
    "RecordingIndexWarning",
    "Row",
    "build_index",
    "index_path",
    "keep_index",
    "write_index",
]

INDEX_FORMAT = "anagrapheus.recording-index"
"""The format marker on an index's first line."""

INDEX_VERSION = 1
"""The index format this code writes and reads; another version is ignored (the recording is read whole)."""

INDEX_SUFFIX = ".index"
"""What an index's name adds to its recording's: `run.jsonl.index`."""

INDEX_MIN_EVENTS = 10_000
"""`write_recording(index=None)` writes an index for a recording of this many events or more; a smaller one reads
whole in well under a second, and a committed fixture keeps to one file."""

_UNIT_ROW = Struct("<QII4s")
_KEY_ROW = Struct("<16sQII4s")
_DIGEST = 32


class RecordingIndexWarning(UserWarning):
    """An index beside a recording disagrees with it (or cannot be read): it is ignored and the file read whole."""


class IndexMismatch(AnagrapheusError):
    """A line read through an index is not the line the index promised; the caller reads the file whole instead."""


@dataclass(frozen=True, slots=True)
class Row:
    """Where one line sits: its byte offset and length (without the newline), its line number, its sealed digest."""

    offset: int
    length: int
    line: int
    digest: bytes
    """The first 4 bytes of the line's sha256, as the seal holds them (8 hex digits)."""


def index_path(recording: Path) -> Path:
    """The index beside `recording`: its name with `.index` added."""
    return recording.with_name(recording.name + INDEX_SUFFIX)


def _key_digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def _answer_digest(pin: PinText) -> bytes:
    """What a pin answers (its result's text and whether it failed), as a digest to compare with another's."""
    return hashlib.blake2b(pin.raw_text.encode() + (b"\x01" if pin.failed else b"\x00"), digest_size=16).digest()


def _sealed_unit(unit: str | None) -> str | None:
    # As the seal names a unit: NFC.
    return None if unit is None else unicodedata.normalize("NFC", unit)


def _shown_unit(fields: dict[str, Any]) -> str | None:
    """The unit `--unit` names a line by: a built-in event's `unit_id`, else its correlation id (`cli.sources`)."""
    if fields["namespace"] == BUILTIN_NAMESPACE:
        unit = fields["payload"].get("unit_id")
        return unit if isinstance(unit, str) else None
    return fields["correlation_id"]


def build_index(header: str, lines: Sequence[str], *, where: str) -> bytes | None:
    """The index of a recording whose header line is `header` and event lines `lines` (texts without newlines).

    Every line is read back as the reader reads it (`checked_entries`, and each pin as `stream_pins` reads it),
    so what the index says a key answers is what a whole read answers. None (no index) for a recording without
    a seal, or whose lines do not match it (the index stands on the seal), or with a line a reader refuses as too
    long.
    """
    header_bytes = header.encode()
    fields = parse_object(header, where=where, line=1)
    details: object = fields.get("details")
    if not isinstance(details, dict):
        return None
    try:
        seal = read_seal(cast(dict[str, Any], details), where=where)
    except RecordingError:
        return None
    if seal is None:
        return None
    sealed = {unit.unit: unit.lines for unit in seal.units}
    offset = len(header_bytes) + 1
    units: dict[str | None, list[Row]] = {}
    positions: dict[str | None, int] = {}
    rows: list[Row] = []
    for text in lines:
        size = len(text) if text.isascii() else len(text.encode())
        if size > MAX_LINE_BYTES:
            return None  # a whole read refuses it; the index must not let a reader take it
        rows.append(Row(offset, size, len(rows) + 2, b""))
        offset += size + 1
    registry = EventTypeRegistry()
    # Each key's first pin, as a digest of what it answers: a million pins' texts are not held twice.
    first: dict[str, tuple[str, bytes, Row]] = {}
    pinned_by: dict[str, list[str]] = {}
    ambiguous: set[str] = set()
    keyed = True
    numbered = ((row.line, text) for row, text in zip(rows, lines, strict=True))
    expander = FingerprintExpander(where)
    for number, text, fields in checked_entries(numbered, where):
        expander.expand(number, fields)
        unit = _sealed_unit(fields["correlation_id"])
        position = positions.get(unit, 0)
        positions[unit] = position + 1
        digest = hashlib.sha256(text.encode()).digest()[:4]
        held = sealed.get(unit, ())
        if position >= len(held) or held[position] != digest.hex():
            return None
        row = rows[number - 2]
        row = rows[number - 2] = Row(row.offset, row.length, row.line, digest)
        units.setdefault(_shown_unit(fields), []).append(row)
        if not keyed or fields["namespace"] != BUILTIN_NAMESPACE or fields["type"] != PinPromoted.event_type:
            continue
        seq = fields["seq"]
        try:
            if not is_current_pin(fields["schema_version"], registry, seq=seq):
                # An older pin reads through the reader's upcasts, which the index cannot know: no key table.
                keyed = False
                continue
            pin = PinPromoted.text_of_payload(fields["payload"], seq=seq)
        except AnagrapheusError:
            keyed = False
            continue
        # As `ReplayPins` collects them: the first pin of a key answers; a later different one makes it ambiguous.
        answer = _answer_digest(pin)
        seen = first.get(pin.key)
        if seen is None:
            first[pin.key] = (pin.unit_id, answer, row)
            continue
        pinned_by.setdefault(pin.key, [seen[0]]).append(pin.unit_id)
        if seen[1] != answer:
            ambiguous.add(pin.key)
    if any(positions.get(unit.unit, 0) != len(unit.lines) for unit in seal.units):
        return None
    table: list[tuple[str | None, int, int]] = []
    unit_rows = bytearray()
    start = 0
    for unit, held_rows in units.items():
        table.append((unit, start, len(held_rows)))
        start += len(held_rows)
        for row in held_rows:
            unit_rows += _UNIT_ROW.pack(row.offset, row.length, row.line, row.digest)
    key_rows = bytearray()
    if keyed:
        for digest, row in sorted((_key_digest(key), found[2]) for key, found in first.items()):
            key_rows += _KEY_ROW.pack(digest, row.offset, row.length, row.line, row.digest)
    meta = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "recording_bytes": offset,
        "header_bytes": len(header_bytes) + 1,
        "header_sha256": hashlib.sha256(header_bytes + b"\n").hexdigest(),
        "header_seal": _seal_span(header, cast(dict[str, Any], details)[SEAL_DETAIL]),
        "events": len(lines),
        "units": [list(entry) for entry in table],
        "keyed": keyed,
        "keys": len(first) if keyed else 0,
        "pin_units": list(dict.fromkeys(unit for unit, _, _ in first.values())) if keyed else [],
        "ambiguous": {key: pinned_by[key] for key in sorted(ambiguous)} if keyed else {},
    }
    body = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + unit_rows + key_rows
    return body + hashlib.sha256(body).digest()


def _seal_span(header: str, seal: object) -> list[int] | None:
    """Where the header's seal entry sits, a comma beside it included: cut out, the header is read without it.

    A million-line recording's header is mostly its seal; read whole, it is most of the time to a first answer.
    """
    member = '"seal":' + canonical_json(seal)
    at = header.find(member)
    if at < 0 or header.find(member, at + 1) >= 0:
        return None
    end = at + len(member)
    if header[at - 1] == ",":
        at -= 1
    elif header[end] == ",":
        end += 1
    # In bytes, as the header is read.
    return [len(header[:at].encode()), len(header[:end].encode())]


def write_index(target: Path, lines: Sequence[str] | None, *, mode: int) -> None:
    """Write the index of the recording just written to `target` (header first in `lines`); else remove any left."""
    sidecar = index_path(target)
    try:
        index = None if lines is None else build_index(lines[0], lines[1:], where=str(target))
        if index is None:
            sidecar.unlink(missing_ok=True)
        else:
            replace_durably(sidecar, index, mode=mode)
    except OSError as e:
        raise RecordingError(f"cannot write the recording's index ({e.strerror or e})", path=str(sidecar)) from e


def keep_index(target: Path, *, mode: int) -> None:
    """Index the recording `target` as it stands, unless an index that agrees with it is there already."""
    with warnings.catch_warnings():
        # A stale index is about to be replaced: nothing to warn about.
        warnings.simplefilter("ignore", RecordingIndexWarning)
        if RecordingIndex.open(target, where=str(target)) is not None:
            return
    held = target.read_bytes().decode().split("\n")
    write_index(target, held[:-1], mode=mode)


@dataclass(frozen=True, slots=True)
class RecordingIndex:
    """An index read and found to agree with its recording's size and header; lines are read through it."""

    recording: Path
    """The recording it indexes."""
    where: str
    """The recording as messages name it."""
    events: int
    """How many event lines the recording holds."""
    keyed: bool
    """Whether it holds the pins' keys (False when some pin reads through upcasts)."""
    keys: int
    """How many distinct pin keys the recording holds."""
    pin_units: tuple[str, ...]
    """The units of the pins that answer each key, in recorded order (`ReplayPins.units`)."""
    ambiguous: dict[str, tuple[str, ...]]
    """Keys pinned with different results by several units, with every unit that pinned them."""
    header_without_seal: str | None
    """The header line with its seal entry cut out (None if the index does not say where it is)."""
    _units: dict[str | None, tuple[int, int]]
    _tables: bytes
    _key_start: int

    @classmethod
    def open(cls, recording: Path, *, where: str) -> RecordingIndex | None:
        """The index beside `recording`, checked against it; None when there is none, or (warning) when it disagrees."""
        sidecar = index_path(recording)
        try:
            data = sidecar.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            return _ignored(sidecar, f"it cannot be read ({e.strerror or e})")
        try:
            return cls._checked(recording, where, data)
        except (ValueError, KeyError, TypeError, OSError) as e:
            return _ignored(sidecar, str(e))

    @classmethod
    def _checked(cls, recording: Path, where: str, data: bytes) -> RecordingIndex:
        body, digest = data[:-_DIGEST], data[-_DIGEST:]
        if len(data) <= _DIGEST or hashlib.sha256(body).digest() != digest:
            raise ValueError("its contents do not match its own digest (damaged or cut short)")
        end = body.index(b"\n")
        meta = cast(dict[str, Any], json.loads(body[:end]))
        if meta.get("format") != INDEX_FORMAT or meta.get("version") != INDEX_VERSION:
            raise ValueError(f"it is not a version {INDEX_VERSION} recording index")
        size = recording.stat().st_size
        if size != meta["recording_bytes"]:
            raise ValueError(f"it indexes a recording of {meta['recording_bytes']} bytes; this one has {size}")
        with recording.open("rb") as file:
            head = file.read(meta["header_bytes"])
        if hashlib.sha256(head).hexdigest() != meta["header_sha256"]:
            raise ValueError("it indexes a recording with another header (another seal)")
        span = meta["header_seal"]
        header = None if span is None else (head[: span[0]] + head[span[1] : -1]).decode()
        units = {entry[0]: (entry[1], entry[2]) for entry in meta["units"]}
        tables = body[end + 1 :]
        unit_rows = sum(count for _, count in units.values())
        key_start = unit_rows * _UNIT_ROW.size
        if len(tables) != key_start + meta["keys"] * _KEY_ROW.size:
            raise ValueError("its tables are not the size its first line gives")
        return cls(
            recording=recording,
            where=where,
            events=meta["events"],
            keyed=meta["keyed"],
            keys=meta["keys"],
            pin_units=tuple(meta["pin_units"]),
            ambiguous={key: tuple(units_of) for key, units_of in meta["ambiguous"].items()},
            header_without_seal=header,
            _units=units,
            _tables=tables,
            _key_start=key_start,
        )

    def has_unit(self, unit: str) -> bool:
        """Whether any line of the recording belongs to `unit` (as `--unit` names units)."""
        return unit in self._units

    def unit_rows(self, units: Sequence[str]) -> list[Row]:
        """The rows of every line of `units`, in file order."""
        rows: list[Row] = []
        for unit in dict.fromkeys(units):
            start, count = self._units.get(unit, (0, 0))
            for n in range(start, start + count):
                rows.append(Row(*_UNIT_ROW.unpack_from(self._tables, n * _UNIT_ROW.size)))
        rows.sort(key=lambda row: row.offset)
        return rows

    def key_row(self, key: str) -> Row | None:
        """The row of the line that first pins `key`; None when no pin holds a key of its digest."""
        digest = _key_digest(key)
        low, high = 0, self.keys
        while low < high:
            middle = (low + high) // 2
            at = self._key_start + middle * _KEY_ROW.size
            if self._tables[at : at + 16] < digest:
                low = middle + 1
            else:
                high = middle
        if low == self.keys:
            return None
        found, *row = _KEY_ROW.unpack_from(self._tables, self._key_start + low * _KEY_ROW.size)
        return Row(*row) if found == digest else None

    def entries(self, rows: Sequence[Row]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each row's line number and checked fields, read where the row says; `IndexMismatch` if it is not there.

        Each line is checked as the reader checks it, and against the digest the seal holds for it (the index
        holds the seal's digests, and is bound to the header that holds the seal). A pin's fingerprint is as the
        line holds it, maybe a delta: `deltas.expanded` over a whole unit's rows makes it whole.
        """
        texts: list[tuple[int, str]] = []
        try:
            with self.recording.open("rb") as file:
                for row in rows:
                    file.seek(row.offset - 1)
                    raw = file.read(row.length + 2)
                    if len(raw) != row.length + 2 or raw[:1] != b"\n" or raw[-1:] != b"\n":
                        raise IndexMismatch(f"line {row.line} is not where the index says")
                    line = raw[1:-1]
                    if hashlib.sha256(line).digest()[:4] != row.digest:
                        raise IndexMismatch(f"line {row.line} does not match the seal")
                    texts.append((row.line, line.decode()))
        except (OSError, UnicodeDecodeError) as e:
            raise IndexMismatch(f"a line cannot be read where the index says ({e})") from None
        try:
            checked = list(checked_entries(iter(texts), self.where))
        except RecordingError as e:
            raise IndexMismatch(f"a line read through the index is not one the recording holds ({e})") from None
        for number, _, fields in checked:
            yield number, fields


def _ignored(sidecar: Path, reason: str) -> None:
    warnings.warn(
        f"{sidecar}: the recording index is ignored, {reason}; the whole recording is read instead"
        " (write the recording again, or delete the index)",
        RecordingIndexWarning,
        stacklevel=4,
    )
    return None
