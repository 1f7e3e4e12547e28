"""The PostgreSQL store: the conformance suite, plus what only it has (schemas, the seq counter, unit leases)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import SchemaTooNew, SeqConflict, StoreError, UnitBusy, UsageError  # noqa: E402
from anagrapheus.testing.conformance import StoreConformance, pending  # noqa: E402
from anagrapheus.timeline import EventTypeRegistry, PinLedger, TimelineStore  # noqa: E402
from anagrapheus.timeline.postgres import PostgresEventStore  # noqa: E402

pytestmark = pytest.mark.postgres


class TestPostgresConformance(StoreConformance):
    @pytest.fixture
    def make_store(self, open_pg: Callable[..., PostgresEventStore]) -> Callable[[], TimelineStore]:
        return open_pg


def sql(dsn: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)  # pyright: ignore
        return cur.fetchall() if cur.description else []


def test_migrations_are_recorded_in_the_callers_schema(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    open_pg()
    open_pg()  # a second open applies nothing twice
    names = sql(postgres_dsn, f"SELECT name FROM {pg_schema}.anagrapheus_migrations ORDER BY name")
    assert names == [("0001_events",), ("0002_pin_scratch",), ("0003_closed_units",), ("0004_unit_leases",)]
    tables = sql(postgres_dsn, f"SELECT tablename FROM pg_tables WHERE schemaname = '{pg_schema}' ORDER BY 1")
    assert tables == [
        ("anagrapheus_migrations",),
        ("closed_units",),
        ("events",),
        ("log_head",),
        ("pin_scratch",),
        ("unit_leases",),
    ]


def test_a_schema_newer_than_the_code_is_refused(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    open_pg().close()
    sql(postgres_dsn, f"INSERT INTO {pg_schema}.anagrapheus_migrations VALUES ('0099_from_the_future', 'x')")
    with pytest.raises(SchemaTooNew, match="0099_from_the_future") as caught:
        open_pg()
    assert pg_schema in str(caught.value)


def test_schemas_are_separate_logs(postgres_dsn: str, pg_schema: str) -> None:
    other = pg_schema + "_b"
    try:
        with (
            PostgresEventStore(postgres_dsn, schema=pg_schema) as a,
            PostgresEventStore(postgres_dsn, schema=other) as b,
        ):
            a.append([pending(1), pending(2)])
            b.append([pending(3)])
            assert [e.seq for e in a.read()] == [1, 2]
            assert [(e.seq, e.payload) for e in b.read()] == [(1, '{"n":3}')]
    finally:
        sql(postgres_dsn, f"DROP SCHEMA IF EXISTS {other} CASCADE")


def test_a_bad_schema_name_is_a_usage_error(postgres_dsn: str) -> None:
    with pytest.raises(UsageError, match="lowercase SQL identifier"):
        PostgresEventStore(postgres_dsn, schema='x"; DROP TABLE y; --')


def test_the_log_refuses_updates_deletes_and_truncation(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    open_pg().append([pending(1)])
    for statement in ("UPDATE {s}.events SET payload = '{{}}'", "DELETE FROM {s}.events", "TRUNCATE {s}.events"):
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            sql(postgres_dsn, statement.format(s=pg_schema))


def test_errors_name_server_and_database_never_the_password() -> None:
    # Nothing listens on port 1: the connection is refused at once.
    dsn = "postgresql://agent:hunter2@127.0.0.1:1/ledgerdb?connect_timeout=2"
    with pytest.raises(StoreError) as caught:
        PostgresEventStore(dsn)
    message = str(caught.value)
    assert "127.0.0.1:1" in message
    assert "ledgerdb" in message
    assert "hunter2" not in message
    assert isinstance(caught.value.__cause__, psycopg.Error)


def test_a_malformed_dsn_is_refused_without_echoing_it() -> None:
    with pytest.raises(UsageError) as caught:
        PostgresEventStore("host=x password=hunter2 port")
    assert "hunter2" not in str(caught.value)


def test_a_closed_store_raises_store_errors(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg()
    store.close()
    with pytest.raises(StoreError, match="on schema"):
        store.last_seq()


def test_a_rolled_back_append_leaves_no_gap(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg()
    store.append([pending(1)])
    twin = pending(2).__class__(namespace="t", type="x", schema_version=1, payload="{}", event_id="same")
    with pytest.raises(StoreError):
        store.append([twin, twin])
    with pytest.raises(SeqConflict):
        store.append([pending(3)], expected_last_seq=0)
    store.append([pending(4)])
    assert [e.seq for e in store.read()] == [1, 2]
    assert store.last_seq() == 2


def test_stores_on_separate_connections_never_share_a_seq(open_pg: Callable[..., PostgresEventStore]) -> None:
    stores = [open_pg(pool_size=2) for _ in range(3)]
    conflicts: list[SeqConflict] = []

    def writer(store: PostgresEventStore, tag: int) -> None:
        for i in range(40):
            store.append([pending(tag * 100 + i), pending(tag * 100 + i)])
            try:
                store.append([pending(-1)], expected_last_seq=store.last_seq())
            except SeqConflict as e:
                conflicts.append(e)

    threads = [threading.Thread(target=writer, args=(stores[t % 3], t)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [e.seq for e in stores[0].read()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == 6 * 40 * 2 + 6 * 40 - len(conflicts)
    assert stores[1].last_seq() == len(seqs)


def test_injected_clock_and_ids(open_pg: Callable[..., PostgresEventStore]) -> None:
    ids = count(1)
    store = open_pg(
        clock=lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        new_event_id=lambda: f"01900000-0000-7000-8000-{next(ids):012d}",
    )
    first, second = store.append([pending(1), pending(2)])
    assert first.created_at == "2026-01-02T03:04:05.000000Z"
    assert second.event_id == "01900000-0000-7000-8000-000000000002"
    assert list(store.read()) == [first, second]
    naive = open_pg(clock=lambda: datetime(2026, 1, 1))
    with pytest.raises(UsageError, match="timezone-aware"):
        naive.append([pending(1)])


def test_a_second_store_is_refused_a_held_unit_before_any_effect(
    open_pg: Callable[..., PostgresEventStore], types: EventTypeRegistry
) -> None:
    first, second = open_pg(), open_pg(unit_wait=0.2)
    mine = PinLedger(first, types)
    mine.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: 1, interpret=int)
    ran: list[str] = []
    theirs = PinLedger(second, types, unit_id=mine.unit_id)
    with pytest.raises(UnitBusy) as caught:
        theirs.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: ran.append("a") or 2, interpret=int)
    with pytest.raises(UnitBusy):
        theirs.resolve("p1:tool_call:b", kind="tool_call", effect=lambda: ran.append("b") or 2, interpret=int)
    assert ran == []
    assert caught.value.unit_id == mine.unit_id
    # Other units are free; and once the holder commits, the unit is free again (and empty).
    PinLedger(second, types).resolve("p1:tool_call:a", kind="tool_call", effect=lambda: 3, interpret=int)
    mine.commit()
    assert second.scratch_list(mine.unit_id) == []
    assert second.scratch_get(mine.unit_id, "p1:tool_call:a") is None


def test_a_closed_store_frees_its_units_for_another(
    open_pg: Callable[..., PostgresEventStore], types: EventTypeRegistry
) -> None:
    first, second = open_pg(), open_pg(unit_wait=5.0)
    dying = PinLedger(first, types)
    dying.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: 1, interpret=int)
    first.close()
    resumed = PinLedger(second, types, unit_id=dying.unit_id)
    assert resumed.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: 99, interpret=int) == 1
    assert [e.type for e in (resumed.commit())] == ["pin_promoted"]
