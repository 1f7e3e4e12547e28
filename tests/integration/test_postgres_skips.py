"""Without a server the Postgres tests skip with a one-line reason; under CI=true or --require-postgres they fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_one_postgres_test(*, ci: bool, require: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Nothing listens on port 1: the server check fails at once.
    env["ANAGRAPHEUS_POSTGRES_DSN"] = "postgresql://postgres:hunter2@127.0.0.1:1/test"
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",  # one test: no xdist workers to start
            "-q",
            "-rs",
            "tests/timeline/stores/test_postgres.py::test_injected_clock_and_ids",
            *(["--require-postgres"] if require else []),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_a_server_a_postgres_test_skips_saying_why() -> None:
    done = run_one_postgres_test(ci=False)
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1
    assert "no PostgreSQL at 127.0.0.1:1, database test (set ANAGRAPHEUS_POSTGRES_DSN)" in skipped[0]
    assert "hunter2" not in done.stdout


def test_under_ci_a_skipped_postgres_test_fails() -> None:
    done = run_one_postgres_test(ci=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a Postgres test was skipped under CI=true, which counts as a failure" in done.stdout
    assert "1 error" in done.stdout or "1 failed" in done.stdout


def test_under_require_postgres_a_skipped_postgres_test_fails() -> None:
    # What .ci/mutation_slice.py passes when it mutates the PostgreSQL store: a skip would let every mutant survive.
    done = run_one_postgres_test(ci=False, require=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a Postgres test was skipped under --require-postgres, a failure as under CI" in done.stdout
    assert "hunter2" not in done.stdout
