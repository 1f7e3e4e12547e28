"""A seeded clock and id source, so that recording the same scripted run twice writes the same bytes."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

__all__ = ["SeededRun"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""When a seeded clock starts unless told otherwise."""


class SeededRun:
    """A clock that ticks one second per reading and a UUIDv7 source drawing its random bits from a seed.

    A live run reads the wall clock and the operating system's entropy; a scripted recording reads
    these instead (`SQLiteEventStore(path, clock=run.now, new_event_id=run.new_id)`).
    """

    def __init__(self, seed: str, *, start: datetime = EPOCH) -> None:
        self._rng = random.Random(seed)
        self._start = start
        self._ticks = 0

    def now(self) -> datetime:
        """Return the next instant: one second after the last."""
        self._ticks += 1
        return self._start + timedelta(seconds=self._ticks)

    def new_id(self) -> str:
        """Return a UUIDv7 stamped with the current instant, its random bits drawn from the seed."""
        millis = int((self._start + timedelta(seconds=self._ticks)).timestamp() * 1000)
        rand_a = self._rng.getrandbits(12)
        rand_b = self._rng.getrandbits(62)
        value = (millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
        return str(uuid.UUID(int=value))
