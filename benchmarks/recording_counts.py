"""What a recorded run asks of its SQLite store: statements, transactions, worker-thread hops (issue #43 item 2).

The run of `benchmarks/capability.py` (a tool call, then an answer: two model requests, one tool call), recorded through
`Pinning(PinLedger)` and through `PinnedModel(PinLedger)`, each with its `commit()`. Counts, which no load moves:
the statements SQLite ran on the store's connection (its trace callback, which reports each row of an
`executemany` as a statement), the transactions among them (`BEGIN`), and the hops to a worker thread
(`asyncio.to_thread`). Beside them, the CPU of the ledger and store alone for a unit shaped like the run (three
held run-level pins, three asynchronous draws, a commit), a time, so load moves it: compare it alternately; and
the same statements by hand (raw sqlite3 on the store's schema), on one thread and hopped as the ledger hops,
the floor the ledger and store stand on. The syncs to disk are counted from outside:

    python benchmarks/recording_counts.py
    strace -f -c -e trace=fdatasync python benchmarks/recording_counts.py --runs 60   # minus --runs 10, over 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _measure import store_schema
from capability import PROMPT, Scripted, lookup
from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from anagrapheus.provider import PinnedModel, Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_key
from anagrapheus.timeline.events import new_uuid7


def counted(adapter: str, runs: int, root: Path) -> tuple[Counter[str], int]:
    """The statements (by their first word) and the hops of `runs` recorded runs and commits, after five unseen."""
    loop = asyncio.new_event_loop()
    store = SQLiteEventStore(root / f"{adapter}.db")
    types = EventTypeRegistry()
    model = FunctionModel(Scripted(), model_name="scripted")
    statements: Counter[str] = Counter()
    hops = [0]
    to_thread = asyncio.to_thread

    async def hop(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return await to_thread(func, *args, **kwargs)

    def run() -> None:
        ledger = PinLedger(store, types)
        if adapter == "Pinning":
            agent = Agent(model, tools=[lookup], capabilities=[Pinning(ledger)])
        else:
            agent = Agent(PinnedModel(model, ledger), tools=[lookup])
        loop.run_until_complete(agent.run(PROMPT))
        ledger.commit()

    try:
        for _ in range(5):
            run()
        # The store's connection, and the read-only one its claims of fresh keys read the unit on (the loop's thread).
        connections = [store._conn, store._fence_reader]  # pyright: ignore[reportPrivateUsage]
        for connection in connections:
            if connection is not None:
                connection.set_trace_callback(lambda sql: statements.update([sql.split()[0].upper()]))
        asyncio.to_thread = hop
        for _ in range(runs):
            run()
    finally:
        asyncio.to_thread = to_thread
        store.close()
        loop.close()
    return statements, hops[0]


def ledger_alone(root: Path, *, rounds: int = 15, units: int = 100) -> tuple[float, float]:
    """CPU per unit of three held pins, three asynchronous draws and a commit: the median and least of `rounds`."""
    store = SQLiteEventStore(root / "ledger.db")
    types = EventTypeRegistry()
    held = [pin_key("run_clock", {"n": n}) for n in range(3)]
    drawn = [pin_key("model_call", {"n": n}) for n in range(3)]

    async def effect() -> object:
        return {"parts": [{"content": "x" * 200}]}

    async def unit() -> None:
        ledger = PinLedger(store, types)
        for key in held:
            ledger.resolve_held(key, kind="run_clock", effect=lambda: "2026-01-01T00:00:00Z", interpret=str)
        for key in drawn:
            await ledger.aresolve(key, kind="model_call", effect=effect, interpret=lambda raw: raw)
        ledger.commit()

    loop = asyncio.new_event_loop()
    times: list[float] = []
    try:
        for _ in range(units):
            loop.run_until_complete(unit())
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(units):
                loop.run_until_complete(unit())
            times.append((time.process_time() - start) / units)
    finally:
        store.close()
        loop.close()
    return statistics.median(times), min(times)


_FENCE = (
    "SELECT (SELECT outcome FROM closed_units WHERE unit_id = ?1), (SELECT holder FROM unit_leases WHERE unit_id = ?1)"
)
_PUT = (
    "INSERT INTO pin_scratch (unit_id, key, kind, raw, attempts, draw_no, fingerprint)"
    " SELECT ?1, ?2, ?3, ?4, ?5, coalesce(max(draw_no), 0) + 1, NULL FROM pin_scratch WHERE unit_id = ?1"
    " ON CONFLICT (unit_id, key) DO UPDATE SET attempts = attempts + ?5"
)


class Floor:
    """The statements the store runs for `ledger_alone`'s unit, by hand: raw sqlite3 on the store's schema."""

    def __init__(self, root: Path) -> None:
        SQLiteEventStore(root / "floor-schema.db").close()
        self.conn = sqlite3.connect(root / f"floor-{new_uuid7()}.db", isolation_level=None, check_same_thread=False)
        for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = FULL"):
            self.conn.execute(f"PRAGMA {pragma}")
        for statement in store_schema(root / "floor-schema.db"):
            self.conn.execute(statement)
        self.units = 0
        self.raw = json.dumps({"parts": [{"content": "x" * 200}]})

    def lease(self, unit: str) -> None:
        """The unit's first claim: its lease, unsynced."""
        conn = self.conn
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "SELECT (SELECT outcome FROM closed_units WHERE unit_id = ?1), holder, host, pid"
            " FROM (SELECT 1) LEFT JOIN unit_leases ON unit_id = ?1",
            (unit,),
        ).fetchone()
        conn.execute("INSERT OR REPLACE INTO unit_leases VALUES (?, 'floor', 'here', 1)", (unit,))
        conn.execute("COMMIT")
        conn.execute(_FENCE, (unit,)).fetchone()

    def fence(self, unit: str) -> None:
        """A later claim of a fresh key: one read."""
        self.conn.execute(_FENCE, (unit,)).fetchone()

    def put(self, unit: str, key: str, held: Sequence[str] = ()) -> None:
        """A draw's synced write, with the held pins before it."""
        conn = self.conn
        if held:
            conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_FENCE, (unit,)).fetchone()
        if held:
            conn.executemany(_PUT, [(unit, h, "run_clock", '"2026-01-01T00:00:00Z"', 1) for h in held])
            conn.execute(_FENCE, (unit,)).fetchone()
        conn.execute(_PUT + " RETURNING *", (unit, key, "model_call", self.raw, 1)).fetchone()
        conn.execute("COMMIT")

    def settle(self, unit: str) -> None:
        """The commit: the scratch listed, one event a pin appended, the scratch cleared, the unit closed."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_FENCE, (unit,)).fetchone()
        pins = conn.execute("SELECT * FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit,)).fetchall()
        last = conn.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, 'anagrapheus', 'pin_promoted', 1, NULL, ?, '2026-01-01T00:00:00Z', ?)",
            [(last + n, f"{unit}-{n}", unit, pin[3]) for n, pin in enumerate(pins, 1)],
        )
        conn.execute("DELETE FROM pin_scratch WHERE unit_id = ?", (unit,))
        conn.execute("INSERT INTO closed_units VALUES (?, 'committed')", (unit,))
        conn.execute("DELETE FROM unit_leases WHERE unit_id = ?", (unit,))
        conn.execute("COMMIT")

    async def unit(self, *, hops: bool) -> None:
        """One unit, its steps on the loop's thread, or hopped to a worker as the ledger hops (the lease, each put)."""
        self.units += 1
        unit = f"floor-{self.units}"
        held = [f"held-{n}" for n in range(3)]
        steps: list[tuple[Callable[[], None], bool]] = []
        for n in range(3):
            steps.append(((lambda: self.lease(unit)), True) if n == 0 else ((lambda: self.fence(unit)), False))
            steps.append((lambda n=n: self.put(unit, f"drawn-{n}", held if n == 0 else ()), True))
        for step, hopped in steps:
            if hops and hopped:
                await asyncio.to_thread(step)
            else:
                step()
        self.settle(unit)


def floor_alone(root: Path, *, hops: bool, rounds: int = 15, units: int = 100) -> tuple[float, float]:
    """CPU per unit of `Floor`'s statements, with or without the ledger's six hops: the median and least of `rounds`."""
    floor = Floor(root)
    loop = asyncio.new_event_loop()
    times: list[float] = []
    try:
        for _ in range(units):
            loop.run_until_complete(floor.unit(hops=hops))
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(units):
                loop.run_until_complete(floor.unit(hops=hops))
            times.append((time.process_time() - start) / units)
    finally:
        floor.conn.close()
        loop.close()
    return statistics.median(times), min(times)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="recorded runs counted, per adapter")
    parser.add_argument("--counts-only", action="store_true", help="skip the timed ledger-alone unit")
    parser.add_argument("--quick", action="store_true", help="smoke test: 3 runs, and 2 rounds of 5 units")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 3
    print(f"benchmarks/recording_counts.py: per recorded run and commit, over {args.runs} runs")
    print(f"  {'adapter':<12} {'statements':>10} {'transactions':>12} {'hops':>5}  by statement")
    with tempfile.TemporaryDirectory(prefix="anagrapheus-bench-") as tmp:
        for adapter in ("Pinning", "PinnedModel"):
            statements, hops = counted(adapter, args.runs, Path(tmp))
            per = {verb: round(count / args.runs, 2) for verb, count in sorted(statements.items())}
            total = sum(statements.values()) / args.runs
            begins = statements["BEGIN"] / args.runs
            print(f"  {adapter:<12} {total:>10.2f} {begins:>12.2f} {hops / args.runs:>5.2f}  {per}")
        if not args.counts_only:
            sizes = {"rounds": 2, "units": 5} if args.quick else {}
            median, least = ledger_alone(Path(tmp), **sizes)
            print(
                f"  the ledger and store alone, a unit of 3 held pins, 3 draws and a commit: {median * 1e6:,.0f} us CPU"
                f" (least {least * 1e6:,.0f})"
            )
            for hops, what in ((False, "on one thread"), (True, "hopped as the ledger hops (4 hops)")):
                median, least = floor_alone(Path(tmp), hops=hops, **sizes)
                print(
                    f"  its statements by hand (sqlite3, the store's schema), {what}: {median * 1e6:,.0f} us CPU"
                    f" (least {least * 1e6:,.0f})"
                )


if __name__ == "__main__":
    main()
