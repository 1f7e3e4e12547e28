"""The DBOS recipe (docs/how-to/durable-dbos.md), with real worker processes killed by SIGKILL mid-run.

Each worker (tests/dbos_harbour.py) runs the harbour agent as a DBOS workflow with `DBOSDurability` and one
`Pinning(UnitPerRun(..., unit_of=dbos_workflow_id))`. Plain function tools are not DBOS steps: without pins a
recovered workflow runs them all again. The normal run kills 2 workers over 4 workflows; `--soak` more.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anagrapheus import EventTypeRegistry, Pinning, ReplayPins, SQLiteEventStore, write_recording
from anagrapheus.timeline import PinLedger, read_recording
from anagrapheus.timeline.events import PinPromoted
from anagrapheus.timeline.stores.ports import TimelineStore
from tests.bounds import bound
from tests.harbour_agent import harbour_agent

ROOT = Path(__file__).resolve().parents[2]
WORKERS = bound("ANAGRAPHEUS_DBOS_WORKERS", normal=2, soak=3)
WORKFLOWS_PER_WORKER = bound("ANAGRAPHEUS_DBOS_WORKFLOWS", normal=2, soak=6)


def _require_dbos() -> None:
    try:
        import dbos  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        reason = "DBOS is not installed (pip install -e '.[dev]' or '.[dbos]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"a DBOS test cannot be skipped under CI=true: {reason}")
        pytest.skip(reason)


@pytest.fixture(
    params=[pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("sqlite", marks=pytest.mark.soak)]
)
def sysdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh DBOS system database: a throwaway PostgreSQL database, or (under --soak) DBOS's SQLite quick start."""
    _require_dbos()
    if request.param == "sqlite":
        if not bound("ANAGRAPHEUS_DBOS_SQLITE", normal=0, soak=1):
            pytest.skip("DBOS's SQLite quick start is exercised under --soak (each worker costs seconds)")
        yield f"sqlite:///{tmp_path / 'dbos.sqlite'}"
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    yield from _pg_database(dsn)


def _pg_database(dsn: str) -> Iterator[str]:
    import psycopg

    name = f"dbos_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # pyright: ignore[reportArgumentType]
    try:
        yield dsn.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # pyright: ignore[reportArgumentType]


class Workers:
    """Starts harbour workers on one system database and one anagrapheus store, and reads their shared log."""

    def __init__(self, sysdb: str, store_at: str, log: Path) -> None:
        self.sysdb, self.store_at, self.log = sysdb, store_at, log
        self.running: list[subprocess.Popen[str]] = []

    def start(self, executor: str, ids: list[str], *, hang: str | None = None) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("HARBOUR_HANG", None)
        if hang is not None:
            env["HARBOUR_HANG"] = hang
        command = [sys.executable, "-m", "tests.dbos_harbour", self.sysdb, self.store_at, str(self.log), executor, *ids]
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.running.append(worker)
        return worker

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, line: str, worker: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 120
        while line not in self.lines():
            if worker.poll() is not None:
                raise AssertionError(f"the worker ended before {line!r}: {worker.communicate()[1][-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {line!r} in the log after 120 s")
            time.sleep(0.05)

    def kill(self, worker: subprocess.Popen[str]) -> None:
        worker.send_signal(signal.SIGKILL)
        worker.wait()

    def outputs(self, worker: subprocess.Popen[str]) -> dict[str, str]:
        out, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def close(self) -> None:
        for worker in self.running:
            if worker.poll() is None:
                self.kill(worker)


def unit_pins(store: TimelineStore, unit: str) -> list[dict[str, Any]]:
    """The payloads of a unit's promoted pins, in draw order."""
    return [
        json.loads(stored.payload)
        for stored in store.read(namespace="anagrapheus", type="pin_promoted")
        if stored.correlation_id == unit and stored.type == PinPromoted.event_type
    ]


def test_a_worker_killed_mid_run_is_recovered_in_another_process_repeating_no_finished_call(
    sysdb: str, tmp_path: Path, types: EventTypeRegistry
) -> None:
    store_at = str(tmp_path / "pins.db")
    workers = Workers(sysdb, store_at, tmp_path / "calls.log")
    try:
        crashing = workers.start("local", ["storm=the north quay"], hang="storm:tide")
        workers.wait_for("tool storm tide", crashing)
        workers.kill(crashing)
        # Another process, as the same executor: DBOS recovers the pending workflow when it launches. The same
        # process runs the same prompt uncrashed, for the output to compare with.
        outputs = workers.outputs(workers.start("local", ["storm", "calm=the north quay"]))
        recovered, calm = outputs["storm"], outputs["calm"]
    finally:
        workers.close()

    assert recovered == calm
    calls = Counter(line for line in workers.lines() if " storm " in line)
    # The tide call was in flight at the kill and ran again (at least once); nothing that had finished did.
    assert calls == Counter(
        {
            "model storm 0": 1,
            "tool storm weather": 1,
            "model storm 1": 1,
            "tool storm tide": 2,
            "model storm 2": 1,
            "tool storm berths": 1,
            "model storm 3": 1,
        }
    )
    store = SQLiteEventStore(store_at)
    try:
        assert store.open_units() == []
        assert PinLedger(store, types, unit_id="storm").state == "committed"
        # The recovered workflow's unit, exported as a recording, replays with no DBOS and no network.
        events = [e for e in store.read(namespace="anagrapheus", type="pin_promoted") if e.correlation_id == "storm"]
        path = write_recording(
            tmp_path / "storm.jsonl",
            events,
            header={
                "description": "a DBOS workflow recovered after SIGKILL",
                "recorded_with": "FunctionModel",
                "rerecord": "pytest tests/integration/test_dbos_recipe.py",
            },
        )
    finally:
        store.close()
    replay_recovered_unit(path, types, tmp_path, expected=calm)


def replay_recovered_unit(path: Path, types: EventTypeRegistry, tmp_path: Path, *, expected: str) -> None:
    """(b) A plain run: the same agent without DBOS, answered from the recording alone."""
    recording = read_recording(path, registry=types)
    replay = ReplayPins.from_events(recording.events, types, unit_id="storm")
    log = tmp_path / "replay.log"
    agent = harbour_agent(log, capabilities=[Pinning(replay)])
    assert agent.run_sync("the north quay").output == expected
    assert not log.exists(), "the replay reached the model or a tool"


@pytest.mark.postgres
def test_workers_on_one_postgres_database_run_workflows_concurrently_through_kills(
    postgres_dsn: str, pg_schema: str, open_pg: Callable[..., Any], tmp_path: Path, types: EventTypeRegistry
) -> None:
    _require_dbos()
    store = open_pg()  # creates the schema the workers share
    databases = _pg_database(postgres_dsn)
    sysdb = next(databases)
    workers = Workers(sysdb, f"{postgres_dsn}#{pg_schema}", tmp_path / "calls.log")
    ids = {f"w{i}": [f"w{i}-{j}" for j in range(WORKFLOWS_PER_WORKER)] for i in range(WORKERS)}
    try:
        first = {executor: workers.start(executor, mine, hang=f"{mine[-1]}:tide") for executor, mine in ids.items()}
        for executor, worker in first.items():
            workers.wait_for(f"tool {ids[executor][-1]} tide", worker)
        for worker in first.values():
            workers.kill(worker)
        again = {executor: workers.start(executor, mine) for executor, mine in ids.items()}
        outputs: dict[str, str] = {}
        for worker in again.values():
            outputs.update(workers.outputs(worker))
    finally:
        workers.close()
        next(databases, None)

    every = [workflow for mine in ids.values() for workflow in mine]
    assert outputs == {w: f"weather at berth of {w} | tide at berth of {w} | berths at berth of {w}" for w in every}
    assert store.open_units() == []
    calls = Counter(workers.lines())
    for workflow in every:
        assert PinLedger(store, types, unit_id=workflow).state == "committed"
        pins = unit_pins(store, workflow)
        # Whole: every model request and tool call of the run, once each. Its own: no other workflow's prompt.
        kinds = Counter(pin["kind"] for pin in pins)
        assert kinds["tool_call"] == 3 and kinds["model_call"] == 4, kinds
        mentioned = {found for pin in pins for found in re.findall(r"berth of (w\d+-\d+)", json.dumps(pin["raw"]))}
        assert mentioned == {workflow}
        # Each call ran once, or twice when it was in flight at a kill.
        for name in ("weather", "tide", "berths"):
            assert 1 <= calls[f"tool {workflow} {name}"] <= 2
    hung = [mine[-1] for mine in ids.values()]
    assert all(calls[f"tool {w} tide"] == 2 for w in hung)
