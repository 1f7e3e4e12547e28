"""The append door every store shares: envelopes stamped after the log's last seq, and what it refuses, by name."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent
from anagrapheus.timeline.stores.stamps import iso_timestamp, stamp, stamped

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def event(**change: Any) -> PendingEvent:
    fields: dict[str, Any] = {"namespace": "shop", "type": "order", "schema_version": 1, "payload": '{"n":1}'}
    return PendingEvent(**{**fields, **change})


def test_events_are_stamped_after_the_last_seq_with_one_time_and_an_id_each_unless_preset() -> None:
    ids = iter(["id-a", "id-b"])

    events = stamped(
        [event(), event(event_id="preset", causation_id="c", correlation_id="r"), event()],
        after=7,
        clock=lambda: NOON,
        new_event_id=lambda: next(ids),
    )

    at = "2026-03-01T12:00:00.000000Z"
    assert events == [
        StoredEvent(8, "id-a", "shop", "order", 1, None, None, at, '{"n":1}'),
        StoredEvent(9, "preset", "shop", "order", 1, "c", "r", at, '{"n":1}'),
        StoredEvent(10, "id-b", "shop", "order", 1, None, None, at, '{"n":1}'),
    ]


def test_a_time_is_written_in_utc_to_the_microsecond_with_a_z_whatever_the_machines_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paris = timezone(timedelta(hours=1))
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert iso_timestamp(datetime(2026, 3, 1, 13, 0, 0, 5, tzinfo=paris)) == "2026-03-01T12:00:00.000005Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_naive_clock_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^the store's clock must return timezone-aware datetimes$"):
        stamp(lambda: datetime(2026, 3, 1, 12, 0))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"schema_version": 0}, "schema_version must be an integer >= 1, not 0"),
        ({"schema_version": True}, "schema_version must be an integer >= 1, not True"),
        ({"schema_version": "1"}, "schema_version must be an integer >= 1, not '1'"),
        ({"namespace": ""}, "namespace and type must be non-empty strings"),
        ({"type": ""}, "namespace and type must be non-empty strings"),
        ({"namespace": 3}, "namespace and type must be non-empty strings"),
        ({"type": None}, "namespace and type must be non-empty strings"),
        ({"payload": "[1]"}, "payload must be a JSON object"),
        ({"payload": '{"n":NaN}'}, "payload is not JSON (NaN is not a JSON number)"),
    ],
    ids=str,
)
def test_an_event_the_reader_would_refuse_is_refused_at_the_append_by_index_and_name(
    change: dict[str, Any], problem: str
) -> None:
    bad = event(**change)

    with pytest.raises(UsageError) as caught:
        stamped([event(), bad], after=0, clock=lambda: NOON, new_event_id=lambda: "id")

    assert str(caught.value) == f"event 1 ({bad.namespace}:{bad.type}) cannot be appended: {problem}"
