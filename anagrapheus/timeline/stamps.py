"""How every store stamps envelopes: seq after the log's last, one time per append as ISO text, event ids."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent

__all__ = ["iso_timestamp", "stamp", "stamped", "utc_now"]


def utc_now() -> datetime:
    """Return the wall clock's time, timezone-aware in UTC."""
    return datetime.now(UTC)


def iso_timestamp(moment: datetime) -> str:
    """Write a moment as the log stores it: UTC, microseconds, a trailing `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def stamp(clock: Callable[[], datetime]) -> str:
    """Read an injected clock for an envelope's `created_at`, refusing a naive time."""
    now = clock()
    if now.tzinfo is None:
        raise UsageError("the store's clock must return timezone-aware datetimes")
    return iso_timestamp(now)


def stamped(
    events: Sequence[PendingEvent], *, after: int, clock: Callable[[], datetime], new_event_id: Callable[[], str]
) -> list[StoredEvent]:
    """Envelope pending events as the next ones after seq `after`, with one time and an id each (unless preset)."""
    created_at = stamp(clock)
    return [
        StoredEvent(
            after + offset,
            event.event_id or new_event_id(),
            event.namespace,
            event.type,
            event.schema_version,
            event.causation_id,
            event.correlation_id,
            created_at,
            event.payload,
        )
        for offset, event in enumerate(events, start=1)
    ]
