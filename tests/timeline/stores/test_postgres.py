"""The PostgreSQL store: the conformance suite, plus what only it has (schemas, the seq counter, unit leases, what a
failing statement says)."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import SchemaTooNew, SeqConflict, StoreError, UnitBusy, UsageError  # noqa: E402
from anagrapheus.testing.conformance import StoreConformance, pending  # noqa: E402
from anagrapheus.timeline import EventTypeRegistry, PinLedger, TimelineStore  # noqa: E402
from anagrapheus.timeline.stores.postgres import PostgresEventStore  # noqa: E402
from anagrapheus.timeline.stores.postgres_schema import PostgresPlace  # noqa: E402

from ...store_conformance import copied_event  # noqa: E402

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
    assert names == [
        ("0001_events",),
        ("0002_pin_scratch",),
        ("0003_closed_units",),
        ("0004_unit_leases",),
        ("0005_pin_functions",),
    ]
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


def refuse(dsn: str, schema: str, when: str, table: str) -> None:
    """Make every `when` (e.g. BEFORE INSERT) on one of the store's tables fail with the message 'refused here'."""
    sql(
        dsn,
        f"CREATE FUNCTION {schema}.refuse_here() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'refused here'; END $$",
    )
    sql(
        dsn,
        f"CREATE TRIGGER refuse_here {when} ON {schema}.{table} FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_here()",
    )


def failure(call: Callable[[], object]) -> str:
    with pytest.raises(StoreError) as caught:
        call()
    assert isinstance(caught.value.__cause__, psycopg.Error)
    return str(caught.value)


def test_a_refused_seq_number_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    refuse(postgres_dsn, pg_schema, "BEFORE UPDATE", "log_head")
    where = f"on {store.place}: refused here"
    assert failure(lambda: store.append([pending(1)])).startswith(f"taking seq numbers failed {where}")
    assert failure(lambda: store.append_stored([copied_event(1)])).startswith(f"taking seq numbers failed {where}")


def test_a_refused_scratch_write_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    refuse(postgres_dsn, pg_schema, "BEFORE INSERT OR UPDATE OR DELETE", "pin_scratch")
    where = f"on {store.place}: refused here"
    put = lambda: store.scratch_put("u1", "k2", kind="model_call", raw='"b"', fingerprint=None)  # noqa: E731
    assert failure(put).startswith(f"writing scratch failed {where}")
    assert failure(lambda: store.scratch_reuse("u1", "k1")).startswith(f"reusing a pin failed {where}")
    settle = lambda: store.settle_unit("u1", outcome="committed", events=lambda pins: [])  # noqa: E731
    # Pipeline mode sends the unit's closing statements with the COMMIT: their error surfaces at either,
    # whichever the server's answer reaches first.
    assert failure(settle).startswith((f"closing the unit failed {where}", f"committing a transaction failed {where}"))
    # Nothing of the unit changed: each failed step rolled its transaction back.
    assert [(p.key, p.attempts) for p in store.scratch_list("u1")] == [("k1", 1)]
    assert store.unit_outcome("u1") is None


def test_a_refused_lease_on_a_units_first_ask_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    store = open_pg()
    refuse(postgres_dsn, pg_schema, "BEFORE INSERT", "unit_leases")
    where = f"on {store.place}: refused here"
    assert failure(lambda: store.scratch_reuse("u1", "k1")).startswith(f"taking the lease of unit u1 failed {where}")


@pytest.mark.parametrize(
    ("table", "action", "call"),
    [
        ("log_head", "reading the last seq", lambda store: store.last_seq()),
        ("events", "reading events", lambda store: list(store.read())),
        ("pin_scratch", "reading scratch", lambda store: store.scratch_get("u1", "k1")),
        ("pin_scratch", "listing scratch", lambda store: store.scratch_list("u1")),
        ("pin_scratch", "listing open units", lambda store: store.open_units()),
        ("closed_units", "reading a unit's outcome", lambda store: store.unit_outcome("u1")),
    ],
)
def test_a_failed_read_names_the_step(
    open_pg: Callable[..., PostgresEventStore],
    postgres_dsn: str,
    pg_schema: str,
    table: str,
    action: str,
    call: Callable[[PostgresEventStore], object],
) -> None:
    store = open_pg()
    sql(postgres_dsn, f"ALTER TABLE {pg_schema}.{table} RENAME TO gone")
    message = failure(lambda: call(store))
    assert message.startswith(f"{action} failed on {store.place}: relation ")
    assert "does not exist" in message


def test_a_held_unit_is_refused_to_every_step_that_draws(open_pg: Callable[..., PostgresEventStore]) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.1)
    holder.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    steps: list[Callable[[], object]] = [
        lambda: other.scratch_get("u1", "k1"),
        lambda: other.scratch_reuse("u1", "k1"),
        lambda: other.scratch_put("u1", "k2", kind="model_call", raw='"b"', fingerprint=None),
        lambda: other.settle_unit("u1", outcome="abandoned", events=lambda pins: []),
    ]
    for step in steps:
        with pytest.raises(UnitBusy) as caught:
            step()
        assert caught.value.unit_id == "u1"
    # The lease is the unit's own: another unit is free to the other store.
    assert other.scratch_get("u2", "k1") is None
    assert other.scratch_put("u2", "k1", kind="model_call", raw='"c"', fingerprint=None).draw_no == 1
    assert [(p.key, p.attempts) for p in holder.scratch_list("u1")] == [("k1", 1)]


def test_a_store_keeps_every_lease_it_took(open_pg: Callable[..., PostgresEventStore]) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.1)
    holder.scratch_get("u1", "k1")
    holder.scratch_get("u2", "k1")
    # The lease of u1 lives in the connection that took it: a second lease must not cost the first.
    gc.collect()
    with pytest.raises(UnitBusy):
        other.scratch_get("u1", "k1")
    with pytest.raises(UnitBusy):
        other.scratch_get("u2", "k1")


def lease_connection(store: PostgresEventStore) -> int:
    """The server process of the store's lease connection (there is no public handle on it)."""
    conn = store._beacon_conn  # pyright: ignore[reportPrivateUsage]
    assert conn is not None
    return conn.info.backend_pid


def test_a_lost_lease_connection_is_replaced_and_the_leases_kept(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str
) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.1)
    holder.scratch_get("u1", "k1")
    pid = lease_connection(holder)
    sql(postgres_dsn, f"SELECT pg_terminate_backend({pid})")
    # The next step opens a new lease connection (at once, or once the old one fails it, when the server's
    # notice of its end is still on the way); the holder's leases are rows, and stay its own.
    assert holder.scratch_get("u2", "k1") is None
    assert lease_connection(holder) != pid
    for unit in ("u1", "u2"):
        with pytest.raises(UnitBusy):
            other.scratch_get(unit, "k1")
    holder.close()
    assert other.scratch_get("u1", "k1") is None


def test_units_in_open_transactions_do_not_wait_for_each_other(open_pg: Callable[..., PostgresEventStore]) -> None:
    first, second = open_pg(), open_pg()
    done: list[str] = []

    def put_and_settle() -> None:
        second.scratch_put("u2", "k1", kind="model_call", raw='"b"', fingerprint=None)
        done.append("put")
        second.settle_unit("u2", outcome="committed", events=lambda pins: [])
        done.append("settled")

    with first.transaction():
        first.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        first.settle_unit("u1", outcome="committed", events=lambda pins: [])
        # u1 stays locked until this transaction ends; u2 is another unit and must not wait for it.
        worker = threading.Thread(target=put_and_settle)
        worker.start()
        worker.join(timeout=10)
        finished = list(done)
    worker.join()
    assert finished == ["put", "settled"]


def test_threads_of_one_store_drawing_in_one_unit_take_each_draw_number_once(
    open_pg: Callable[..., PostgresEventStore],
) -> None:
    # Each write takes the unit's lock on the server, and numbers its draw after the last one committed there: no
    # lock of the store's own serialises them (one would hold up the store's other units too).
    store = open_pg(pool_size=4)
    store.scratch_get("u1", "k0")
    threads, rounds = 4, 10
    start = threading.Barrier(threads)
    failed: list[BaseException] = []

    def draw(n: int) -> None:
        start.wait()
        try:
            for r in range(rounds):
                store.scratch_put("u1", f"k{n}-{r}", kind="model_call", raw=f'"{n}"', fingerprint=None)
        except BaseException as e:  # reported below
            failed.append(e)

    workers = [threading.Thread(target=draw, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failed == []
    assert sorted(pin.draw_no for pin in store.scratch_list("u1")) == list(range(1, threads * rounds + 1))


def test_a_pool_of_one_connection_serves(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg(pool_size=1)
    store.append([pending(1)])
    assert [e.seq for e in store.read()] == [1]
    with pytest.raises(UsageError) as caught:
        open_pg(pool_size=0)
    assert str(caught.value) == "pool_size must be >= 1"


def test_a_negative_limit_is_refused(open_pg: Callable[..., PostgresEventStore]) -> None:
    with pytest.raises(UsageError) as caught:
        open_pg().read(limit=-1)
    assert str(caught.value) == "limit must be >= 0"


@pytest.mark.anyio
async def test_a_tasks_write_never_joins_another_tasks_transaction(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg()
    inside = asyncio.Event()
    written = asyncio.Event()

    async def rolled_back() -> None:
        with pytest.raises(RuntimeError, match="undone"), store.transaction():
            inside.set()
            await written.wait()
            raise RuntimeError("undone")

    async def writer() -> None:
        await inside.wait()
        store.append([pending(1)])
        written.set()

    await asyncio.gather(rolled_back(), writer())
    # The other task's append committed on its own connection: the rollback of this one took nothing of it.
    assert [e.payload for e in store.read()] == ['{"n":1}']


def test_a_store_lends_as_many_connections_as_its_pool_holds(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg(pool_size=2, connect_timeout=2.0)
    seen: list[int] = []
    # A transaction keeps its connection to itself; a second thread reads on the pool's other one meanwhile.
    with store.transaction():
        store.append([pending(1)])
        reader = threading.Thread(target=lambda: seen.append(store.last_seq()))
        reader.start()
        reader.join(timeout=10)
        assert seen == [0]
    reader.join()
    assert store.last_seq() == 1


def test_a_password_in_a_servers_message_is_masked(postgres_dsn: str) -> None:
    # The server names the role it refuses; here the role's name is the password itself.
    place = PostgresPlace.of(postgres_dsn, "anagrapheus")
    host, port = place.server.rsplit(":", 1)
    with pytest.raises(StoreError) as caught:
        PostgresEventStore(f"postgresql://hunter2:hunter2@{host}:{port}/{place.database}")
    message = str(caught.value)
    assert message.startswith(
        f"connecting failed on schema anagrapheus of database {place.database} on {host}:{port}: "
    )
    assert 'role "***" does not exist' in message
    assert "hunter2" not in message
    # Without a password nothing is masked, not even a role named None.
    with pytest.raises(StoreError) as unmasked:
        PostgresEventStore(f"postgresql://None@{host}:{port}/{place.database}")
    assert 'role "None" does not exist' in str(unmasked.value)


def test_a_failed_migration_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    # A table of the store's name already there, made by something else: the first migration cannot create it.
    sql(postgres_dsn, f"CREATE SCHEMA {pg_schema}")
    sql(postgres_dsn, f"CREATE TABLE {pg_schema}.events (x int)")
    with pytest.raises(StoreError) as caught:
        open_pg()
    assert str(caught.value).startswith(f"migrating failed on schema {pg_schema} of database ")
    assert 'relation "events" already exists' in str(caught.value)
    assert sql(postgres_dsn, f"SELECT tablename FROM pg_tables WHERE schemaname = '{pg_schema}'") == [("events",)]


def test_an_unreadable_migration_record_names_the_step(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    sql(postgres_dsn, f"CREATE SCHEMA {pg_schema}")
    sql(postgres_dsn, f"CREATE TABLE {pg_schema}.anagrapheus_migrations (x int)")
    with pytest.raises(StoreError) as caught:
        open_pg()
    assert str(caught.value).startswith(f"reading the migrations failed on schema {pg_schema} of database ")


def test_a_schema_part_way_migrated_is_brought_forward(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    open_pg().append([pending(1)])
    # As a schema left by a release that knew only the first migration.
    sql(postgres_dsn, f"DROP TABLE {pg_schema}.pin_scratch, {pg_schema}.closed_units, {pg_schema}.unit_leases")
    sql(postgres_dsn, f"DELETE FROM {pg_schema}.anagrapheus_migrations WHERE name <> '0001_events'")
    store = open_pg()
    names = sql(postgres_dsn, f"SELECT name FROM {pg_schema}.anagrapheus_migrations ORDER BY name")
    assert names == [
        ("0001_events",),
        ("0002_pin_scratch",),
        ("0003_closed_units",),
        ("0004_unit_leases",),
        ("0005_pin_functions",),
    ]
    assert store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None).draw_no == 1
    assert [e.seq for e in store.read()] == [1]


def test_a_migrated_schema_opens_without_the_migration_lock(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str, pg_schema: str
) -> None:
    open_pg().close()
    opened: list[PostgresEventStore] = []
    # Another worker migrating (or stuck doing so) holds the lock; a store of a migrated schema needs none of it.
    with psycopg.connect(postgres_dsn) as migrating:
        migrating.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"anagrapheus migrate {pg_schema}",)
        )
        opener = threading.Thread(target=lambda: opened.append(open_pg()))
        opener.start()
        opener.join(timeout=10)
        finished = list(opened)
        migrating.rollback()
    opener.join()
    assert len(finished) == 1


def test_a_unit_settled_as_its_lease_connection_is_lost_is_reported_settled(
    open_pg: Callable[..., PostgresEventStore], postgres_dsn: str
) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.1)
    holder.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    sql(postgres_dsn, f"SELECT pg_terminate_backend({lease_connection(holder)})")
    # The settle commits on a pooled connection; the lease was a row, and goes with the commit.
    settled = holder.settle_unit("u1", outcome="committed", events=lambda pins: [pending(len(pins))])
    assert [e.seq for e in settled] == [1]
    assert holder.unit_outcome("u1") == "committed"
    assert other.scratch_get("u1", "k1") is None
    # The store takes the next lease on a new connection.
    assert holder.scratch_get("u2", "k1") is None
    with pytest.raises(UnitBusy):
        other.scratch_get("u2", "k1")


def test_settling_a_unit_lets_go_of_its_lease_only(open_pg: Callable[..., PostgresEventStore]) -> None:
    holder, other = open_pg(), open_pg(unit_wait=0.1)
    holder.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    holder.scratch_put("u2", "k1", kind="model_call", raw='"b"', fingerprint=None)
    holder.settle_unit("u1", outcome="committed", events=lambda pins: [])
    assert other.scratch_get("u1", "k1") is None
    with pytest.raises(UnitBusy):
        other.scratch_get("u2", "k1")


def _unit_of_two(store: PostgresEventStore, types: EventTypeRegistry, tag: str) -> list[int]:
    ledger = PinLedger(store, types)
    answers = [ledger.resolve(f"k{n}", kind="tool_call", effect=lambda n=n: n, interpret=int) for n in range(2)]
    ledger.commit()
    return answers


def test_draws_and_commits_go_on_after_psycopg_drops_the_prepared_statements(
    open_pg: Callable[..., PostgresEventStore],
) -> None:
    # A rollback on a connection makes psycopg deallocate every statement prepared on it, the store's own too: each
    # is prepared again when the server says it is gone, and one prepared again since is not prepared twice.
    store = open_pg(pool_size=1)
    types = EventTypeRegistry()
    assert _unit_of_two(store, types, "before") == [0, 1]
    for _ in range(6):
        store.last_seq()  # prepared by psycopg too: it drops what was prepared only if it prepared something
    for n in range(2):
        with pytest.raises(SeqConflict):
            store.append([pending(n)], expected_last_seq=99)  # rolled back through psycopg
        store.last_seq()  # psycopg's next statement on the connection deallocates them all
        assert _unit_of_two(store, types, f"after{n}") == [0, 1]
    assert _unit_of_two(store, types, "last") == [0, 1]
    assert sum(1 for e in store.read() if e.type == "pin_promoted") == 8


def test_a_settle_whose_events_cannot_be_made_leaves_the_unit_open_and_the_connection_usable(
    open_pg: Callable[..., PostgresEventStore],
) -> None:
    store = open_pg(pool_size=1)
    store.scratch_reuse("u", "k")
    store.scratch_put("u", "k", kind="tool_call", raw="1", fingerprint=None)

    def refused(pins: object) -> list[object]:
        raise RuntimeError("no events")

    with pytest.raises(RuntimeError, match="no events"):
        store.settle_unit("u", outcome="committed", events=refused)  # pyright: ignore[reportArgumentType]
    assert store.unit_outcome("u") is None
    assert [pin.key for pin in store.scratch_list("u")] == ["k"]
    assert store.settle_unit("u", outcome="committed", events=lambda pins: [pending(1)])[0].seq == 1
    assert store.unit_outcome("u") == "committed"


def test_text_beyond_ascii_is_drawn_and_read_back_as_it_was(open_pg: Callable[..., PostgresEventStore]) -> None:
    store = open_pg(pool_size=1)
    key, raw = "p1:ключ:☃", '"caf\u00e9 \U0001f600"'
    assert store.scratch_reuse("ü", key) is None
    pin = store.scratch_put("ü", key, kind="tool_call", raw=raw, fingerprint='{"é":"ß"}')
    assert (pin.unit_id, pin.key, pin.raw_text, pin.fingerprint) == ("ü", key, raw, '{"é":"ß"}')
    again = store.scratch_reuse("ü", key)
    assert again is not None and (again.key, again.raw_text, again.attempts) == (key, raw, 2)
