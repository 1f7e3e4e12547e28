"""The append door every store shares: envelopes stamped after the log's last seq, and what it refuses, by name."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _problem_before(payload: object) -> str | None:
    """What the append said of `payload` when `json` alone read it (the reference the faster read must match)."""
    try:
        value = json.JSONDecoder(parse_constant=_refuse_constant).decode(payload)  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError, RecursionError) as e:
        return f"payload is not JSON ({e})"
    return None if isinstance(value, dict) else "payload must be a JSON object"


def _problem_now(payload: object) -> str | None:
    try:
        stamped([event(payload=payload)], after=0, clock=lambda: NOON, new_event_id=lambda: "id")
    except UsageError as e:
        return str(e).removeprefix("event 0 (shop:order) cannot be appended: ")
    return None


TRICKY = [
    '{"a":NaN}',
    '{"a":-Infinity}',
    '{"a":1e400}',
    '{"a":-1e400}',
    '{"a":"\x01"}',
    '{"a":"\\ud800"}',
    '{"a":"\udc80"}',
    '{"a":1} x',
    '{"a":1,"a":2}',
    "\ufeff{}",
    " {} \n",
    "\f{}",
    "{}\x0b",
    '{"a":1\u00a0}',
    '{"a":1,}',
    '{"a":01}',
    '{"a":1.}',
    '{"a":"\\x"}',
    '{"a":"\\u00"}',
    '{"a":1}\x00',
    '{"a":' + "1" * 5000 + "}",
    '{"a":' + "[" * 300 + "]" * 300 + "}",
    "",
    "[]",
    "null",
    '"{}"',
    b'{"a":1}',
    None,
    3,
]


@pytest.mark.parametrize("payload", TRICKY, ids=repr)
def test_a_payload_is_accepted_or_refused_with_the_words_json_alone_gave(payload: object) -> None:
    assert _problem_now(payload) == _problem_before(payload)


def test_a_lowered_digit_limit_refuses_a_long_integer_as_json_does(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = '{"a":' + "7" * 700 + "}"
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        problem = _problem_now(payload)
        assert problem == _problem_before(payload)
    finally:
        sys.set_int_max_str_digits(before)
    assert problem is not None and problem.startswith("payload is not JSON (Exceeds the limit")


def _nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5), _nested, max_leaves=8
)


@given(
    value=_json,
    cut=st.integers(min_value=0, max_value=60),
    noise=st.text(alphabet='{}[]",:\\0123456789.eE+-nNaItfu \t\f\x00\xa0\ud800', max_size=3),
)
@settings(max_examples=300, deadline=None)
def test_any_text_near_json_is_judged_as_json_alone_judged_it(value: object, cut: int, noise: str) -> None:
    text = json.dumps(value, ensure_ascii=cut % 2 == 0)
    for payload in (text, text[:cut] + noise + text[cut:], text[:cut] + text[cut + 1 :]):
        assert _problem_now(payload) == _problem_before(payload)
