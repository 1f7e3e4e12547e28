"""The clock and id source of a scripted recording, derived from a seed so that re-recording is byte-identical."""

from __future__ import annotations

from datetime import UTC, datetime

from anagrapheus.timeline.seeded import SeededRun as _SeededRun

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
"""When every seeded recording's clock starts: the morning the talks open."""


class SeededRun(_SeededRun):
    """The library's seeded clock and UUIDv7 source, seeded per negotiation and starting when the talks open."""

    def __init__(self, seed: int, *, start: datetime = START) -> None:
        super().__init__(f"anagrapheus-negotiation-ids:{seed}", start=start)
        self.seed = seed
