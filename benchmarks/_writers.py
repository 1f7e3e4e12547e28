"""Many writer processes on one log: Postgres against one SQLite file, and the Postgres seq mechanisms.

Each writer is a process forked once the parent has imported everything (so start-up is not
timed), opens its own store, waits at a barrier with the others, then commits units of work:
`PINS` scratch draws and one `PinLedger.commit()`. A commit's latency is the time of `commit()`
alone; throughput is all writers' commits over the wall time from the barrier to the last commit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from typing import Any

from anagrapheus.timeline import EventTypeRegistry, PinLedger, TimelineStore

PINS = 4
DSN = os.environ.get("ANAGRAPHEUS_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Run:
    """One store at one writer count: commits per second over the wall time, and commit latencies."""

    label: str
    writers: int
    commits: int
    wall: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.commits / self.wall

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _writer(
    open_store: Callable[[], TimelineStore], units: int, barrier: Barrier, out: Any, tag: int
) -> None:  # runs in a forked child
    types = EventTypeRegistry()
    store = open_store()
    latencies: list[float] = []
    barrier.wait()
    for u in range(units):
        ledger = PinLedger(store, types)
        for i in range(PINS):
            ledger.resolve(
                f"p1:model_call:{tag}-{u}-{i}", kind="model_call", effect=lambda i=i: {"n": i}, interpret=dict
            )
        start = time.perf_counter()
        ledger.commit()
        latencies.append(time.perf_counter() - start)
    out.put((time.perf_counter(), latencies))
    store.close()


def _fork(label: str, target: Callable[..., None], args: tuple[Any, ...], writers: int, each: int) -> Run:
    """Fork `writers` processes running `target(*args, barrier, out)`; time them from the barrier on."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(writers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out, n)) for n in range(writers)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"a writer failed ({label})"
    end = max(done for done, _ in results)
    return Run(label, writers, writers * each, end - start, [t for _, ts in results for t in ts])


def run_writers(label: str, open_store: Callable[[], TimelineStore], writers: int, units: int) -> Run:
    """Fork `writers` processes committing `units` units each into the store `open_store` opens."""
    return _fork(label, _writer, (open_store, units), writers, units)


def print_runs(title: str, runs: list[Run], baseline: dict[int, Run]) -> None:
    """Print commits/s and p99 commit latency per writer count, with the throughput ratio to the baseline's."""
    print(f"\n{title}")
    print(f"  {'store':<34} {'writers':>7} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'vs baseline':>12}")
    for run in runs:
        ratio = run.rate / baseline[run.writers].rate
        p50 = statistics.median(run.latencies) * 1e3
        print(
            f"  {run.label:<34} {run.writers:>7} {run.rate:>10,.0f} {p50:>8.2f} {run.p99 * 1e3:>8.2f} {ratio:>11.2f}x"
        )


def _raw_writer(dsn: str, schema: str, mechanism: str, n: int, barrier: Barrier, out: Any, tag: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        latencies: list[float] = []
        barrier.wait()
        for i in range(n):
            start = time.perf_counter()
            with conn.transaction():
                if mechanism == "counter row":
                    (last,) = conn.execute(  # type: ignore[misc]
                        f"UPDATE {schema}.head SET last = last + 1 RETURNING last"  # type: ignore[arg-type]
                    ).fetchone()
                else:
                    conn.execute(f"SELECT pg_advisory_xact_lock(hashtextextended('{schema}', 0))")  # type: ignore[arg-type]
                    (last,) = conn.execute(f"SELECT coalesce(max(seq), 0) + 1 FROM {schema}.log").fetchone()  # type: ignore[misc,arg-type]
                conn.execute(f"INSERT INTO {schema}.log VALUES (%s, %s)", (last, f"event {i}"))  # type: ignore[arg-type]
            latencies.append(time.perf_counter() - start)
        out.put((time.perf_counter(), latencies))


def run_seq_mechanism(dsn: str, mechanism: str, writers: int, n: int) -> Run:
    """Raw psycopg, one event per transaction: seq from a locked counter row, or an advisory lock and max(seq)."""
    import psycopg

    schema = f"anagrapheus_bench_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")  # type: ignore[arg-type]
        conn.execute(f"CREATE TABLE {schema}.log (seq bigint PRIMARY KEY, payload text NOT NULL)")  # type: ignore[arg-type]
        conn.execute(f"CREATE TABLE {schema}.head (last bigint NOT NULL); INSERT INTO {schema}.head VALUES (0)")  # type: ignore[arg-type]
    try:
        run = _fork(mechanism, _raw_writer, (dsn, schema, mechanism, n), writers, n)
        with psycopg.connect(dsn, autocommit=True) as conn:
            seqs = [row[0] for row in conn.execute(f"SELECT seq FROM {schema}.log ORDER BY seq")]  # type: ignore[arg-type]
        assert seqs == list(range(1, writers * n + 1)), f"{mechanism}: seq must be gap-free"
        return run
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


def postgres_unavailable(dsn: str) -> str | None:
    """Why the Postgres side cannot run, in one line, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as e:
        return f"no PostgreSQL answers (set ANAGRAPHEUS_POSTGRES_DSN): {str(e).strip().splitlines()[0]}"
    return None
