"""Failure paths of the ledger: a close racing a draw, a store that fails at commit, a failing capture, re-adoption.

Each test states the outcome a user relies on, whatever the ledger does inside: no pin is lost,
no unit stays open forever, and a failed commit can be retried.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from anagrapheus.errors import AnagrapheusError, StoreError
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

KEY = "p1:model_call:k1"


def promoted(store: SQLiteEventStore) -> list[dict[str, object]]:
    return [json.loads(e.payload) for e in store.read() if e.type == "pin_promoted"]


def close_during_a_draw(ledger: PinLedger, close: str) -> None:
    """Run `ledger.<close>()` while a draw is in flight, then let the draw finish; retry the close if refused."""
    started, release = threading.Event(), threading.Event()
    closed: list[BaseException | None] = []

    def effect() -> str:
        started.set()
        assert release.wait(30)
        return "drawn while closing"

    def draw() -> None:
        ledger.resolve(KEY, kind="model_call", effect=effect, interpret=str)

    def close_it() -> None:
        try:
            ledger.commit() if close == "commit" else ledger.abandon(reason="closed mid-draw")
        except AnagrapheusError as e:
            closed.append(e)
        else:
            closed.append(None)

    drawer = threading.Thread(target=draw)
    drawer.start()
    assert started.wait(30)
    closer = threading.Thread(target=close_it)
    closer.start()
    # The close either returns at once (refused) or waits for the draw; it must not finish without it.
    closer.join(0.3)
    release.set()
    drawer.join(30)
    closer.join(30)
    assert not drawer.is_alive() and not closer.is_alive()
    if closed != [None]:
        # Refused while the draw was in flight: once it landed, the same close goes through.
        ledger.commit() if close == "commit" else ledger.abandon(reason="closed mid-draw")


def test_a_commit_during_a_draw_keeps_the_draw(store: SQLiteEventStore, ledger: PinLedger) -> None:
    close_during_a_draw(ledger, "commit")
    assert [(p["key"], p["raw"]) for p in promoted(store)] == [(KEY, "drawn while closing")]
    assert ledger.state == "committed"
    assert PinLedger.open_units(store) == []


def test_an_abandon_during_a_draw_lists_the_draw(store: SQLiteEventStore, ledger: PinLedger) -> None:
    close_during_a_draw(ledger, "abandon")
    (event,) = list(store.read())
    assert event.type == "pins_abandoned"
    assert [pin["key"] for pin in json.loads(event.payload)["pins"]] == [KEY]
    assert ledger.state == "abandoned"
    assert PinLedger.open_units(store) == []


@pytest.mark.parametrize("close", ["commit", "abandon"])
def test_a_store_failure_at_close_leaves_the_unit_open_and_retryable(
    db_path: Path, types: EventTypeRegistry, close: str
) -> None:
    with SQLiteEventStore(db_path, busy_timeout=0.2) as store:
        ledger = PinLedger(store, types)
        ledger.resolve(KEY, kind="model_call", effect=lambda: "drawn", interpret=str)
        # Another writer holds the file's write lock: the close cannot get it, and fails.
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError):
            ledger.commit() if close == "commit" else ledger.abandon(reason="gave up")
        assert ledger.state == "open"
        assert [p.key for p in ledger.pins()] == [KEY]
        assert list(store.read()) == []
        other.execute("ROLLBACK")
        other.close()

        ledger.commit() if close == "commit" else ledger.abandon(reason="gave up")
        assert ledger.state == ("committed" if close == "commit" else "abandoned")
        assert PinLedger.open_units(store) == []
        assert [e.type for e in store.read()] == ["pin_promoted" if close == "commit" else "pins_abandoned"]


class Stream:
    def __init__(self) -> None:
        self.chunks: list[str] = []


@asynccontextmanager
async def open_stream() -> AsyncIterator[Stream]:
    yield Stream()


def broken_capture(_stream: Stream) -> object:
    raise ValueError("capture could not read the stream")


@pytest.mark.anyio
async def test_a_capture_that_raises_after_a_clean_stream_is_reported_and_releases_the_key(ledger: PinLedger) -> None:
    with pytest.raises(ValueError, match="capture could not read the stream"):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=broken_capture, interpret=str
        ) as draw:
            assert draw.live is not None
    assert ledger.pins() == []
    # The key is free again: the next request draws it afresh, and the unit commits.
    async with ledger.resolve_stream(
        KEY, kind="model_call", effect=open_stream, capture=lambda s: "captured", interpret=str
    ) as draw:
        assert draw.live is not None
    assert [p.raw_text for p in ledger.pins()] == ['"captured"']
    ledger.commit()


@pytest.mark.anyio
async def test_a_capture_that_raises_never_masks_the_streams_own_failure(ledger: PinLedger) -> None:
    with pytest.raises(ConnectionError, match="the provider dropped the stream"):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=broken_capture, interpret=str
        ) as draw:
            assert draw.live is not None
            raise ConnectionError("the provider dropped the stream")
    assert ledger.pins() == []
    ledger.commit()  # nothing in flight is left behind


@pytest.mark.anyio
async def test_a_failed_stream_is_still_pinned_as_far_as_it_got(ledger: PinLedger) -> None:
    with pytest.raises(ConnectionError):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=lambda s: {"parts": s.chunks}, interpret=dict
        ) as draw:
            assert draw.live is not None
            draw.live.chunks.append("The UK ")
            raise ConnectionError("the provider dropped the stream")
    assert [json.loads(p.raw_text) for p in ledger.pins()] == [{"parts": ["The UK "]}]


def test_a_pin_replayed_twice_in_record_mode_is_adopted_once_with_two_attempts(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    ledger.resolve(KEY, kind="model_call", effect=lambda: "recorded", interpret=str, fingerprint={"m": "d"})
    ledger.commit()

    into = PinLedger(store, types)
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=into)
    for _ in range(2):
        assert replay.resolve(KEY, kind="model_call", effect=object, interpret=str) == "recorded"
    (pin,) = into.pins()
    assert (pin.key, pin.raw_text, pin.attempts, json.loads(pin.fingerprint or "null")) == (
        KEY,
        '"recorded"',
        2,
        {"m": "d"},
    )
    into.commit()
    assert [(p["unit_id"], p["attempts"]) for p in promoted(store)] == [(ledger.unit_id, 1), (into.unit_id, 2)]
