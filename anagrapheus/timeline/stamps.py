"""How every store stamps an envelope's time: the wall clock, and one ISO text for it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from anagrapheus.errors import UsageError

__all__ = ["iso_timestamp", "stamp", "utc_now"]


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
