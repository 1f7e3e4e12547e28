"""A recording opened through its index: one unit's lines, or each pin when its key is asked, read where they sit.

What a whole read would answer, and nothing else: a line read through the index is checked as the reader checks
every line, and against the seal; any disagreement warns (`RecordingIndexWarning`) and the whole file is read.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import override

from anagrapheus.errors import AnagrapheusError
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    EventTypeRegistry,
    PinPromoted,
    PinText,
    StoredEvent,
    is_current_pin,
)
from anagrapheus.timeline.provenance import ProvenanceCheck, Stamping, check_provenance
from anagrapheus.timeline.recording.deltas import DELTA_FIELD, expanded
from anagrapheus.timeline.recording.header import RecordingHeader, read_header
from anagrapheus.timeline.recording.index import (
    IndexMismatch,
    RecordingIndex,
    RecordingIndexWarning,
    Row,
    index_path,
)
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES, stored_event
from anagrapheus.timeline.recording.pins import pins_of_entries
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = ["IndexedPins", "IndexedUnits", "indexed_pins", "indexed_unit_pins", "read_indexed_units"]


def _mismatch(index: RecordingIndex, problem: IndexMismatch) -> None:
    warnings.warn(
        f"{index_path(index.recording)}: the recording index disagrees with the recording ({problem});"
        " the whole recording is read instead",
        RecordingIndexWarning,
        stacklevel=4,
    )


def _opened(
    path: str | os.PathLike[str],
    *,
    call_policy: object | None,
    provenance: ProvenanceCheck,
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, RecordingIndex] | None:
    """The header (its provenance checked) and index of a recording with an index that agrees; else None.

    The header is read without its seal, which the index stands for: bound to the header by its digest, it holds
    each line's sealed digest, so a line read through it is checked as the seal would check it.
    """
    source = Path(path)
    where = str(path)
    index = RecordingIndex.open(source, where=where)
    if index is None or index.header_without_seal is None or len(index.header_without_seal) > MAX_LINE_BYTES:
        return None
    header = read_header(index.header_without_seal, where=where)
    check_provenance(
        header.provenance,
        path=where,
        rerecord=header.rerecord,
        call_policy=call_policy,
        check=provenance,
        stamping=stamping,
    )
    return header, index


class IndexedPins(Mapping[str, PinText]):
    """A recording's pins by key, each read from its line when first asked; all of them once any walk needs them."""

    def __init__(self, index: RecordingIndex, whole: Callable[[], dict[str, PinText]]) -> None:
        self._index = index
        self._whole = whole
        self._found: dict[str, PinText] = {}
        self._all: dict[str, PinText] | None = None
        # The pins of each unit read whole to make a delta's fingerprint whole, by line: read once per unit.
        self._unit_pins: dict[str, dict[int, PinText]] = {}

    @property
    def units(self) -> tuple[str, ...]:
        """The units of the pins that answer each key, in recorded order, as the index holds them."""
        if self._all is not None:
            return tuple(dict.fromkeys(pin.unit_id for pin in self._all.values()))
        return self._index.pin_units

    def _read_whole(self) -> dict[str, PinText]:
        if self._all is None:
            self._all = self._whole()
        return self._all

    def _read(self, key: str, row: Row) -> PinText:
        entries = list(self._index.entries([row]))
        _, fields = entries[0]
        if fields["namespace"] != BUILTIN_NAMESPACE or fields["type"] != PinPromoted.event_type:
            raise IndexMismatch(f"line {row.line} is not a pin")
        payload = fields["payload"]
        try:
            if DELTA_FIELD in payload:
                pin = self._unit_pin(payload.get("unit_id"), row)
            else:
                pin = PinPromoted.text_of_payload(payload, seq=fields["seq"])
        except AnagrapheusError as e:
            raise IndexMismatch(f"line {row.line} is not a pin this reader reads ({e})") from None
        if pin.key != key:
            raise IndexMismatch(f"line {row.line} pins another key")
        return pin

    def _unit_pin(self, unit: object, row: Row) -> PinText:
        """The pin on `row`'s line, its fingerprint a delta made whole by reading its unit's lines (once a unit)."""
        if not isinstance(unit, str):
            raise IndexMismatch(f"line {row.line} is a pin of no unit")
        pins = self._unit_pins.get(unit)
        if pins is None:
            pins = {}
            entries = expanded(self._index.entries(self._index.unit_rows([unit])), self._index.where)
            for number, fields in entries:
                if fields["namespace"] == BUILTIN_NAMESPACE and fields["type"] == PinPromoted.event_type:
                    pins[number] = PinPromoted.text_of_payload(fields["payload"], seq=fields["seq"])
            self._unit_pins[unit] = pins
        pin = pins.get(row.line)
        if pin is None:
            raise IndexMismatch(f"line {row.line} is not among its unit's lines")
        return pin

    @override
    def __getitem__(self, key: str) -> PinText:
        if self._all is not None:
            return self._all[key]
        found = self._found.get(key)
        if found is not None:
            return found
        row = self._index.key_row(key)
        if row is None:
            raise KeyError(key)
        try:
            found = self._found[key] = self._read(key, row)
        except IndexMismatch as e:
            _mismatch(self._index, e)
            return self._read_whole()[key]
        return found

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(self._read_whole())

    @override
    def __len__(self) -> int:
        return self._index.keys if self._all is None else len(self._all)


def indexed_pins(
    path: str | os.PathLike[str],
    registry: EventTypeRegistry,
    *,
    call_policy: object | None,
    provenance: ProvenanceCheck,
    whole: Callable[[], dict[str, PinText]],
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, IndexedPins, dict[str, tuple[str, ...]]] | None:
    """A recording's header, its pins read as asked and its ambiguous keys, through its index; None without one.

    None too when the index holds no keys (some pin reads through upcasts) or `registry` reads pins otherwise.
    `whole` reads every pin, as a read without the index would, when a walk or a disagreement needs them all.
    """
    opened = _opened(path, call_policy=call_policy, provenance=provenance, stamping=stamping)
    if opened is None:
        return None
    header, index = opened
    try:
        current = is_current_pin(PinPromoted.schema_version, registry, seq=0)
    except AnagrapheusError:
        current = False
    if not index.keyed or not current:
        return None
    return header, IndexedPins(index, whole), dict(index.ambiguous)


def indexed_unit_pins(
    path: str | os.PathLike[str],
    registry: EventTypeRegistry,
    unit_id: str,
    *,
    upcasts: UpcastRegistry | None,
    call_policy: object | None,
    provenance: ProvenanceCheck,
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, list[PinText]] | None:
    """One unit's header and pins, read through the recording's index; None without an index (or if it disagrees)."""
    opened = _opened(path, call_policy=call_policy, provenance=provenance, stamping=stamping)
    if opened is None:
        return None
    header, index = opened
    try:
        entries = list(expanded(index.entries(index.unit_rows([unit_id])), str(path)))
    except IndexMismatch as e:
        _mismatch(index, e)
        return None
    return header, list(pins_of_entries(iter(entries), str(path), registry, upcasts))


class IndexedUnits:
    """Some units' lines of a recording, read through its index: the header, seal, events and their line numbers."""

    def __init__(self, header: RecordingHeader, entries: list[tuple[int, dict[str, Any]]], where: str) -> None:
        self.header = header
        """The header, without the seal in its details (an indexed recording is always sealed)."""
        self.lines = tuple(number for number, _ in entries)
        """The line each event sits on."""
        self.events: tuple[StoredEvent, ...] = tuple(
            stored_event(fields, where=where, line=number) for number, fields in entries
        )
        """The units' events, in file order."""


def read_indexed_units(path: str | os.PathLike[str], units: Sequence[str]) -> IndexedUnits | None:
    """The lines of `units` (as `--unit` names them), read through the recording's index; None without one.

    Each line is checked against the seal, whatever the caller's seal check: a line that does not match means
    the index cannot be trusted. The provenance is not checked: what shows or checks a file reports it. None
    too when the index disagrees with a line it gives (warning), so the caller reads the file whole.
    """
    opened = _opened(path, call_policy=None, provenance="ignore")
    if opened is None:
        return None
    header, index = opened
    try:
        entries = list(expanded(index.entries(index.unit_rows(units)), str(path)))
    except IndexMismatch as e:
        _mismatch(index, e)
        return None
    return IndexedUnits(header, entries, str(path))
