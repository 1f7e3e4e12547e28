"""SQLiteEventStore append and read throughput against raw sqlite3; many writer processes, Postgres against SQLite.

The raw floor uses a second file with the very schema the store created (copied from its
sqlite_master) and the same pragmas (WAL, the same synchronous setting), and inserts the same
rows: the same payloads, an event id minted per row with uuid_utils.uuid7(), one timestamp per
transaction, seq left to SQLite's rowid. Reads select the same columns in seq order.

The writers part forks 1, 2, 4 and 8 processes that commit units of work (4 pins each) into one
PostgresEventStore schema, then into one SQLite file, and prints commits/s and p99 commit latency
with the ratio to SQLite at the same writer count; then the two Postgres seq mechanisms (a locked
counter row, an advisory lock with max(seq)) in raw psycopg. Postgres is skipped, saying why, when no
server answers at ANAGRAPHEUS_POSTGRES_DSN (default postgresql://postgres@127.0.0.1:5432/test).

    python benchmarks/store.py            # appends and reads, well under a minute
    python benchmarks/store.py --long     # more rounds
    python benchmarks/store.py --quick    # smoke test: tiny sizes, one round
    python benchmarks/store.py --part writers --units 50    # a few minutes
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import uuid_utils
from _measure import (
    Aim,
    Variant,
    compare,
    machine_line,
    options,
    print_rates,
    print_table,
    raw_connection,
    store_schema,
    use_options,
)
from _writers import DSN, Run, postgres_unavailable, print_runs, run_seq_mechanism, run_writers

from anagrapheus.timeline import SQLiteEventStore, TimelineStore
from anagrapheus.timeline.events import PendingEvent

COLUMNS = "event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"


def payloads(n: int) -> list[PendingEvent]:
    """Events shaped like promoted pins: ~300 bytes of canonical JSON each."""
    return [
        PendingEvent(
            namespace="anagrapheus",
            type="pin_promoted",
            schema_version=1,
            payload=(
                '{"attempts":1,"fingerprint":null,"key":"p1:model_call:'
                + f"{i:064x}"
                + '","kind":"model_call","raw":{"parts":[{"content":"answer number '
                + str(i)
                + ' from the scripted model","part_kind":"text"}]},"unit_id":"0193a5b2-7c1d-7e3f-8a9b-'
                + f"{i:012x}"
                + '"}'
            ),
            correlation_id="0193a5b2-7c1d-7e3f-8a9b-000000000000",
        )
        for i in range(n)
    ]


def timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class RawLog:
    """The floor: plain sqlite3 on a file with the store's own schema and pragmas."""

    def __init__(self, path: Path, schema: list[str], synchronous: str) -> None:
        self.conn = raw_connection(path, schema, synchronous)

    def append(self, events: list[PendingEvent]) -> None:
        created_at = timestamp()
        rows = [
            (
                str(uuid_utils.uuid7()),
                e.namespace,
                e.type,
                e.schema_version,
                e.causation_id,
                e.correlation_id,
                created_at,
                e.payload,
            )
            for e in events
        ]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(f"INSERT INTO events ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?)", rows)
        self.conn.execute("COMMIT")

    def read_all(self) -> int:
        count = 0
        for _row in self.conn.execute(f"SELECT seq, {COLUMNS} FROM events ORDER BY seq"):
            count += 1
        return count


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def writers(root: Path, *, quick: bool, units: int, synchronous: str) -> None:
    """Writer processes committing units: Postgres against one SQLite file, then the two seq mechanisms."""
    counts = [1, 2] if quick else [1, 2, 4, 8]
    print(f"\nWriters: {units} unit commits of 4 pins per writer process, synchronous={synchronous} for SQLite")
    sqlite_runs: dict[int, Run] = {}
    for n in counts:
        path = root / f"writers-{n}.db"
        SQLiteEventStore(path).close()

        def open_sqlite(path: Path = path) -> TimelineStore:
            return SQLiteEventStore(path, synchronous=synchronous)  # type: ignore[arg-type]

        sqlite_runs[n] = run_writers("SQLiteEventStore, one file", open_sqlite, n, units)
    print_runs("Unit commits (baseline: SQLite at the same writer count)", list(sqlite_runs.values()), sqlite_runs)
    reason = postgres_unavailable(DSN)
    if reason is not None:
        print(f"  PostgresEventStore skipped: {reason}")
        return
    import psycopg

    from anagrapheus.timeline.stores.postgres import PostgresEventStore

    pg_runs: list[Run] = []
    for n in counts:
        schema = f"anagrapheus_bench_w{n}_{os.getpid()}"
        PostgresEventStore(DSN, schema=schema).close()

        def open_pg(schema: str = schema) -> TimelineStore:
            return PostgresEventStore(DSN, schema=schema, pool_size=1)

        try:
            pg_runs.append(run_writers("PostgresEventStore, one schema", open_pg, n, units))
        finally:
            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]
    print_runs("", pg_runs, sqlite_runs)
    per_writer = units * 4
    mechanisms = [run_seq_mechanism(DSN, m, n, per_writer) for n in counts for m in ("counter row", "advisory lock")]
    counter = {run.writers: run for run in mechanisms if run.label == "counter row"}
    print_runs(
        f"Postgres seq mechanisms, raw psycopg, {per_writer} one-event transactions per writer"
        " (baseline: the counter row)",
        mechanisms,
        counter,
    )


def main() -> None:
    parser = options((__doc__ or "").splitlines()[0], rounds=11)
    parser.add_argument("--part", choices=["appends", "writers", "all"], default="appends", help="which part to run")
    parser.add_argument("--units", type=int, default=100, help="unit commits per writer process (writers part)")
    args = parser.parse_args()
    rounds = use_options(args)
    if args.part == "writers":
        print(f"benchmarks/store.py  {machine_line()}")
        with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
            writers(Path(tmp), quick=args.quick, units=5 if args.quick else args.units, synchronous=args.synchronous)
        return
    batch_size = 200 if args.quick else 10_000
    singles = 10 if args.quick else 100
    read_size = 500 if args.quick else 100_000
    sync = args.synchronous

    print(f"benchmarks/store.py  {machine_line()}")
    print(f"  synchronous={sync}, journal_mode=WAL, rounds={rounds}, sqlite {sqlite3.sqlite_version}")

    with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
        root = Path(tmp)
        files = iter(range(1_000_000))
        SQLiteEventStore(root / "schema.db", synchronous=sync).close()
        schema = store_schema(root / "schema.db", table="events")

        def fresh_store() -> SQLiteEventStore:
            return SQLiteEventStore(root / f"store-{next(files)}.db", synchronous=sync)

        def fresh_raw() -> RawLog:
            return RawLog(root / f"raw-{next(files)}.db", schema, sync)

        # One event per transaction, into one growing file each.
        one = payloads(singles)
        store1, raw1 = fresh_store(), fresh_raw()

        def store_singles(n: int) -> float:
            start = time.perf_counter()
            for i in range(n):
                store1.append([one[i % singles]])
            return time.perf_counter() - start

        def raw_singles(n: int) -> float:
            start = time.perf_counter()
            for i in range(n):
                raw1.append([one[i % singles]])
            return time.perf_counter() - start

        rows = compare(
            Variant("raw sqlite3, one insert per transaction", raw_singles, unit="event"),
            [Variant("SQLiteEventStore.append([event])", store_singles, unit="event")],
            n=singles,
            rounds=rounds,
        )
        print_table(
            "Append, one event per transaction (per event)", "raw sqlite3 INSERT in BEGIN IMMEDIATE..COMMIT", rows
        )
        print_rates(rows, items=1, unit="events")

        # A batch in one transaction, each sample into a fresh file.
        batch = payloads(batch_size)

        def store_batch(n: int) -> float:
            total = 0.0
            for _ in range(n):
                store = fresh_store()
                total += timed(lambda s=store: s.append(batch))
                store.close()
            return total

        def raw_batch(n: int) -> float:
            total = 0.0
            for _ in range(n):
                raw = fresh_raw()
                total += timed(lambda r=raw: r.append(batch))
                raw.conn.close()
            return total

        rows = compare(
            Variant(f"raw sqlite3 executemany of {batch_size:,}", raw_batch, unit="batch"),
            [Variant(f"SQLiteEventStore.append({batch_size:,} events)", store_batch, aim=Aim(at_most=2.0))],
            n=1,
            rounds=rounds,
        )
        print_table(f"Append, a batch of {batch_size:,} events in one transaction (per batch)", "raw sqlite3", rows)
        print_rates(rows, items=batch_size, unit="events")

        # Reads of the whole log.
        store_r, raw_r = fresh_store(), fresh_raw()
        events = payloads(read_size)
        for start in range(0, read_size, 10_000):
            store_r.append(events[start : start + 10_000])
            raw_r.append(events[start : start + 10_000])

        def store_read(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                count = sum(1 for _ in store_r.read())
                assert count == read_size
            return time.perf_counter() - start

        def raw_read(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                assert raw_r.read_all() == read_size
            return time.perf_counter() - start

        rows = compare(
            Variant("raw sqlite3 SELECT ... ORDER BY seq", raw_read),
            [Variant("SQLiteEventStore.read()", store_read)],
            n=1,
            rounds=rounds,
        )
        print_table(f"Read the whole log of {read_size:,} events (per full read)", "raw sqlite3 cursor", rows)
        print_rates(rows, items=read_size, unit="events")
        for closing in (store1, store_r):
            closing.close()
        for conn in (raw1.conn, raw_r.conn):
            conn.close()
        if args.part == "all":
            writers(root, quick=args.quick, units=5 if args.quick else args.units, synchronous=sync)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
