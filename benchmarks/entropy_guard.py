"""What the determinism guard costs: per `open` (the audit hook) and per guarded test body.

An audit hook cannot be removed, so each variant runs in a fresh child process and times itself there;
the parent pairs the children's figures round by round (see `_measure.py`).

    python benchmarks/entropy_guard.py            # 7 rounds
    python benchmarks/entropy_guard.py --quick    # smoke test

Variants per open (a 1 KiB file opened, read and closed; the script is user code):

- no hook: the guard off (`--anagrapheus-guard` not given), where no hook is ever installed;
- hook, disarmed: the guard on, outside a marked test's body (fixtures, collection, unmarked tests);
- armed, declared read: in a guarded body, a file the manifest declares (the opener frame is found, the path
  matched against `declared_reads`);
- armed, tmp_path read: in a guarded body, a file under the test's tmp_path.

Per test body (10 declared reads, 10 clock reads, 10 random draws), unguarded against guarded, once with
only this script as user code, and once with every module of this project's test suite imported, since a
guarded body swaps the names every user module holds for clocks and random sources (and back after).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _measure import Variant, compare, machine_line, options, print_table, use_options

ROOT = Path(__file__).resolve().parents[1]


def _child(variant: str, n: int) -> float:
    """Run one variant `n` times in this process and return the seconds timed."""
    # A local name: this script is user code, so a guarded body swaps its module's `time` for the declared clock.
    from time import perf_counter

    from anagrapheus.testing.entropy import EntropyManifest, guarded
    from anagrapheus.testing.entropy.guard import _install  # pyright: ignore[reportPrivateUsage]
    from anagrapheus.testing.entropy.manifest import ClockDeclaration

    work = Path(tempfile.mkdtemp(prefix="entropy-bench-"))
    fixture = work / "fixture.json"
    fixture.write_text(json.dumps({"x": "y" * 1000}))
    manifest = EntropyManifest(
        root=work,
        declared_reads=("*.json",),
        seed=1,
        clock=ClockDeclaration(frozen_at=datetime(2026, 1, 1, tzinfo=UTC)),
    )

    def read() -> None:
        with open(fixture) as file:
            file.read()

    def body() -> None:
        for _ in range(10):
            read()
            time.time()
            random.random()

    if variant.startswith("suite"):
        for path in sorted((ROOT / "tests").rglob("test_*.py")):
            try:
                importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            except Exception:  # a module that cannot be imported here is not counted
                continue
    if variant == "no hook":
        started = perf_counter()
        for _ in range(n):
            read()
        return perf_counter() - started
    _install()
    if variant == "hook, disarmed":
        started = perf_counter()
        for _ in range(n):
            read()
        return perf_counter() - started
    if variant in ("armed, declared read", "armed, tmp_path read"):
        allowed = [str(work)] if variant == "armed, tmp_path read" else []
        if allowed:
            manifest = EntropyManifest(root=work)
        with guarded(manifest, seed=1, allowed_dirs=allowed):
            started = perf_counter()
            for _ in range(n):
                read()
            return perf_counter() - started
    started = perf_counter()
    for _ in range(n):
        if variant.endswith("unguarded"):
            body()
        else:
            with guarded(manifest, seed=1):
                body()
    return perf_counter() - started


def _in_children(variants: list[str], n: int) -> list[float]:
    """Run the variants one after another in one fresh child, `n` times each; return each one's seconds."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", *variants, "--n", str(n)], capture_output=True, text=True, check=True
    )
    return [float(line) for line in done.stdout.strip().splitlines()[-len(variants) :]]


def _in_child(variant: str) -> Callable[[int], float]:
    return lambda n: _in_children([variant], n)[0]


def _quick(variants: list[str], n: int) -> list[Variant]:
    """--quick: each variant timed once, all in one child (the hook, once on, stays on: `no hook` goes first)."""
    seconds = dict(zip(variants, _in_children(variants, n), strict=True))
    return [Variant(name, lambda _n, name=name: seconds[name]) for name in variants]


def main() -> None:
    parser = options(__doc__.splitlines()[0], rounds=7)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        for variant in args.child:
            print(_child(variant, args.n))
        return
    rounds = use_options(args)
    opens, bodies = (5, 5) if args.quick else (5_000, 200)
    print(f"benchmarks/entropy_guard.py  {machine_line()}")
    per_open = ["no hook", "hook, disarmed", "armed, declared read", "armed, tmp_path read"]
    # --quick checks the script runs: all in one child, not six, and without the suite's imports.
    if args.quick:
        quick = _quick([*per_open, "script: unguarded", "script: guarded"], opens)
        timed, pairs = quick[:4], {"script": quick[4:]}
    else:
        timed = [Variant(name, _in_child(name)) for name in per_open]
        pairs = {
            scope: [Variant(f"{scope}: {how}", _in_child(f"{scope}: {how}")) for how in ("unguarded", "guarded")]
            for scope in ("script", "suite")
        }
    rows = compare(replace(timed[0], name="no hook (guard off)"), timed[1:], n=opens, rounds=rounds, warmup=0)
    print_table("one open(), read and close of a 1 KiB file", "no audit hook at all", rows)
    for scope, pair in pairs.items():
        rows = compare(pair[0], pair[1:], n=bodies, rounds=rounds, warmup=0)
        what = "this script only" if scope == "script" else "every module of tests/ imported"
        print_table(
            f"a test body of 10 reads, 10 clock reads, 10 draws; user modules: {what}", "the body unguarded", rows
        )
        print(f"  guarded - unguarded: {(rows[1].per_op_median - rows[0].per_op_median) * 1e6:.0f} µs per test")


if __name__ == "__main__":
    main()
