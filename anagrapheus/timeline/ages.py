"""When each unit of a recording or log was recorded, read from the instants its runs were given, and how old it is.

A unit pinned by `Pinning` holds its runs' clock as pins: the instants the run was given, in order. The
last of them is when the unit ran. This is the recording's own record of its date: it replays with the
run, so re-recording an unchanged run keeps it (and its bytes), and a scripted recording made under a
pinned clock (the negotiation demo's) is dated by that clock. A unit with no clock pins (pinned through
`PinnedModel` alone, or recorded before run clocks were pinned) has no known date.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from anagrapheus.timeline.events import PinPromoted, StoredEvent, events_of

__all__ = ["CLOCK_KIND", "UnitAge", "expired", "unit_ages"]

CLOCK_KIND = "run_clock"
"""The kind of a run's clock pin (the provider layer's `RUN_CLOCK`): a list of ISO 8601 instants."""


@dataclass(frozen=True)
class UnitAge:
    """When one unit was recorded (None when the recording does not say) and how old that makes it."""

    unit_id: str
    """The unit."""
    recorded_at: datetime | None
    """The last instant its runs were given, in UTC; None when it holds no run clock."""
    age: timedelta | None
    """How long before `now` that was; None when unknown."""

    def describe(self) -> str:
        """`2026-01-05 (336 days ago)`, or `unknown`."""
        if self.recorded_at is None or self.age is None:
            return "unknown"
        return f"{self.recorded_at:%Y-%m-%d} ({self.age.days} days ago)"


def _instant(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def unit_ages(events: Iterable[StoredEvent], *, now: datetime | None = None) -> dict[str, UnitAge]:
    """Each unit's date and age, units in the order they first appear (`now`: the wall clock by default)."""
    moment = now or datetime.now(UTC)
    latest: dict[str, datetime | None] = {}
    for stored in events_of(events, PinPromoted):
        payload = json.loads(stored.payload)
        unit = str(payload.get("unit_id"))
        seen = latest.setdefault(unit, None)
        raw = payload.get("raw")
        if payload.get("kind") != CLOCK_KIND or not isinstance(raw, list):
            continue
        for instant in filter(None, map(_instant, cast("list[object]", raw))):
            if seen is None or instant > seen:
                latest[unit] = seen = instant
    return {unit: UnitAge(unit, when, None if when is None else moment - when) for unit, when in latest.items()}


def expired(ages: Mapping[str, UnitAge], max_age: timedelta) -> dict[str, str]:
    """The units recorded longer ago than `max_age`, each with its date; a unit of unknown date is not judged."""
    return {unit: age.describe() for unit, age in ages.items() if age.age is not None and age.age > max_age}
