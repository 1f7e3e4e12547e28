"""Moving a log between stores (SQLite file and PostgreSQL schema), keeping seq, event ids and times."""

from __future__ import annotations

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import StoredEvent

# Opening a log by its address is `opening`'s; named here too, where they were first.
from anagrapheus.timeline.stores.opening import POSTGRES_SCHEMES, open_store
from anagrapheus.timeline.stores.ports import ClosedUnit, ClosedUnitLog, EventStore, LogImport

__all__ = ["POSTGRES_SCHEMES", "copy_log", "open_store"]


def copy_log(source: EventStore, destination: LogImport, *, batch: int = 1000) -> int:
    """Copy the events `destination` lacks from `source`, verbatim, and return how many were copied.

    The destination must be empty or hold a prefix of the source (its last event equal to the
    source's at that seq), so an interrupted copy resumes where it stopped. Each batch is one
    transaction. The record of which units are closed (committed or abandoned) is carried too, when
    both stores keep one (`ClosedUnitLog`, as both built-in stores do), so a unit committed in the
    source is refused in the copy rather than drawn and committed twice. Scratch pins of open units
    are not copied: commit or abandon them first.
    """
    if batch < 1:
        raise UsageError("batch must be >= 1")
    if not isinstance(destination, LogImport):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError(f"{destination!r} cannot take copied events (it has no append_stored)")
    last = destination.last_seq()
    if last:
        theirs = next(destination.read(since=last - 1, limit=1), None)
        ours = next(source.read(since=last - 1, limit=1), None)
        if ours != theirs:
            raise UsageError(
                f"the destination's log is not a prefix of the source's: at seq {last} it holds"
                f" {theirs.event_id if theirs else 'nothing'}, the source {ours.event_id if ours else 'nothing'}"
            )
    copied = 0
    chunk: list[StoredEvent] = []
    for event in source.read(since=last):
        chunk.append(event)
        if len(chunk) == batch:
            destination.append_stored(chunk)
            copied += len(chunk)
            chunk = []
    destination.append_stored(chunk)
    copied += len(chunk)
    if isinstance(source, ClosedUnitLog) and isinstance(destination, ClosedUnitLog):
        _copy_closed_units(source, destination, batch=batch)
    return copied


def _copy_closed_units(source: ClosedUnitLog, destination: ClosedUnitLog, *, batch: int) -> None:
    """Record in `destination` every unit closed in `source`, `batch` per transaction (after the events they close)."""
    units: list[ClosedUnit] = []
    for unit in source.closed_units():
        units.append(unit)
        if len(units) == batch:
            destination.import_closed_units(units)
            units = []
    destination.import_closed_units(units)
