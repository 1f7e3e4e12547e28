"""The PostgreSQL store under faults: a lost lease connection, commits inside transactions, stalls, dropped sessions."""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import StoreError, StoreIntegrityError, StoreUnavailable, UnitBusy, UsageError  # noqa: E402
from anagrapheus.timeline import EventTypeRegistry, PinLedger  # noqa: E402
from anagrapheus.timeline.stores.postgres import PostgresEventStore  # noqa: E402
from anagrapheus.timeline.stores.postgres_schema import PostgresPlace  # noqa: E402

from ...bounds import bound  # noqa: E402
from ...store_conformance import pending  # noqa: E402
from .pg_proxy import Proxy, proxied  # noqa: E402

pytestmark = pytest.mark.postgres

KILLS = bound("ANAGRAPHEUS_PG_KILLS", normal=3, soak=200)
PARTITIONS = bound("ANAGRAPHEUS_PG_PARTITIONS", normal=1, soak=30)


def sql(dsn: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # pyright: ignore
        return cur.fetchall() if cur.description else []


def terminate(dsn: str, pids: list[int]) -> None:
    """End server sessions from an admin connection, and wait until the server has let them go."""
    for pid in pids:
        sql(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while sql(dsn, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)):
        assert time.monotonic() < deadline, "the server did not end the sessions"
        time.sleep(0.02)


def lease_connection(store: PostgresEventStore) -> int:
    """The server process of the store's lease connection (there is no public handle on it)."""
    conn = store._beacon_conn  # pyright: ignore[reportPrivateUsage]
    assert conn is not None
    return conn.info.backend_pid


def every_connection(dsn: str, store: PostgresEventStore) -> list[int]:
    """The server processes of every connection the store holds (they carry its holder name)."""
    name = f"anagrapheus {store._holder}"  # pyright: ignore[reportPrivateUsage]
    return [int(row[0]) for row in sql(dsn, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))]


def draw(ledger: PinLedger, key: str, ran: list[str], value: str) -> str:
    def effect() -> str:
        ran.append(value)
        return value

    return ledger.resolve(f"p1:tool_call:{key}", kind="tool_call", effect=effect, interpret=str)


@pytest.mark.soak
def test_sessions_killed_mid_unit_drop_no_draw_and_pay_no_key_twice(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, types: EventTypeRegistry
) -> None:
    store = open_pg(pool_size=3)
    chance = random.Random(22)
    paid: list[str] = []
    committed: list[str] = []

    def kill_some() -> None:
        sessions = every_connection(postgres_dsn, store)
        terminate(postgres_dsn, chance.sample(sessions, chance.randint(1, len(sessions))))

    for unit in range(KILLS):
        ledger = PinLedger(store, types)
        for n in range(2):
            key = f"p1:model_call:{unit}-{n}"

            def effect(key: str = key) -> str:
                kill_some()  # mid-draw: after the reuse that let it run, before its write
                paid.append(key)
                return key

            assert ledger.resolve(key, kind="model_call", effect=effect, interpret=str) == key
        kill_some()  # between the last draw and the commit
        committed.extend(json.loads(e.payload)["key"] for e in ledger.commit())
    assert sorted(paid) == sorted(set(paid))  # no key paid twice
    assert sorted(committed) == sorted(paid)  # no paid draw dropped
    assert [json.loads(e.payload)["key"] for e in store.read()] == committed


# 1. The unit lease survives the loss of its connection; a holder that lost the unit is refused.


@pytest.mark.soak
def test_a_second_store_is_refused_a_unit_whose_lease_connection_dropped(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, types: EventTypeRegistry
) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.2)
    mine = PinLedger(holder, types)
    ran: list[str] = []
    draw(mine, "a", ran, "mine")
    for _ in range(KILLS):
        terminate(postgres_dsn, [lease_connection(holder)])
        # The holder lives on (its pooled connections do): the unit is still its own, refused before any effect.
        theirs = PinLedger(other, types, unit_id=mine.unit_id)
        with pytest.raises(UnitBusy):
            draw(theirs, "b", ran, "theirs")
        # The holder opens a new lease connection and draws on.
        draw(mine, f"k{len(ran)}", ran, "mine")
    assert "theirs" not in ran
    assert [pin.draw_no for pin in mine.pins()] == list(range(1, KILLS + 2))
    mine.commit()
    assert other.unit_outcome(mine.unit_id) == "committed"


def test_a_holder_that_lost_every_connection_is_refused_once_another_took_the_unit(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, types: EventTypeRegistry
) -> None:
    holder, other = open_pg(), open_pg(unit_wait=5.0)
    mine = PinLedger(holder, types)
    ran: list[str] = []
    draw(mine, "a", ran, "mine")
    # A restart, a partition long enough for the server to drop them: every session of the holder is gone.
    terminate(postgres_dsn, every_connection(postgres_dsn, holder))
    theirs = PinLedger(other, types, unit_id=mine.unit_id)
    assert draw(theirs, "a", ran, "theirs") == "mine"
    assert draw(theirs, "b", ran, "theirs") == "theirs"
    # The holder comes back: every step that draws is refused, before its effect, and writes nothing.
    for key in ("a", "c"):
        with pytest.raises(UnitBusy):
            draw(mine, key, ran, "mine again")
    with pytest.raises(UnitBusy):
        holder.scratch_put(mine.unit_id, "p1:tool_call:d", kind="tool_call", raw='"late"', fingerprint=None)
    with pytest.raises(UnitBusy):
        holder.scratch_reuse(mine.unit_id, "p1:tool_call:a")
    with pytest.raises(UnitBusy):
        mine.commit()
    assert ran == ["mine", "theirs"]
    assert [(p.key, p.attempts) for p in theirs.pins()] == [("p1:tool_call:a", 2), ("p1:tool_call:b", 1)]
    theirs.commit()


def test_a_closed_holders_lease_row_is_gone(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    holder = open_pg()
    holder.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    holder.scratch_get("u2", "k1")
    assert sql(postgres_dsn, f"SELECT unit_id FROM {pg_schema}.unit_leases ORDER BY 1") == [("u1",), ("u2",)]
    holder.settle_unit("u1", outcome="committed", events=lambda pins: [])
    assert sql(postgres_dsn, f"SELECT unit_id FROM {pg_schema}.unit_leases") == [("u2",)]
    holder.close()
    assert sql(postgres_dsn, f"SELECT unit_id FROM {pg_schema}.unit_leases") == []


def test_a_unit_being_written_is_busy_to_another_store(open_pg: Callable[..., PostgresEventStore]) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.2)
    with holder.transaction():
        # The write holds the lease row until it commits: another store does not even wait on it.
        holder.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        with pytest.raises(UnitBusy):
            other.scratch_get("u1", "k1")
    assert holder.scratch_list("u1")[0].key == "k1"


def test_a_failure_to_take_a_lease_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    sql(postgres_dsn, f"ALTER TABLE {pg_schema}.unit_leases RENAME TO gone")
    with pytest.raises(StoreError) as caught:
        store.scratch_get("u1", "k1")
    assert str(caught.value).startswith(f"taking the lease of unit u1 failed on {store.place}: relation ")


# 2. A commit or abandon inside a caller's transaction joins it.


@pytest.mark.parametrize("close", ["commit", "abandon"])
def test_a_close_inside_a_transaction_joins_it(
    open_pg: Callable[..., PostgresEventStore], types: EventTypeRegistry, close: str
) -> None:
    store = open_pg()
    ledger = PinLedger(store, types)
    ran: list[str] = []
    draw(ledger, "a", ran, "kept")
    with pytest.raises(RuntimeError, match="outer"), store.transaction():
        ledger.commit() if close == "commit" else ledger.abandon(reason="r")
        assert ledger.state == ("committed" if close == "commit" else "abandoned")
        raise RuntimeError("outer")
    assert store.last_seq() == 0
    assert ledger.state == "open"
    assert draw(ledger, "a", ran, "redrawn") == "kept"
    (event,) = ledger.commit()
    assert json.loads(event.payload)["raw"] == "kept"
    assert ledger.state == "committed"
    assert ran == ["kept"]


@pytest.mark.anyio
@pytest.mark.parametrize("close", ["commit", "abandon"])
async def test_an_async_close_inside_a_transaction_joins_it(
    open_pg: Callable[..., PostgresEventStore], types: EventTypeRegistry, close: str
) -> None:
    # Bounded, so that a regression fails here instead of hanging the run.
    store = open_pg(statement_timeout=5.0, lock_timeout=5.0)
    other = open_pg()
    ledger = PinLedger(store, types)

    async def effect() -> str:
        return "kept"

    await ledger.aresolve("p1:model_call:a", kind="model_call", effect=effect, interpret=str)
    with pytest.raises(RuntimeError, match="outer"), store.transaction():
        store.append([pending(1)])
        # A draw inside the transaction locks the unit until it ends; the close must not wait for it.
        await ledger.aresolve("p1:model_call:b", kind="model_call", effect=effect, interpret=str)
        if close == "commit":
            assert len(await asyncio.wait_for(ledger.acommit(), 20)) == 2
        else:
            await asyncio.wait_for(ledger.aabandon(reason="r"), 20)
        assert ledger.state == ("committed" if close == "commit" else "abandoned")
        # Not committed for anyone else until the outer transaction is.
        assert other.unit_outcome(ledger.unit_id) is None
        raise RuntimeError("outer")
    assert store.last_seq() == 0
    assert ledger.state == "open"
    assert other.unit_outcome(ledger.unit_id) is None
    with store.transaction():
        await asyncio.wait_for(ledger.acommit(), 20)
    assert ledger.state == "committed"
    assert other.unit_outcome(ledger.unit_id) == "committed"
    # The draw made inside the rolled-back transaction went with it, as the caller's rollback asked.
    assert [e.type for e in other.read()] == ["pin_promoted"]


@pytest.mark.anyio
async def test_work_a_holder_hands_to_threads_joins_its_transaction(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg()
    with pytest.raises(RuntimeError), store.transaction():
        await asyncio.gather(*(asyncio.to_thread(store.append, [pending(i)]) for i in range(4)))
        assert store.last_seq() == 4
        raise RuntimeError("rolled back")
    assert store.last_seq() == 0


@pytest.mark.anyio
async def test_a_thread_waiting_for_a_savepoint_block_left_open_across_an_await_is_bounded(
    open_pg: Callable[..., PostgresEventStore],
) -> None:
    store = open_pg(pool_timeout=0.2)
    with store.transaction(), store.transaction():
        with pytest.raises(StoreUnavailable, match="another thread of this transaction"):
            await asyncio.to_thread(store.last_seq)
        store.append([pending(1)])
    assert store.last_seq() == 1


def test_a_transaction_ended_in_another_context_lets_go_of_it(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg()
    block = store.transaction()
    contextvars.copy_context().run(block.__enter__)
    block.__exit__(None, None, None)
    store.append([pending(1)])
    assert store.last_seq() == 1


def test_a_closed_store_takes_no_unit(open_pg: Callable[..., PostgresEventStore], postgres_dsn: str) -> None:
    store = open_pg()
    store.close()
    with pytest.raises(StoreError, match="it is closed"):
        store.scratch_get("u1", "k1")
    # A server process leaves pg_stat_activity a moment after its client hung up (seen on a loaded machine).
    deadline = time.monotonic() + 10
    while every_connection(postgres_dsn, store):
        assert time.monotonic() < deadline, "the closed store still has a connection"
        time.sleep(0.02)


# 3. Every wait on the server is bounded.


@pytest.fixture
def partition(postgres_dsn: str) -> Iterator[tuple[Proxy, str]]:
    with proxied(postgres_dsn) as (proxy, dsn):
        yield proxy, dsn


@pytest.mark.soak
def test_a_partition_ends_a_commit_in_store_unavailable(
    partition: tuple[Proxy, str], pg_schema: str, types: EventTypeRegistry, postgres_dsn: str
) -> None:
    proxy, dsn = partition
    for _ in range(PARTITIONS):
        proxy.forwarding.set()
        with PostgresEventStore(
            dsn, schema=pg_schema, statement_timeout=1.0, connect_timeout=1.0, pool_timeout=2.0, pool_size=1
        ) as store:
            ledger = PinLedger(store, types)
            ran: list[str] = []
            draw(ledger, "a", ran, "a")
            proxy.forwarding.clear()
            with pytest.raises(StoreUnavailable) as caught:
                ledger.commit()
            assert "got no answer from" in str(caught.value)
            assert "within 2 s (a stalled server or a network partition)" in str(caught.value)
            # A draw fails the same way, before its effect runs: the unit's state cannot be read.
            with pytest.raises(StoreUnavailable):
                draw(ledger, "b", ran, "b")
            assert ran == ["a"]
            proxy.forwarding.set()
        # Nothing was decided: the unit is still open, its pin in scratch, for a store that reaches the server.
        with PostgresEventStore(postgres_dsn, schema=pg_schema) as direct:
            assert direct.unit_outcome(ledger.unit_id) is None
            assert [p.key for p in direct.scratch_list(ledger.unit_id)] == ["p1:tool_call:a"]


def test_a_partition_at_commit_ends_the_transaction_in_store_unavailable(
    partition: tuple[Proxy, str], pg_schema: str
) -> None:
    proxy, dsn = partition
    with PostgresEventStore(dsn, schema=pg_schema, statement_timeout=0.5, connect_timeout=1.0) as store:
        with (
            pytest.raises(StoreUnavailable, match=r"a transaction got no answer .* within 1\.5 s"),
            store.transaction(),
        ):
            store.append([pending(1)])
            proxy.forwarding.clear()
        # Whether the COMMIT, still held in the partition, takes effect once it heals is unknown: as in any
        # network, so the error says only that no answer came.
        proxy.forwarding.set()


def test_a_read_unanswered_in_time_is_store_unavailable_and_not_tried_again(
    partition: tuple[Proxy, str], pg_schema: str
) -> None:
    proxy, dsn = partition
    with PostgresEventStore(dsn, schema=pg_schema, statement_timeout=0.5, pool_size=1) as store:
        assert store.unit_outcome("u1") is None
        proxy.forwarding.clear()
        with pytest.raises(StoreUnavailable) as caught:
            store.unit_outcome("u1")
        assert str(caught.value).startswith("reading a unit's outcome got no answer from schema ")
        assert "within 1.5 s" in str(caught.value)
        # Its cause is the store's own error, not a lost connection to try again on.
        assert type(caught.value.__cause__) is StoreUnavailable
        proxy.forwarding.set()


def test_a_server_that_never_answers_a_connection_is_store_unavailable(
    partition: tuple[Proxy, str], pg_schema: str
) -> None:
    proxy, dsn = partition
    proxy.forwarding.clear()
    with pytest.raises(StoreUnavailable, match="connecting failed"):
        PostgresEventStore(dsn, schema=pg_schema, connect_timeout=1.0)


def test_a_lock_held_too_long_is_store_unavailable(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg(lock_timeout=0.2)
    with psycopg.connect(postgres_dsn) as blocker:
        blocker.execute(f"UPDATE {pg_schema}.log_head SET last_seq = last_seq")  # pyright: ignore
        with pytest.raises(StoreUnavailable, match=r"taking seq numbers failed .* lock timeout"):
            store.append([pending(1)])
        blocker.rollback()
    assert [e.seq for e in store.append([pending(1)])] == [1]


def test_an_exhausted_pool_is_store_unavailable(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg(pool_size=1, pool_timeout=0.2)
    seen: list[BaseException] = []

    def borrow() -> None:
        try:
            store.last_seq()
        except StoreError as e:
            seen.append(e)

    with store.transaction():
        store.append([pending(1)])
        thread = threading.Thread(target=borrow)
        thread.start()
        thread.join()
    assert len(seen) == 1
    assert isinstance(seen[0], StoreUnavailable)
    assert str(seen[0]).startswith("borrowing a connection failed")


def test_the_bounds_reach_the_server_and_are_checked(
    open_pg: Callable[..., PostgresEventStore],
) -> None:
    store = open_pg(statement_timeout=7.0, lock_timeout=3.0, idle_in_transaction_timeout=60.0, keepalive_idle=20.0)
    with store.transaction(), store._connection() as conn:  # pyright: ignore[reportPrivateUsage]
        shown = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # pyright: ignore
            for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
        }
    assert shown == {"statement_timeout": "7s", "lock_timeout": "3s", "idle_in_transaction_session_timeout": "1min"}
    assert repr(store) == f"PostgresEventStore({store.place})"
    # 0 turns a bound off: the server's and the client's.
    unbounded = open_pg(statement_timeout=0)
    assert unbounded.last_seq() == 0
    unbounded.append_stored([])
    for option, value in (("statement_timeout", -1), ("lock_timeout", float("nan")), ("unit_wait", "2")):
        with pytest.raises(UsageError, match=f"{option} must be a finite number of seconds >= 0"):
            open_pg(**{option: value})
    for option in ("connect_timeout", "pool_timeout", "keepalive_idle", "keepalive_interval"):
        with pytest.raises(UsageError, match=f"{option} must be a finite number of seconds > 0, not 0"):
            open_pg(**{option: 0})
    with pytest.raises(UsageError, match="keepalive_count must be an integer >= 1"):
        open_pg(keepalive_count=0)


def test_the_dsns_own_server_options_are_kept(postgres_dsn: str, pg_schema: str) -> None:
    separator = "&" if "?" in postgres_dsn else "?"
    dsn = f"{postgres_dsn}{separator}options=-c%20work_mem%3D8MB"
    with (
        PostgresEventStore(dsn, schema=pg_schema) as store,
        store.transaction(),
        store._connection() as conn,  # pyright: ignore[reportPrivateUsage]
    ):
        assert conn.execute("SHOW work_mem").fetchone() == ("8MB",)
        assert conn.execute("SHOW statement_timeout").fetchone() == ("30s",)


def test_a_transaction_left_idle_too_long_is_store_unavailable(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg(idle_in_transaction_timeout=0.2)
    with pytest.raises(StoreUnavailable), store.transaction():
        store.append([pending(1)])
        time.sleep(0.6)  # the caller's block waits on something else; the server ends the session
        store.append([pending(2)])
    assert store.last_seq() == 0


# 4. A write to a connection the server dropped is made once more, on a fresh one.


@pytest.mark.soak
def test_a_draw_written_to_a_dropped_pooled_connection_is_retried_fresh(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, types: EventTypeRegistry
) -> None:
    store = open_pg(pool_size=2)
    ledger = PinLedger(store, types)
    ran: list[str] = []
    for n in range(KILLS):

        def effect(n: int = n) -> str:
            # The model call outlasts the pooled connections: the server drops them meanwhile.
            pooled = [pid for pid in every_connection(postgres_dsn, store) if pid != lease_connection(store)]
            terminate(postgres_dsn, pooled)
            ran.append(f"d{n}")
            return f"d{n}"

        assert ledger.resolve(f"p1:model_call:{n}", kind="model_call", effect=effect, interpret=str) == f"d{n}"
    assert ran == [f"d{n}" for n in range(KILLS)]
    assert [(p.key, p.attempts) for p in ledger.pins()] == [(f"p1:model_call:{n}", 1) for n in range(KILLS)]
    ledger.commit()


def test_an_idle_session_timeout_shorter_than_a_model_call_loses_no_draw(
    postgres_dsn: str, pg_schema: str, types: EventTypeRegistry
) -> None:
    place = PostgresPlace.of(postgres_dsn, "public")
    # The server ends every session idle for 0.2 s; a model call takes longer than that.
    dsn = f"postgresql://postgres@{place.server}/{place.database}?options=-c%20idle_session_timeout%3D200"
    with PostgresEventStore(dsn, schema=pg_schema) as store:
        ledger = PinLedger(store, types)

        def slow_call() -> str:
            time.sleep(0.6)
            return "answer"

        for n in range(KILLS):
            key = f"p1:model_call:{n}"
            assert ledger.resolve(key, kind="model_call", effect=slow_call, interpret=str) == "answer"
        time.sleep(0.6)
        assert [p.attempts for p in ledger.pins()] == [1] * KILLS
        assert len(ledger.commit()) == KILLS


def fail_once(dsn: str, schema: str, table: str, sqlstate: str) -> None:
    """Make the first insert into one of the store's tables fail with `sqlstate`, and count the tries."""
    sql(dsn, f"CREATE SEQUENCE {schema}.tries")
    sql(
        dsn,
        f"CREATE FUNCTION {schema}.fail_once() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF nextval('{schema}.tries') = 1 THEN RAISE EXCEPTION 'once' USING ERRCODE = '{sqlstate}'; END IF;"
        " RETURN NEW; END $$",
    )
    sql(
        dsn,
        f"CREATE TRIGGER fail_once BEFORE INSERT ON {schema}.{table}"
        f" FOR EACH ROW EXECUTE FUNCTION {schema}.fail_once()",
    )


def test_a_serialization_failure_of_a_scratch_write_is_retried(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    store.scratch_get("u1", "k1")
    fail_once(postgres_dsn, pg_schema, "pin_scratch", "40001")
    pin = store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    assert (pin.raw_text, pin.attempts, pin.draw_no) == ('"a"', 1, 1)
    assert sql(postgres_dsn, f"SELECT last_value FROM {pg_schema}.tries") == [(2,)]


def test_a_lease_connection_lost_while_it_looked_alive_is_opened_again(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    store.scratch_get("u0", "k1")
    before = lease_connection(store)
    # What the server says as it ends a session (an administrator's kill), arriving as the lease is taken.
    fail_once(postgres_dsn, pg_schema, "unit_leases", "57P01")
    assert store.scratch_get("u1", "k1") is None
    assert lease_connection(store) != before
    assert sql(postgres_dsn, f"SELECT unit_id FROM {pg_schema}.unit_leases ORDER BY 1") == [("u0",), ("u1",)]


def test_a_breach_of_a_constraint_is_not_retried(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    sql(postgres_dsn, f"ALTER TABLE {pg_schema}.pin_scratch ADD CONSTRAINT short_raw CHECK (length(raw) < 5)")
    # A sequence is not rolled back: it counts the tries.
    sql(postgres_dsn, f"CREATE SEQUENCE {pg_schema}.tries")
    sql(
        postgres_dsn,
        f"CREATE FUNCTION {pg_schema}.count_try() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM nextval('{pg_schema}.tries'); RETURN NEW; END $$",
    )
    sql(
        postgres_dsn,
        f"CREATE TRIGGER count_try BEFORE INSERT ON {pg_schema}.pin_scratch"
        f" FOR EACH ROW EXECUTE FUNCTION {pg_schema}.count_try()",
    )
    with pytest.raises(StoreIntegrityError, match=r"writing scratch failed .*short_raw") as caught:
        store.scratch_put("u1", "k1", kind="model_call", raw='"too long"', fingerprint=None)
    assert isinstance(caught.value.__cause__, psycopg.errors.CheckViolation)
    assert sql(postgres_dsn, f"SELECT last_value FROM {pg_schema}.tries") == [(1,)]
