"""Interleaved, paired timing: every variant is measured against a baseline taken in the same round.

Machines here are shared and noisy, so no absolute time is ever the claim. Each round runs
every variant once (in a rotated order), and a variant's figure is the median over rounds of
its time divided by the baseline's time in that same round.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Aim",
    "Comparison",
    "Variant",
    "compare",
    "machine_line",
    "options",
    "print_rates",
    "print_table",
    "raw_connection",
    "repeated",
    "store_schema",
    "summarise",
    "use_options",
]

_profile_match: str | None = None

Sample = Callable[[int], float]
"""Run an operation `n` times and return the seconds spent in the timed part."""


def repeated(work: Callable[[], object]) -> Sample:
    """The sample that runs `work` `n` times in a row and returns the seconds it took, all of it timed."""

    def sample(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            work()
        return time.perf_counter() - started

    return sample


@dataclass(frozen=True)
class Aim:
    """A target for a ratio: below `at_most`, or above `at_least` (for speed-ups)."""

    at_most: float | None = None
    at_least: float | None = None

    def met(self, ratio: float) -> bool:
        """Whether `ratio` meets the aim."""
        if self.at_most is not None and ratio > self.at_most:
            return False
        return not (self.at_least is not None and ratio < self.at_least)

    def verdict(self, median: float, q1: float, q3: float) -> str:
        """`met`, `MISSED` (judged on the median), or `met narrowly` when the interquartile range crosses the aim."""
        if not self.met(median):
            return "MISSED"
        return "met" if self.met(q1) and self.met(q3) else "met narrowly"

    def __str__(self) -> str:
        if self.at_most is not None:
            return f"<= {self.at_most:g}x"
        return f">= {self.at_least:g}x" if self.at_least is not None else ""


@dataclass
class Variant:
    """One way of doing the operation; `sample(n)` runs it n times and returns the seconds timed."""

    name: str
    sample: Sample
    aim: Aim | None = None
    unit: str = "op"
    times: list[float] = field(default_factory=lambda: [])


@dataclass
class Comparison:
    """The outcome for one variant against the baseline."""

    name: str
    per_op_median: float
    per_op_min: float
    ratio_median: float
    ratio_spread: tuple[float, float]
    ratio_of_mins: float
    aim: Aim | None
    unit: str

    @property
    def met(self) -> bool | None:
        """Whether the aim was met, or None when there is no aim."""
        return None if self.aim is None else self.aim.met(self.ratio_median)


def compare(baseline: Variant, others: Sequence[Variant], *, n: int, rounds: int, warmup: int = 1) -> list[Comparison]:
    """Time `baseline` and `others` interleaved for `rounds` rounds of `n` operations each; return paired ratios."""
    everyone = [baseline, *others]
    for _ in range(warmup):
        for v in everyone:
            v.sample(max(1, n // 4))
    for v in everyone:
        v.times.clear()
    for r in range(rounds):
        order = everyone[r % len(everyone) :] + everyone[: r % len(everyone)]
        for v in order:
            gc.collect()
            v.times.append(v.sample(n) / n)
    if _profile_match is not None:
        for v in everyone:
            if _profile_match.lower() in v.name.lower():
                _profile(v, n)
    return summarise(baseline, others)


def summarise(baseline: Variant, others: Sequence[Variant]) -> list[Comparison]:
    """The paired ratios of `others` to `baseline` from the per-operation times their rounds left in `times`."""
    out: list[Comparison] = []
    for v in [baseline, *others]:
        ratios = [t / b for t, b in zip(v.times, baseline.times, strict=True)]
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
        out.append(
            Comparison(
                name=v.name,
                per_op_median=statistics.median(v.times),
                per_op_min=min(v.times),
                ratio_median=statistics.median(ratios),
                ratio_spread=(q1, q3),
                ratio_of_mins=min(v.times) / min(baseline.times),
                aim=v.aim,
                unit=v.unit,
            )
        )
    return out


def _profile(v: Variant, n: int) -> None:
    """Print where one variant's time goes: cProfile of `max(n, 10)` operations, top functions by own time."""
    profiler = cProfile.Profile()
    count = max(n, 10)
    profiler.enable()
    v.sample(count)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats("anagrapheus", 20)
    print(f"\n--- profile of {v.name!r}, {count} operations (times include the profiler's own overhead) ---")
    print(out.getvalue())


def _duration(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} µs"


def print_table(title: str, baseline_label: str, rows: Sequence[Comparison]) -> None:
    """Print one comparison as a table; times are for information, the ratio is the figure.

    `ratio` is the median over rounds of the paired ratio (the figure aims are judged on), `IQR` its
    interquartile range, and `min/min` the ratio of the fastest rounds, which is steadier on a busy machine.
    """
    print(f"\n{title}")
    print(f"  baseline: {baseline_label}")
    header = f"  {'variant':<52} {'median/op':>11} {'min/op':>11} {'ratio':>7} {'IQR':>13} {'min/min':>7}  aim"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for c in rows:
        aim = "" if c.aim is None else f"{c.aim!s} {c.aim.verdict(c.ratio_median, *c.ratio_spread)}"
        spread = f"{c.ratio_spread[0]:.3f}-{c.ratio_spread[1]:.3f}"
        print(
            f"  {c.name:<52} {_duration(c.per_op_median):>11} {_duration(c.per_op_min):>11}"
            f" {c.ratio_median:6.3f}x {spread:>13} {c.ratio_of_mins:6.3f}x  {aim}"
        )


def print_rates(rows: Sequence[Comparison], *, items: int, unit: str) -> None:
    """Print throughput (`items` per operation, median rounds) and its ratio to the baseline's (first row)."""
    base = items / rows[0].per_op_median
    for c in rows:
        rate = items / c.per_op_median
        print(f"  {c.name:<52} {rate:>13,.0f} {unit}/s  {rate / base:6.3f}x the baseline's throughput")


def machine_line() -> str:
    """Python version, platform and CPU count, for the record."""
    return (
        f"python {platform.python_version()} ({sys.implementation.name}), {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def options(description: str, *, rounds: int, synchronous_help: str = "for both sides") -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick, --long, --rounds, --profile and the stores' --synchronous."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL", help=synchronous_help)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes, one round: checks the script runs")
    size.add_argument("--long", action="store_true", help="more rounds and larger samples, for steadier figures")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds (default {rounds})")
    parser.add_argument(
        "--profile",
        metavar="TEXT",
        help="after timing, cProfile each variant whose name contains TEXT and print where its time goes",
    )
    return parser


def use_options(args: argparse.Namespace) -> int:
    """Apply the shared options that act inside `compare` (--profile) and return the rounds to run."""
    global _profile_match
    _profile_match = args.profile
    return 1 if args.quick else (args.rounds * 3 if args.long else args.rounds)


def store_schema(path: Path, *, table: str | None = None) -> list[str]:
    """The CREATE statements (tables first, then indexes and triggers) of a store's file, or of one table."""
    where = "tbl_name = ?" if table is not None else "name NOT LIKE 'sqlite_%'"
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            f"SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND {where}"
            " ORDER BY CASE type WHEN 'table' THEN 0 ELSE 1 END",
            () if table is None else (table,),
        ).fetchall()
    finally:
        conn.close()
    return [sql for (sql,) in rows]


def raw_connection(path: Path, schema: list[str], synchronous: str) -> sqlite3.Connection:
    """A plain sqlite3 floor on a file with the store's own schema and pragmas."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    for statement in schema:
        conn.execute(statement)
    return conn
