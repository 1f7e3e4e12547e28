"""When each unit of a recording was recorded (the instants its runs were given), and `max_age` past it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anagrapheus import read_recording
from anagrapheus.errors import RecordingExpired
from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.ages import expired, unit_ages
from examples.negotiation.runs import RECORDING
from tests.cli_fixtures import units_database

LATER = datetime(2026, 3, 6, 9, 0, 47, tzinfo=UTC)  # sixty days after round 4 was recorded


def test_each_unit_is_dated_by_the_last_instant_its_runs_were_given() -> None:
    ages = read_recording(RECORDING).ages(now=LATER)
    assert {unit: age.recorded_at for unit, age in ages.items()} == {
        "eu-uk-talks-round-1": datetime(2026, 1, 5, 9, 0, 11, tzinfo=UTC),
        "eu-uk-talks-round-2": datetime(2026, 1, 5, 9, 0, 25, tzinfo=UTC),
        "eu-uk-talks-round-3": datetime(2026, 1, 5, 9, 0, 39, tzinfo=UTC),
        "eu-uk-talks-round-4": datetime(2026, 1, 5, 9, 0, 47, tzinfo=UTC),
    }
    assert ages["eu-uk-talks-round-4"].describe() == "2026-01-05 (60 days ago)"


def test_max_age_refuses_a_recording_with_a_unit_recorded_longer_ago(tmp_path: Path) -> None:
    assert len(read_recording(RECORDING, max_age=timedelta(days=100_000)).events) == 67
    with pytest.raises(RecordingExpired) as raised:
        read_recording(RECORDING, max_age=timedelta(days=30))
    assert raised.value.max_age == timedelta(days=30)
    assert list(raised.value.units) == [f"eu-uk-talks-round-{n}" for n in (1, 2, 3, 4)]
    assert str(raised.value).startswith(f"{RECORDING}: older than max_age (30 days): eu-uk-talks-round-1 recorded")
    assert str(raised.value).endswith("; record it again with `python -m examples.negotiation --record --seed 2022`")


def test_a_unit_without_a_run_clock_has_no_date_and_is_not_judged(tmp_path: Path) -> None:
    with SQLiteEventStore(units_database(tmp_path / "support.db")) as store:
        ages = unit_ages(store.read())
    assert {age.describe() for age in ages.values()} == {"unknown"}
    assert expired(ages, timedelta(0)) == {}


def test_a_clock_pin_is_read_for_the_instants_it_holds_and_nothing_else(tmp_path: Path) -> None:
    from anagrapheus.timeline import PinLedger

    with SQLiteEventStore(tmp_path / "clock.db") as store:
        ledger = PinLedger(store, unit_id="odd-clock")
        raw = ["not a time", 7, "2026-01-05T09:00:00", "2026-01-05T10:00:00+01:00"]
        ledger.resolve("p1:run_clock:odd", kind="run_clock", effect=lambda: raw, interpret=lambda value: value)
        ledger.commit()
        ages = unit_ages(store.read(), now=LATER)
    # Naive instants are UTC; the other offset is turned to UTC; what is no instant is passed over.
    assert ages["odd-clock"].recorded_at == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
