"""The ports: what the timeline needs of a store, whatever engine sits behind it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from anagrapheus.errors import SchemaTooNew, UnitBusy, UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent

__all__ = [
    "ClosedUnit",
    "ClosedUnitLog",
    "EventStore",
    "LogImport",
    "OpenUnit",
    "PinScratchStore",
    "ScratchPin",
    "TimelineStore",
    "UnitOutcome",
    "check_contiguous",
    "event_row",
]

UnitOutcome: TypeAlias = Literal["committed", "abandoned"]
"""How a unit of work was closed, for good."""


@dataclass(frozen=True, slots=True)
class ScratchPin:
    """A pin drawn in an open unit of work: durable, but not (yet) in the log."""

    unit_id: str
    """The unit that drew it."""
    key: str
    """The pin key."""
    kind: str
    """What was pinned."""
    raw_text: str
    """The raw result as canonical JSON text (`PinPromoted.raw` is the parsed JSON)."""
    attempts: int
    """How many times the unit asked for the key."""
    draw_no: int
    """Its place in the unit's draw order, from 1."""
    fingerprint: str | None
    """The material fingerprint as canonical JSON text, if the caller gave one."""


@dataclass(frozen=True, slots=True)
class OpenUnit:
    """A unit of work with pins in scratch and no commit or abandon yet (for example after a crash)."""

    unit_id: str
    """The unit's id."""
    pins: int
    """How many pins it has drawn."""


@dataclass(frozen=True, slots=True)
class ClosedUnit:
    """A unit of work closed for good: its id takes no more draws."""

    unit_id: str
    """The unit's id."""
    outcome: UnitOutcome
    """How it was closed."""


@runtime_checkable
class EventStore(Protocol):
    """An append-only log of events with gap-free, strictly increasing seq numbers."""

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """Append events in one transaction; with `expected_last_seq`, raise `SeqConflict` if the log moved."""
        ...

    def read(
        self,
        *,
        since: int = 0,
        limit: int | None = None,
        namespace: str | None = None,
        type: str | None = None,
    ) -> Iterator[StoredEvent]:
        """Stream events with seq > `since` in seq order, without loading the whole log into memory."""
        ...

    def last_seq(self) -> int:
        """Return the seq of the last event, or 0 for an empty log."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...


@runtime_checkable
class PinScratchStore(Protocol):
    """Durable scratch for the pins of open units of work, invisible to `EventStore.read`."""

    def scratch_get(self, unit_id: str, key: str) -> ScratchPin | None:
        """Return the unit's pin for `key`, if drawn."""
        ...

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        """Write a first draw durably, with attempts 1 and the next draw number, and return the key's pin.

        If the key is pinned already (another store object or process drew it first), that pin is kept,
        counts one more attempt and is returned: the first draw written is the unit's answer for the key.
        Raises `UnitClosed` (carrying `raw`) if the unit was committed or abandoned meanwhile.
        """
        ...

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        """Count one more attempt at the unit's pin for `key` and return it, or None if not drawn, in one step.

        Raises `UnitClosed` if the unit is committed or abandoned. Being a write, it also proves
        the store writable before an effect runs.
        """
        ...

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        """Return the unit's pins in draw order."""
        ...

    def open_units(self) -> list[OpenUnit]:
        """Return the units that have pins in scratch, oldest draw first."""
        ...

    def unit_outcome(self, unit_id: str) -> UnitOutcome | None:
        """Return how the unit was closed, or None while it is open (or unknown)."""
        ...

    def settle_unit(
        self,
        unit_id: str,
        *,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
    ) -> list[StoredEvent]:
        """Close a unit in one transaction: list its pins, append `events(pins)`, clear its scratch, record `outcome`.

        Listing and clearing are one step, so no pin drawn meanwhile is cleared unseen; a closed unit
        keeps no scratch and takes no more pins. Raises `UnitClosed` if the unit is already closed.
        """
        ...


@runtime_checkable
class ClosedUnitLog(Protocol):
    """A store's record of the units closed for good, which a copy of its log carries (see `copy_log`).

    A closed unit is not always visible in the events (a unit committed with no pins appends none),
    so a copy that carried only the events would let the copy draw and commit the unit again.
    """

    def closed_units(self) -> Iterator[ClosedUnit]:
        """Stream the units closed for good, by unit id."""
        ...

    def import_closed_units(self, units: Sequence[ClosedUnit]) -> int:
        """Record units closed in another store (an outcome recorded here already is kept); return how many are new."""
        ...


class TimelineStore(EventStore, PinScratchStore, Protocol):
    """A store that holds both the log and the pin scratch, as the ledger needs."""


@runtime_checkable
class LogImport(EventStore, Protocol):
    """A log that can be continued with events copied verbatim from another (see `copy_log`)."""

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        """Append stored events keeping their seq, ids and times; the first must follow `last_seq()`."""
        ...


class UnitLeases:
    """The units a store holds, each taken once by `attempt` (retried with backoff up to `wait` s, then `UnitBusy`)."""

    def __init__(self, attempt: Callable[[str], bool], *, wait: float) -> None:
        self.held: set[str] = set()
        self._attempt = attempt
        self._wait = wait
        self.lock = threading.Lock()
        """Held while a unit is taken; a store holds it too while it lets units go."""

    def hold(self, unit_id: str) -> None:
        """Hold the unit for this store, waiting for another holder to let go; raise `UnitBusy` if it does not."""
        if unit_id in self.held:
            return
        with self.lock:
            if unit_id in self.held:
                return
            deadline = time.monotonic() + self._wait
            delay = 0.005
            while not self._attempt(unit_id):
                if time.monotonic() >= deadline:
                    raise UnitBusy(unit_id, waited=self._wait)
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            self.held.add(unit_id)


def check_outcome(outcome: str) -> None:
    """Refuse an outcome other than the two a unit of work can close with."""
    if outcome not in ("committed", "abandoned"):
        raise UsageError(f"outcome must be 'committed' or 'abandoned', not {outcome!r}")


def refuse_unknown_migrations(where: object, applied: Collection[str], known: Collection[str]) -> None:
    """Raise `SchemaTooNew` if the database holds migrations this code does not know."""
    if unknown := sorted(set(applied) - set(known)):
        raise SchemaTooNew(f"{where} was migrated by a newer anagrapheus (unknown migrations: {', '.join(unknown)})")


def check_contiguous(events: Sequence[StoredEvent]) -> None:
    """Refuse a batch of stored events whose seq numbers are not consecutive."""
    for before, after in pairwise(events):
        if after.seq != before.seq + 1:
            raise UsageError(
                f"copied events must have consecutive seq numbers; {before.seq} is followed by {after.seq}"
            )


def event_row(event: StoredEvent) -> tuple[int, str, str, str, int, str | None, str | None, str, str]:
    """A stored event as a row, in the column order both stores use."""
    return (
        event.seq,
        event.event_id,
        event.namespace,
        event.type,
        event.schema_version,
        event.causation_id,
        event.correlation_id,
        event.created_at,
        event.payload,
    )
