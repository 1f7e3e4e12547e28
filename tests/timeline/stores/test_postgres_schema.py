"""Where a PostgreSQL store lives (never naming the password), and store errors typed by what the caller can do."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from anagrapheus.errors import StoreError, StoreIntegrityError, StoreUnavailable
from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.events import PendingEvent

if TYPE_CHECKING:
    import psycopg

    from anagrapheus.timeline.stores.postgres import PostgresEventStore


pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import UsageError
from anagrapheus.timeline.stores.postgres_schema import PostgresPlace


@pytest.mark.parametrize(
    ("dsn", "server", "database"),
    [
        ("postgresql://agent@db.example:6543/runs", "db.example:6543", "runs"),
        ("postgresql://agent@db.example/runs", "db.example:5432", "runs"),
        ("postgresql://agent@db.example", "db.example:5432", "agent"),
        ("postgresql:///runs", "the local socket:5432", "runs"),
        ("", "the local socket:5432", "(default)"),
    ],
)
def test_a_place_names_server_and_database_with_their_defaults(dsn: str, server: str, database: str) -> None:
    place = PostgresPlace.of(dsn, "ledger")
    assert (place.server, place.database, place.schema) == (server, database, "ledger")
    assert str(place) == f"schema ledger of database {database} on {server}"


def test_a_malformed_dsn_is_refused_in_so_many_words() -> None:
    with pytest.raises(UsageError) as caught:
        PostgresPlace.of("host=x password=hunter2 port", "ledger")
    assert str(caught.value) == "the PostgreSQL DSN is malformed (not shown: it may hold a password)"
    assert caught.value.__cause__ is None


def event(n: int, *, event_id: str | None = None) -> PendingEvent:
    return PendingEvent(namespace="test", type="thing", schema_version=1, payload=f'{{"n":{n}}}', event_id=event_id)


# The classification, one row per kind of failure (psycopg's errors carry their SQLSTATE as a class attribute).


def classification() -> list[tuple[str, str]]:
    """Each psycopg error class (by SQLSTATE, or a name) and what the store makes of it."""
    return [
        # Lost sessions and aborted transactions: retried on a fresh connection, then StoreUnavailable.
        ("lost", "retry"),  # a connection lost has no SQLSTATE
        ("08006", "retry"),  # connection failure
        ("57P01", "retry"),  # admin shutdown (pg_terminate_backend)
        ("57P02", "retry"),  # crash shutdown
        ("57P03", "retry"),  # cannot connect now (starting up)
        ("57P05", "retry"),  # idle session timeout
        ("40001", "retry"),  # serialization failure
        ("40P01", "retry"),  # deadlock detected
        # A bound ran out, or the server had no room: StoreUnavailable at once.
        ("55P03", "unavailable"),  # lock not available (lock_timeout)
        ("57014", "unavailable"),  # query canceled (statement_timeout)
        ("25P03", "unavailable"),  # idle in transaction session timeout
        ("40003", "unavailable"),  # statement completion unknown: it may have taken effect
        ("53300", "unavailable"),  # too many connections
        ("PoolTimeout", "unavailable"),
        ("TooManyRequests", "unavailable"),
        # Breached constraints: StoreIntegrityError.
        ("23505", "integrity"),  # unique violation
        ("23503", "integrity"),  # foreign key violation
        ("23514", "integrity"),  # check violation
        ("23502", "integrity"),  # not null violation
        ("40002", "integrity"),  # transaction integrity constraint violation
        # What was asked is wrong: StoreError.
        ("42601", "error"),  # syntax error
        ("42P01", "error"),  # undefined table
        ("42703", "error"),  # undefined column
        ("42501", "error"),  # insufficient privilege
        ("28P01", "error"),  # invalid password
        ("3D000", "error"),  # invalid catalog name (no such database)
        ("P0001", "error"),  # a trigger's RAISE (the log is append-only)
        ("22P02", "error"),  # invalid text representation
        ("PoolClosed", "error"),  # the store was closed under the call
        ("InterfaceError", "error"),
    ]


def psycopg_error(name: str) -> psycopg.Error:
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")
    import psycopg_pool

    named: dict[str, Callable[[str], psycopg.Error]] = {
        "lost": psycopg.OperationalError,
        "PoolTimeout": psycopg_pool.PoolTimeout,
        "TooManyRequests": psycopg_pool.TooManyRequests,
        "PoolClosed": psycopg_pool.PoolClosed,
        "InterfaceError": psycopg.InterfaceError,
    }
    make = named[name] if name in named else psycopg.errors.lookup(name)
    return make("from the server")


@pytest.mark.parametrize(("error", "kind"), classification())
def test_a_psycopg_error_is_classified_by_what_the_caller_can_do(error: str, kind: str) -> None:
    from anagrapheus.timeline.stores.postgres_schema import PostgresPlace, failure

    e = psycopg_error(error)
    assert failure(e) == kind
    raised = {"retry": StoreUnavailable, "unavailable": StoreUnavailable, "integrity": StoreIntegrityError}
    place = PostgresPlace.of("postgresql://agent:secret@db.internal/runs", "s")
    with pytest.raises(StoreError) as caught, place.translated("reading"):
        raise e
    assert type(caught.value) is raised.get(kind, StoreError)
    assert str(caught.value) == "reading failed on schema s of database runs on db.internal:5432: from the server"
    assert caught.value.__cause__ is e


# Through the PostgreSQL store, against the server.


def sql(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)  # pyright: ignore[reportArgumentType]
        return cur.fetchall() if cur.description else []


@pytest.fixture
def on_insert(postgres_dsn: str, pg_schema: str) -> Iterator[Callable[[str, str], Callable[[], int]]]:
    """Run a PL/pgSQL statement before every insert into one of the store's tables; return how many tries came.

    The tries are counted by a sequence, which a rollback does not take back.
    """

    def install(table: str, statement: str) -> Callable[[], int]:
        sql(postgres_dsn, f"CREATE SEQUENCE IF NOT EXISTS {pg_schema}.tries")
        sql(
            postgres_dsn,
            f"CREATE FUNCTION {pg_schema}.on_{table}() RETURNS trigger LANGUAGE plpgsql AS $$ DECLARE try bigint;"
            f" BEGIN try := nextval('{pg_schema}.tries'); {statement}; RETURN NEW; END $$",
        )
        sql(
            postgres_dsn,
            f"CREATE TRIGGER on_{table} BEFORE INSERT ON {pg_schema}.{table}"
            f" FOR EACH ROW EXECUTE FUNCTION {pg_schema}.on_{table}()",
        )
        return lambda: int(sql(postgres_dsn, f"SELECT last_value FROM {pg_schema}.tries")[0][0])

    yield install


# The session ends itself, as an administrator's pg_terminate_backend ends it: the client reads 57P01 or a lost
# connection.
KILL_SESSION = "PERFORM pg_terminate_backend(pg_backend_pid())"


@pytest.mark.postgres
def test_a_breached_constraint_is_a_store_integrity_error(open_pg: Callable[..., PostgresEventStore]) -> None:
    import psycopg

    store = open_pg()
    store.append([event(1, event_id="e-1")])
    with pytest.raises(
        StoreIntegrityError,
        match=r"(?s)^appending events failed on schema .*\(event_id\)=\(e-1\) already exists",
    ) as caught:
        store.append([event(2, event_id="e-1")])
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    assert store.last_seq() == 1


@pytest.mark.postgres
@pytest.mark.parametrize("in_a_step_retried", [True, False])
def test_a_breached_constraint_is_not_retried(
    open_pg: Callable[..., PostgresEventStore],
    on_insert: Callable[[str, str], Callable[[], int]],
    in_a_step_retried: bool,
) -> None:
    store = open_pg()
    store.append([event(1, event_id="e-1")])
    tries = on_insert("events", "NULL")
    store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    with pytest.raises(StoreIntegrityError) as caught:
        if in_a_step_retried:
            # Settling a unit is retried after a lost connection; its duplicate event id is not.
            store.settle_unit("u1", outcome="committed", events=lambda pins: [event(2, event_id="e-1")])
        else:
            store.append([event(2, event_id="e-1")])
    assert "e-1" in str(caught.value)
    assert tries() == 1
    assert store.unit_outcome("u1") is None
    assert [pin.key for pin in store.scratch_list("u1")] == ["k1"]


@pytest.mark.postgres
def test_a_session_terminated_once_is_retried_on_a_fresh_connection(
    open_pg: Callable[..., PostgresEventStore], on_insert: Callable[[str, str], Callable[[], int]]
) -> None:
    store = open_pg()
    tries = on_insert("pin_scratch", f"IF try = 1 THEN {KILL_SESSION}; END IF")
    pin = store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    assert (pin.raw_text, pin.attempts, pin.draw_no) == ('"a"', 1, 1)
    assert tries() == 2


@pytest.mark.postgres
def test_a_session_terminated_at_every_try_is_store_unavailable_after_the_retry(
    open_pg: Callable[..., PostgresEventStore],
    on_insert: Callable[[str, str], Callable[[], int]],
    postgres_dsn: str,
    pg_schema: str,
) -> None:
    import psycopg

    store = open_pg()
    tries = on_insert("pin_scratch", KILL_SESSION)
    with pytest.raises(StoreUnavailable, match=r"^writing scratch failed on schema ") as caught:
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert tries() == 2
    # Once the server lets the session live, the store serves again, on fresh connections.
    sql(postgres_dsn, f"DROP TRIGGER on_pin_scratch ON {pg_schema}.pin_scratch")
    assert store.scratch_put("u1", "k1", kind="model_call", raw='"b"', fingerprint=None).raw_text == '"b"'


@pytest.mark.postgres
def test_a_lease_connection_terminated_at_every_try_is_store_unavailable_after_the_retry(
    open_pg: Callable[..., PostgresEventStore], on_insert: Callable[[str, str], Callable[[], int]]
) -> None:
    store = open_pg()
    tries = on_insert("unit_leases", KILL_SESSION)
    with pytest.raises(StoreUnavailable, match=r"^taking the lease of unit u1 failed on schema "):
        store.scratch_reuse("u1", "k1")
    assert tries() == 2


@pytest.mark.postgres
def test_a_session_terminated_inside_a_callers_transaction_is_not_retried(
    open_pg: Callable[..., PostgresEventStore], on_insert: Callable[[str, str], Callable[[], int]]
) -> None:
    store = open_pg()
    store.scratch_reuse("u1", "k1")  # the lease, taken outside the transaction
    tries = on_insert("pin_scratch", KILL_SESSION)
    with pytest.raises(StoreUnavailable), store.transaction():
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    assert tries() == 1
    assert store.scratch_list("u1") == []


@pytest.mark.postgres
@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_a_conflict_that_outlives_the_retry_is_store_unavailable(
    open_pg: Callable[..., PostgresEventStore], on_insert: Callable[[str, str], Callable[[], int]], sqlstate: str
) -> None:
    store = open_pg()
    tries = on_insert("pin_scratch", f"RAISE EXCEPTION 'conflict' USING ERRCODE = '{sqlstate}'")
    with pytest.raises(StoreUnavailable, match=r"writing scratch failed .*conflict"):
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    assert tries() == 2


@pytest.mark.postgres
def test_a_missing_table_is_a_store_error_to_fix(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    import psycopg

    store = open_pg()
    sql(postgres_dsn, f"DROP TABLE {pg_schema}.closed_units")
    with pytest.raises(StoreError, match=r"reading a unit's outcome failed .*closed_units") as caught:
        store.unit_outcome("u1")
    assert type(caught.value) is StoreError
    assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedTable)


# The SQLite store types its errors the same way.


def test_a_breached_constraint_in_sqlite_is_a_store_integrity_error(store: SQLiteEventStore) -> None:
    store.append([event(1, event_id="e-1")])
    with pytest.raises(StoreIntegrityError, match="UNIQUE constraint failed") as caught:
        store.append([event(2, event_id="e-1")])
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert store.last_seq() == 1


def test_a_sqlite_database_locked_past_its_busy_timeout_is_store_unavailable(db_path: Path) -> None:
    with SQLiteEventStore(db_path, busy_timeout=0.05) as store, closing(sqlite3.connect(db_path)) as blocker:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="database is locked"):
            store.append([event(1)])
        blocker.rollback()
        assert [e.seq for e in store.append([event(1)])] == [1]


def test_the_sqlite_logs_append_only_trigger_is_a_plain_store_error(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        store.append([event(1)])
        # No call of the store changes an event: the trigger is reached past it.
        changing = store._sql("changing an event")  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(StoreError, match="append-only") as caught, changing:
            store._conn.execute("DELETE FROM events")  # pyright: ignore[reportPrivateUsage]
        assert type(caught.value) is StoreError
