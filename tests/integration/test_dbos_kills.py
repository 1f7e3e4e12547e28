"""The DBOS recipe through the three kills every durable engine is held to, on a PostgreSQL system database.

One workflow, one worker process killed by SIGKILL at each of: (a) a model request in flight, (b) a side-effecting
tool running, (c) a tool that returned before its result was recorded; each time a fresh process launches DBOS as
the same executor and recovers the workflow. With pins (`Pinning(UnitPerRun(...))`, each tool also pinned inside its
body), nothing that finished runs again; without, DBOS runs every tool call again (tools are not steps). Then the
workflow's unit replays offline, in a process that never imports DBOS, and its `all_messages()` are compared byte for
byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_dbos_recipe import Workers, _pg_database, _require_dbos
from tests.integration.test_temporal_recipe import replay_offline

pytestmark = [pytest.mark.durable, pytest.mark.postgres]

KILLS = [("model 0", "model storm 0"), ("tide", "tool storm tide"), ("berths returned", "returned storm berths")]
"""Where each worker but the last hangs, and the line it logs there: (a), (b) and (c)."""


@pytest.fixture
def sysdb(postgres_dsn: str) -> Iterator[str]:
    _require_dbos()
    yield from _pg_database(postgres_dsn)


def through_kills(workers: Workers) -> str:
    """Start the workflow, kill a worker at each of KILLS in turn, and let a last worker finish it."""
    ids = ["storm=the north quay"]
    for hang, line in KILLS:
        worker = workers.start("local", ids, hang=f"storm:{hang}")
        workers.wait_for(line, worker)
        workers.kill(worker)
        ids = ["storm"]
    return workers.outputs(workers.start("local", ids))["storm"]


def test_pins_repeat_no_finished_call_and_close_the_returned_tools_window(
    sysdb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARBOUR_PINNING", "tools")
    monkeypatch.setenv("HARBOUR_MESSAGES", "1")
    workers = Workers(sysdb, str(tmp_path / "pins.db"), tmp_path / "calls.log")
    try:
        messages = through_kills(workers)
    finally:
        workers.close()
    assert Counter(workers.lines()) == Counter(
        {
            "model storm 0": 2,
            "tool storm weather": 1,
            "model storm 1": 1,
            "tool storm tide": 2,
            "model storm 2": 1,
            "tool storm berths": 1,
            "returned storm berths": 1,
            "model storm 3": 1,
        }
    )
    assert replay_offline(workers.store_at, "storm", tmp_path) == messages


def test_without_pins_every_tool_call_runs_again_on_recovery(
    sysdb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARBOUR_PINNING", "0")
    workers = Workers(sysdb, str(tmp_path / "pins.db"), tmp_path / "calls.log")
    try:
        through_kills(workers)
    finally:
        workers.close()
    calls = Counter(workers.lines())
    # DBOS replays its model steps, but tools are not steps: each recovery runs every earlier tool call again.
    assert calls["tool storm weather"] == 3 and calls["tool storm tide"] == 3 and calls["tool storm berths"] == 2
    assert calls["model storm 1"] == 1
