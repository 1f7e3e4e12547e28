"""A PostgreSQL commit whose connection is lost mid-way: never retried blindly, no event lost or written twice.

The store's commit (`settle_unit`, in libpq's pipeline) sends the events, the unit's closing and the COMMIT in one
trip. Lost before the server commits, the server rolls everything back; lost after, the unit is committed. The client
cannot tell which, so it raises and does not settle again on its own; committing again settles the unit once.

The seam is a real lock: the test holds the `log_head` row the commit's append waits on, so the commit's trip is
known to be on the server, then ends the session (or cuts the wire once the server has committed) and lets go.
"""

from __future__ import annotations

import _thread
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import StoreUnavailable, UnitClosed  # noqa: E402
from anagrapheus.timeline import EventTypeRegistry, PinLedger  # noqa: E402
from anagrapheus.timeline.events import StoredEvent  # noqa: E402
from anagrapheus.timeline.stores.postgres import PostgresEventStore  # noqa: E402
from tests.timeline.stores.pg_proxy import Proxy, proxied  # noqa: E402

pytestmark = pytest.mark.postgres

KEYS = ["p1:tool_call:a", "p1:tool_call:b", "p1:tool_call:c"]


def sql(dsn: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # pyright: ignore
        return cur.fetchall() if cur.description else []


def until(what: str, found: Callable[[], list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Poll until `found` returns rows; fail naming `what` after 10 s."""
    deadline = time.monotonic() + 10
    while not (rows := found()):
        assert time.monotonic() < deadline, f"waited 10 s for {what}"
        time.sleep(0.01)
    return rows


def waiting_on_a_lock(dsn: str, store: PostgresEventStore) -> tuple[int, int]:
    """The server process, and its client's port, of the store's session that waits on a lock (the commit's)."""
    name = f"anagrapheus {store._holder}"  # pyright: ignore[reportPrivateUsage]
    rows = until(
        "the commit to wait on the log_head lock",
        lambda: sql(
            dsn,
            "SELECT pid, client_port FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
            (name,),
        ),
    )
    return int(rows[0][0]), int(rows[0][1])


def terminate(dsn: str, pid: int) -> None:
    """End a server session from an admin connection, and wait until the server has let it go."""
    sql(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    until(
        "the session to end", lambda: [] if sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)) else [()]
    )


def drawn(store: PostgresEventStore, types: EventTypeRegistry, ran: list[str]) -> PinLedger:
    """A ledger on `store` that drew each of `KEYS` (the effect noting each run in `ran`)."""
    ledger = PinLedger(store, types)
    for key in KEYS:
        ledger.resolve(key, kind="tool_call", effect=lambda key=key: ran.append(key) or key, interpret=str)
    return ledger


def promoted(events: list[StoredEvent]) -> list[tuple[int, str, str]]:
    """Each promoted pin of the log as (seq, unit, key)."""
    return [(e.seq, str(e.correlation_id), str(e.payload_json()["key"])) for e in events if e.type == "pin_promoted"]


@contextmanager
def log_head_held(dsn: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose open transaction holds the `log_head` row: a commit's append waits until it ends."""
    with psycopg.connect(dsn) as blocker:
        blocker.execute(f"UPDATE {schema}.log_head SET last_seq = last_seq")  # pyright: ignore
        yield blocker


def test_a_commit_whose_session_ends_before_the_server_commits_writes_nothing_and_commits_once_again(
    open_pg: Callable[..., PostgresEventStore],
    postgres_dsn: str,
    pg_schema: str,
    types: EventTypeRegistry,
) -> None:
    store, ran = open_pg(), []
    ledger = drawn(store, types, ran)
    with ThreadPoolExecutor(1) as worker, log_head_held(postgres_dsn, pg_schema) as blocker:
        committing = worker.submit(ledger.commit)
        pid, _ = waiting_on_a_lock(postgres_dsn, store)
        terminate(postgres_dsn, pid)
        blocker.rollback()
        with pytest.raises(StoreUnavailable, match=r"^closing the unit failed on schema .*") as caught:
            committing.result(timeout=30)
    assert "so it may be committed already" in str(caught.value)
    # The server rolled the trip back: nothing in the log, no seq taken, every pin still in scratch.
    assert list(store.read()) == []
    assert store.last_seq() == 0
    assert ledger.state == "open"
    assert [pin.key for pin in ledger.pins()] == KEYS
    # Committing again commits each pin once, from seq 1; no effect ran again.
    assert promoted(ledger.commit()) == [(n, ledger.unit_id, key) for n, key in enumerate(KEYS, start=1)]
    assert promoted(list(store.read())) == [(n, ledger.unit_id, key) for n, key in enumerate(KEYS, start=1)]
    assert ran == KEYS
    assert ledger.state == "committed"


@pytest.fixture
def wire(postgres_dsn: str) -> Iterator[tuple[Proxy, str]]:
    with proxied(postgres_dsn) as (proxy, dsn):
        yield proxy, dsn


def test_a_commit_whose_connection_is_lost_after_the_server_committed_is_not_committed_again(
    wire: tuple[Proxy, str],
    postgres_dsn: str,
    pg_schema: str,
    types: EventTypeRegistry,
) -> None:
    proxy, dsn = wire
    store, ran = PostgresEventStore(dsn, schema=pg_schema, pool_size=1), []
    try:
        ledger = drawn(store, types, ran)
        with ThreadPoolExecutor(1) as worker, log_head_held(postgres_dsn, pg_schema) as blocker:
            committing: Future[list[StoredEvent]] = worker.submit(ledger.commit)
            _, port = waiting_on_a_lock(postgres_dsn, store)
            # The commit's trip is on the server: its answer is held back, the server lets the trip commit.
            proxy.answering.clear()
            blocker.rollback()
            until(
                "the unit to be committed",
                lambda: sql(
                    postgres_dsn,
                    f"SELECT 1 FROM {pg_schema}.closed_units WHERE unit_id = %s",  # pyright: ignore
                    (ledger.unit_id,),
                ),
            )
            proxy.cut(port)
            proxy.answering.set()
            with pytest.raises(StoreUnavailable, match=r"^closing the unit failed on schema .*") as caught:
                committing.result(timeout=30)
        assert "so it may be committed already" in str(caught.value)
        # The server committed: each pin once in the log, from seq 1, and the scratch cleared.
        expected = [(n, ledger.unit_id, key) for n, key in enumerate(KEYS, start=1)]
        assert promoted(list(store.read())) == expected
        assert ledger.state == "committed"
        assert ledger.pins() == []
        # Committing again says the unit is committed, and writes nothing.
        with pytest.raises(UnitClosed, match="is committed"):
            ledger.commit()
        assert promoted(list(store.read())) == expected
        assert ran == KEYS
        # The log goes on from there, gap-free.
        other = drawn(store, types, [])
        assert [e.seq for e in other.commit()] == [4, 5, 6]
    finally:
        store.close()


def awaiting_the_commits_answer(thread_id: int) -> list[tuple[()]]:
    """Whether the thread waits for the answer of a settle's closing, its COMMIT sent (`_answer` of the sync)."""
    frame = sys._current_frames().get(thread_id)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        if frame.f_code.co_name == "_answer" and frame.f_locals.get("synced") is True:
            return [()]
        frame = frame.f_back
    return []


def test_a_ctrl_c_once_the_commit_was_sent_says_the_unit_may_be_committed(
    ctrl_c_raises: None,
    open_pg: Callable[..., PostgresEventStore],
    postgres_dsn: str,
    pg_schema: str,
    types: EventTypeRegistry,
) -> None:
    # The COMMIT went with the closing, in one trip; the closing waits on the log_head lock, the client on its answer.
    store, ran = open_pg(), []
    ledger = drawn(store, types, ran)
    main = threading.get_ident()

    def interrupt() -> None:
        waiting_on_a_lock(postgres_dsn, store)
        until("the commit's answer to be awaited", lambda: awaiting_the_commits_answer(main))
        _thread.interrupt_main()

    with log_head_held(postgres_dsn, pg_schema) as blocker, ThreadPoolExecutor(1) as worker:
        interrupting = worker.submit(interrupt)
        with pytest.raises(KeyboardInterrupt) as caught:
            ledger.commit()
        interrupting.result(timeout=30)
        blocker.rollback()
    assert type(caught.value) is KeyboardInterrupt
    notes = getattr(caught.value, "__notes__", [])
    assert len(notes) == 1
    assert notes[0] == (
        f"unit {ledger.unit_id}'s closing was sent when this was raised, so it may be committed already: its outcome"
        " (PinLedger.state, the store's unit_outcome) says whether, and settling it again settles it once (refused"
        " with UnitClosed if it was)"
    )
    # psycopg cancels the waiting closing on the interrupt, so nothing is committed as a rule; had its cancel reached
    # the server after the lock was let go, the unit is committed. Either way each pin is in the log once after
    # settling again, as the note says.
    expected = [(n, ledger.unit_id, key) for n, key in enumerate(KEYS, start=1)]
    if store.unit_outcome(ledger.unit_id) is None:
        assert promoted(ledger.commit()) == expected
    else:
        with pytest.raises(UnitClosed, match="is committed"):
            ledger.commit()
    assert promoted(list(store.read())) == expected
    assert ran == KEYS


def test_a_commit_the_server_refused_is_no_undecided_one(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str, types: EventTypeRegistry
) -> None:
    # The server answered (its lock timeout ran out): it rolled the trip back, and the error does not say otherwise.
    store, ran = open_pg(lock_timeout=0.2), []
    ledger = drawn(store, types, ran)
    with log_head_held(postgres_dsn, pg_schema), pytest.raises(StoreUnavailable) as caught:
        ledger.commit()
    assert str(caught.value).startswith("closing the unit failed on schema ")
    assert "lock timeout" in str(caught.value)
    assert "may be committed" not in str(caught.value)
    assert ledger.state == "open"
    assert [e.seq for e in ledger.commit()] == [1, 2, 3]
