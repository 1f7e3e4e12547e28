"""SQLiteEventStore append and read throughput, as ratios to raw sqlite3 doing the same work in the same run.

The raw floor uses a second file with the very schema the store created (copied from its
sqlite_master) and the same pragmas (WAL, the same synchronous setting), and inserts the same
rows: the same payloads, an event id minted per row with uuid_utils.uuid7(), one timestamp per
transaction, seq left to SQLite's rowid. Reads select the same columns in seq order.

    python benchmarks/store.py            # default, well under a minute
    python benchmarks/store.py --long     # more rounds
    python benchmarks/store.py --quick    # smoke test: tiny sizes, one round
"""

from __future__ import annotations

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

from anagrapheus.timeline import SQLiteEventStore
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


def main() -> None:
    parser = options((__doc__ or "").splitlines()[0], rounds=11)
    args = parser.parse_args()
    rounds = use_options(args)
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
    sys.stdout.flush()


if __name__ == "__main__":
    main()
