"""A kill run on both stores: writers SIGKILLed, writes broken mid-unit; no paid draw dropped, no key paid twice.

Each effect appends what it was paid for to a file outside the store, as it returns. Meanwhile the
run breaks the writers' writes (SQLite: another writer holds the file's lock past the busy timeout;
PostgreSQL: the writers' backends are terminated) and SIGKILLs writers, in an effect, between draws
or in a commit; a new writer resumes each unit. At the end every paid draw must be in the log, once.

A SIGKILL that falls in the instant between an effect's return and its write still loses that draw
(the process's memory is gone with it); the kills here fall elsewhere, where the store is what keeps
a draw. Bounded in the normal suite; `pytest --soak` (or ANAGRAPHEUS_KILL_RUN_KILLS) runs it long.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from anagrapheus.timeline import SQLiteEventStore, TimelineStore
from tests.bounds import bound
from tests.fork_server import ForkServer

pytestmark = [pytest.mark.soak, pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]

KILLS = bound("ANAGRAPHEUS_KILL_RUN_KILLS", normal=6, soak=300)
UNITS, PINS, EFFECT_SECONDS = 4, 4, 0.02

WRITER = """
import json, os, random, sys, time
from anagrapheus.errors import StoreError, UnitClosed
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
engine, where, schema, paid_path, tag, units, pins, seconds = sys.argv[1:9]
units, pins, seconds = int(units), int(pins), float(seconds)
types = EventTypeRegistry()

def say(line):
    print(line, flush=True)

def patiently(step):
    # A write the run broke fails with StoreError; the ledger keeps what was drawn, so asking again is free.
    while True:
        try:
            return step()
        except StoreError:
            time.sleep(0.02)

def open_store():
    if engine == "sqlite":
        return SQLiteEventStore(where, busy_timeout=0.1)
    from anagrapheus.timeline.stores.postgres import PostgresEventStore
    return PostgresEventStore(where, schema=schema, unit_wait=10, connect_timeout=5)

def effect(unit, key):
    say("effect")
    sys.stdin.readline()  # the run says when the call comes back (or kills the writer while it waits)
    time.sleep(seconds)
    value = f"{unit} {key} {random.random()}"
    with open(paid_path, "a") as paid:
        paid.write(json.dumps([unit, key, value]) + "\\n")
    return value

store = patiently(open_store)
for u in range(units):
    unit = f"{tag}-{u}"
    ledger = PinLedger(store, types, unit_id=unit)
    try:
        for i in range(pins):
            key = f"p1:model_call:k{i}"
            patiently(lambda: ledger.resolve(key, kind="model_call", effect=lambda: effect(unit, key), interpret=str))
            say("drawn")
        say("committing")
        patiently(ledger.commit)
    except UnitClosed:
        pass  # committed before this writer was killed
    say("committed")
store.close()
say("done")
"""


Paid = list[tuple[str, str, str]]


def kill_run(
    forks: ForkServer, engine: str, where: str, schema: str, tmp_path: Path, break_writes: Callable[[], None]
) -> tuple[dict[str, int], Paid]:
    """Run writers under kills and broken writes; return the counts and what the effect was paid for."""
    paid_path = tmp_path / f"paid-{engine}.jsonl"
    paid_path.touch()
    rng = random.Random(20261202)
    stop = threading.Event()

    def breaker() -> None:
        while not stop.wait(rng.uniform(0.05, 0.25)):
            break_writes()

    thread = threading.Thread(target=breaker)
    thread.start()
    kills = landed_in_effect = writers = 0
    try:
        # Writers one after another, each resumed after each kill, until the kills are done (two at least).
        while writers < 2 or kills < KILLS:
            tag = f"w{writers}"
            writers += 1
            finished = False
            while not finished:
                args = [engine, where, schema, str(paid_path), tag, str(UNITS), str(PINS), str(EFFECT_SECONDS)]
                writer = forks.start(WRITER, *args)
                # Kill after a random number of lines: in an effect, right after a draw, or in a commit.
                when = rng.randint(1, 3 * PINS) if kills < KILLS else None
                for lines, line in enumerate(writer.stdout, start=1):
                    if line.strip() == "done":
                        finished = True
                    if when is not None and lines == when and line.strip() != "done":
                        # In an effect, the writer waits for the run's word: the kill lands while the call is out.
                        landed_in_effect += line.strip() == "effect"
                        writer.send_signal(signal.SIGKILL)
                        kills += 1
                        break
                    if line.strip() == "effect":
                        writer.stdin.write("go\n")
                writer.wait(120)
                writer.close()
                assert finished or when is not None, f"the writer failed: exit {writer.returncode}"
    finally:
        stop.set()
        thread.join()

    paid: Paid = []
    for line in paid_path.read_text().splitlines():
        unit, key, value = json.loads(line)
        paid.append((str(unit), str(key), str(value)))
    return {"writers": writers, "kills": kills, "kills_in_an_effect": landed_in_effect, "paid": len(paid)}, paid  # type: ignore[dict-item]


def figures(store: TimelineStore, run: tuple[dict[str, int], Paid]) -> dict[str, int]:
    """Paid draws dropped and keys paid twice, from the effect's own file against the log."""
    logged = {(str(e.correlation_id), str(e.payload_json()["key"])): str(e.payload_json()["raw"]) for e in store.read()}
    counts, paid = run
    per_key = Counter((unit, key) for unit, key, _ in paid)
    dropped = [draw for draw in paid if logged.get((draw[0], draw[1])) != draw[2]]
    result = counts | {
        "units_committed": len({unit for unit, _ in logged}),
        "paid_draws_dropped": len(dropped),
        "keys_paid_twice": sum(n > 1 for n in per_key.values()),
    }
    print(f"kill run figures: {result}")
    return result


def check(result: dict[str, int]) -> None:
    assert result["units_committed"] == result["writers"] * UNITS
    assert result["paid"] == result["writers"] * UNITS * PINS
    assert (result["paid_draws_dropped"], result["keys_paid_twice"]) == (0, 0)
    assert result["kills"] >= KILLS


def test_kill_run_on_sqlite(tmp_path: Path, forks: ForkServer) -> None:
    path = tmp_path / "kill.db"
    SQLiteEventStore(path).close()

    def hold_the_lock() -> None:
        other = sqlite3.connect(path, timeout=5, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            time.sleep(0.15)  # past the writers' busy timeout of 0.1 s
            other.execute("ROLLBACK")
        finally:
            other.close()

    run = kill_run(forks, "sqlite", str(path), "", tmp_path, hold_the_lock)
    with SQLiteEventStore(path) as store:
        check(figures(store, run))


@pytest.mark.postgres
def test_kill_run_on_postgres(
    tmp_path: Path, forks: ForkServer, postgres_dsn: str, pg_schema: str, open_pg: Callable[..., TimelineStore]
) -> None:
    import psycopg

    store = open_pg()
    terminated = 0

    def terminate_backends() -> None:
        nonlocal terminated
        # The writers' pooled connections last ran a statement naming this test's schema.
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND position(%s in query) > 0 AND application_name <> 'test-reader'",
                (pg_schema,),
            ).fetchone()
        terminated += 0 if row is None else int(row[0])

    run = kill_run(forks, "pg", postgres_dsn, pg_schema, tmp_path, terminate_backends)
    run[0]["backends_terminated"] = terminated
    check(figures(store, run))
