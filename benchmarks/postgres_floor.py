"""PostgresEventStore against a hand-written psycopg floor doing the same durable writes, and the wire per unit.

A unit is 2 draws and a commit. The store's writer draws with `PinLedger.resolve` and commits with
`PinLedger.commit()`. The floor is raw psycopg on one autocommit connection: each draw is one INSERT into a
scratch table, committed before it returns; the commit is one transaction that takes seq numbers from a counter
row, inserts the 2 events and clears the unit's scratch. It keeps no lease, no fence and no attempt count: what
the store adds for many writers and for kills is the difference.

Each writer count runs the floor and the store side by side in every round (their order alternating), each
with `writers` forked processes committing `units` units; the ratio is the store's units/s over the floor's in
the same round, its median over rounds printed with the range. Before them, one writer in this process runs
a store unit and a floor unit in turn (drift on the machine falls on both alike). First of all, the wire:
round trips, statements and transactions for one unit of each (counted by a loopback proxy, see
`_pg_wire.py`; counts, not times, so a loaded machine leaves them alone). Skipped, saying why, when no
server answers at ANAGRAPHEUS_POSTGRES_DSN (default postgresql://postgres@127.0.0.1:5432/test).

    python benchmarks/postgres_floor.py                 # 1, 4 and 8 writers, 3 rounds: a minute or two
    python benchmarks/postgres_floor.py --rounds 7 --units 400
    python benchmarks/postgres_floor.py --quick         # smoke test: tiny sizes, one round
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Barrier
from typing import Any

from _pg_wire import Counts, WireCounter
from _writers import DSN, _fork, postgres_unavailable  # pyright: ignore[reportPrivateUsage]

from anagrapheus.timeline import EventTypeRegistry, PinLedger

DRAWS = 2
AIM = 0.7
WARM_UNITS = 3
"""The store's units/s at least this share of the floor's, at 1 and 8 writers."""


def _answer(i: int) -> dict[str, object]:
    return {"parts": [{"content": f"answer number {i} from the scripted model", "part_kind": "text"}]}


def _store_unit(ledger: PinLedger, tag: str) -> None:
    for i in range(DRAWS):
        ledger.resolve(f"p1:model_call:{tag}-{i}", kind="model_call", effect=lambda i=i: _answer(i), interpret=str)
    ledger.commit()


def _store_writer(dsn: str, schema: str, units: int, barrier: Barrier, out: Any, tag: int) -> None:  # a child
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

    types = EventTypeRegistry()
    store = PostgresEventStore(dsn, schema=schema, pool_size=1)
    latencies: list[float] = []
    barrier.wait()
    for u in range(units):
        start = time.perf_counter()
        _store_unit(PinLedger(store, types), f"{tag}-{u}")
        latencies.append(time.perf_counter() - start)
    out.put((time.perf_counter(), latencies))
    store.close()


class Floor:
    """The hand-written floor on one connection: a scratch INSERT per draw, then one transaction per unit."""

    def __init__(self, conn: Any, schema: str) -> None:
        self.conn = conn
        self.schema = schema

    def unit(self, unit_id: str) -> None:
        import json

        s = self.schema
        for i in range(DRAWS):
            # Committed (autocommit) before the draw is returned: durable as the store's scratch write is.
            self.conn.execute(
                f"INSERT INTO {s}.scratch (unit_id, key, raw) VALUES (%s, %s, %s)",
                (unit_id, f"p1:model_call:{unit_id}-{i}", json.dumps(_answer(i), separators=(",", ":"))),
            )
        with self.conn.transaction():
            rows = self.conn.execute(
                f"SELECT key, raw FROM {s}.scratch WHERE unit_id = %s ORDER BY key", (unit_id,)
            ).fetchall()
            (last,) = self.conn.execute(
                f"UPDATE {s}.head SET last = last + %s RETURNING last - %s", (len(rows), len(rows))
            ).fetchone()
            with self.conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {s}.log (seq, unit_id, key, raw) VALUES (%s, %s, %s, %s)",
                    [(last + n, unit_id, key, raw) for n, (key, raw) in enumerate(rows, start=1)],
                )
            self.conn.execute(f"DELETE FROM {s}.scratch WHERE unit_id = %s", (unit_id,))


def _floor_writer(dsn: str, schema: str, units: int, barrier: Barrier, out: Any, tag: int) -> None:  # a child
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        floor = Floor(conn, schema)
        latencies: list[float] = []
        barrier.wait()
        for u in range(units):
            start = time.perf_counter()
            floor.unit(f"{tag}-{u}")
            latencies.append(time.perf_counter() - start)
        out.put((time.perf_counter(), latencies))


@contextmanager
def schemas(dsn: str) -> Iterator[tuple[str, str]]:
    """A fresh schema for the store, and one for the floor's tables; both dropped afterwards."""
    import psycopg

    tag = uuid.uuid4().hex[:8]
    store, floor = f"anagrapheus_bench_store_{tag}", f"anagrapheus_bench_floor_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {floor}")  # type: ignore[arg-type]
        conn.execute(
            f"CREATE TABLE {floor}.scratch (unit_id text, key text, raw text NOT NULL, PRIMARY KEY (unit_id, key));"  # type: ignore[arg-type]
            f" CREATE TABLE {floor}.log (seq bigint PRIMARY KEY, unit_id text NOT NULL, key text NOT NULL,"
            f" raw text NOT NULL); CREATE TABLE {floor}.head (last bigint NOT NULL);"
            f" INSERT INTO {floor}.head VALUES (0)"
        )
    try:
        yield store, floor
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for schema in (store, floor):
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


def wire_per_unit(dsn: str, store_schema: str, floor_schema: str) -> tuple[Counts, Counts]:
    """One unit of the store and one of the floor, counted on the wire, after warm-up units.

    Warm: the store prepares a draw's and a commit's statements at their first use on a connection, psycopg the
    floor's at their fifth, each one trip more, once; three units have prepared each of a unit's statements.
    """
    import psycopg

    from anagrapheus.timeline.stores.postgres import PostgresEventStore

    types = EventTypeRegistry()
    with WireCounter(dsn) as wire:
        with PostgresEventStore(wire.dsn, schema=store_schema, pool_size=1) as store:
            for n in range(WARM_UNITS):
                _store_unit(PinLedger(store, types), f"wire-warm-{n}")
            wire.reset()
            _store_unit(PinLedger(store, types), "wire")
            store_counts = wire.counts()
        with psycopg.connect(wire.dsn, autocommit=True) as conn:
            floor = Floor(conn, floor_schema)
            for n in range(WARM_UNITS):
                floor.unit(f"wire-warm-{n}")
            wire.reset()
            floor.unit("wire")
            floor_counts = wire.counts()
    return store_counts, floor_counts


def interleaved(dsn: str, store_schema: str, floor_schema: str, units: int) -> dict[str, tuple[float, float]]:
    """One writer in this process, a store unit and a floor unit in turn: each one's median seconds a unit (wall),
    and its mean CPU seconds a unit in this process (the client's share, which waits on no disk)."""
    import psycopg

    from anagrapheus.timeline.stores.postgres import PostgresEventStore

    types = EventTypeRegistry()
    times: dict[str, list[float]] = {"store": [], "floor": []}
    cpu: dict[str, float] = {"store": 0.0, "floor": 0.0}
    with (
        PostgresEventStore(dsn, schema=store_schema, pool_size=1) as store,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        floor = Floor(conn, floor_schema)
        work: dict[str, Callable[[str], None]] = {
            "store": lambda tag: _store_unit(PinLedger(store, types), tag),
            "floor": floor.unit,
        }
        for u in range(units):
            for name, unit in work.items():
                started, cpu_started = time.perf_counter(), time.process_time()
                unit(f"interleaved-{u}")
                times[name].append(time.perf_counter() - started)
                cpu[name] += time.process_time() - cpu_started
    return {name: (statistics.median(times[name]), cpu[name] / units) for name in times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: checks the script runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--units", type=int, default=200, help="units per writer per run")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.units, args.writers = 1, 5, [1, 2]
    reason = postgres_unavailable(DSN)
    if reason is not None:
        print(f"PostgresEventStore vs the floor: skipped ({reason})")
        return
    print(f"PostgresEventStore vs a hand-written psycopg floor; units of {DRAWS} draws and a commit")
    print(f"  {os.cpu_count()} cores; python {sys.version.split()[0]}; {args.rounds} round(s) of {args.units} units")
    with schemas(DSN) as (store_schema, floor_schema):
        store_counts, floor_counts = wire_per_unit(DSN, store_schema, floor_schema)
        print("\nwire per unit        round trips  statements  transactions")
        for label, counts in (("store", store_counts), ("floor", floor_counts)):
            print(f"  {label:<18} {counts.round_trips:>11} {counts.statements:>11} {counts.transactions:>13}")
        measured = interleaved(DSN, store_schema, floor_schema, args.units)
        (store_unit, store_cpu), (floor_unit, floor_cpu) = measured["store"], measured["floor"]
        print(
            f"\ninterleaved, one writer, a unit of each in turn ({args.units} each): store {store_unit * 1e3:.2f} ms,"
            f" floor {floor_unit * 1e3:.2f} ms a unit (median): store/floor {floor_unit / store_unit:.2f}x"
            f"\n  client CPU a unit (mean): store {store_cpu * 1e3:.2f} ms, floor {floor_cpu * 1e3:.2f} ms"
            f" ({store_cpu / floor_cpu:.2f}x the floor's)"
        )
        print(f"\n  {'writers':>7} {'floor units/s':>14} {'store units/s':>14} {'store/floor':>12} {'range':>14}  aim")
        for writers in args.writers:
            ratios: list[float] = []
            rates: dict[str, list[float]] = {"floor": [], "store": []}
            writers_of: dict[str, tuple[Callable[..., None], str]] = {
                "floor": (_floor_writer, floor_schema),
                "store": (_store_writer, store_schema),
            }
            for r in range(args.rounds):
                order = ["floor", "store"] if r % 2 == 0 else ["store", "floor"]
                got = {
                    name: _fork(name, writer, (DSN, schema, args.units), writers, args.units).rate
                    for name in order
                    for writer, schema in [writers_of[name]]
                }
                for name, rate in got.items():
                    rates[name].append(rate)
                ratios.append(got["store"] / got["floor"])
            ratio = statistics.median(ratios)
            aim = f">= {AIM}x: {'met' if ratio >= AIM else 'NOT met'}" if writers in (1, 8) else "reported"
            floor_rate, store_rate = statistics.median(rates["floor"]), statistics.median(rates["store"])
            print(
                f"  {writers:>7} {floor_rate:>14,.0f} {store_rate:>14,.0f}"
                f" {ratio:>11.2f}x {min(ratios):>6.2f}-{max(ratios):.2f}x  {aim}"
            )


if __name__ == "__main__":
    main()
