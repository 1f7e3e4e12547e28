"""The sample recordings the recording tests edit, one fresh copy a test.

Each is written with its lines whole (`compact_lines=False`): the tests edit an event's fields as a whole line holds
them (compact lines have tests of their own, `recording/test_compact.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus.timeline.events import EventTypeRegistry, PinPromoted
from anagrapheus.timeline.recording import write_recording
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore
from tests.timeline.sample_recording import HEADER, TWO_PINS_HEADER, logged_events


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """A pin, an abandoned unit's summary, then another pin, written as a recording."""
    return write_recording(
        tmp_path / "run.jsonl", logged_events(tmp_path / "run.db"), header=HEADER, compact_lines=False
    )


@pytest.fixture
def two_pins(tmp_path: Path) -> Path:
    """Two pins of one unit, written as a recording."""
    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path / "run.db") as store:
        store.append(
            [
                types.encode(
                    PinPromoted(unit_id="u1", key=f"p1:model_call:{n}", kind="model_call", raw=n, attempts=1),
                    correlation_id="u1",
                )
                for n in range(2)
            ]
        )
        return write_recording(tmp_path / "run.jsonl", store.read(), header=TWO_PINS_HEADER, compact_lines=False)
