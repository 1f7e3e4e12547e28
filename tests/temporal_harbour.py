"""A Temporal worker for the Temporal recipe's tests: the harbour agent's run as a workflow, killable mid-run.

`python -m tests.temporal_harbour ADDRESS TASK_QUEUE STORE LOG` runs a worker on the Temporal server at ADDRESS
until it is killed. The workflow (`HarbourWorkflow`) runs the harbour agent once and returns its `all_messages()`
as JSON. With HARBOUR_PINNING=1 the agent is pinned with `TemporalPins` (the model and each tool inside their
activities); with HARBOUR_PINNING=workflow a `Pinning` is given to the run in workflow code, which must fail the
workflow at once; HARBOUR_HANG hangs one call (see tests/harbour_agent.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin, TemporalDurability
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from anagrapheus import Pinning, SQLiteEventStore
from anagrapheus.provider.temporal import TemporalPins
from tests.harbour_agent import harbour_agent

# Short timeouts: a killed worker's activity is retried on the next worker after this long.
ACTIVITY = {"start_to_close_timeout": timedelta(seconds=4), "retry_policy": RetryPolicy(maximum_attempts=10)}


def whose() -> str | None:
    """The workflow the running call belongs to, as the log names it."""
    return activity.info().workflow_id if activity.in_activity() else None


def build(store_at: str, log: Path) -> Agent[None, str]:
    """The recipe: `TemporalDurability`, and (with pins) `TemporalPins` pinning the model and tools in activities."""
    durability = TemporalDurability[None](activity_config=ACTIVITY, model_activity_config=ACTIVITY)  # type: ignore[arg-type]
    capabilities: list[AbstractCapability[Any]] = [durability]
    hang = os.environ.get("HARBOUR_HANG")
    if os.environ.get("HARBOUR_PINNING", "1") == "1":
        pins = TemporalPins(SQLiteEventStore(store_at))
        capabilities.append(pins)
        return harbour_agent(
            log, capabilities=capabilities, whose=whose, hang=hang, pin_model=pins.model, pin_tool=pins.tool
        )
    return harbour_agent(log, capabilities=capabilities, whose=whose, hang=hang)


STORE_AT = os.environ.get("HARBOUR_STORE", "")
AGENT = build(STORE_AT, Path(os.environ.get("HARBOUR_LOG", os.devnull))) if STORE_AT else None


@workflow.defn
class HarbourWorkflow:
    """One agent run, durable: model requests and tool calls are activities, pinned inside them."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        assert AGENT is not None
        if os.environ.get("HARBOUR_PINNING") == "workflow":  # workflow-nondeterminism-ok: fixed per worker
            store = SQLiteEventStore(STORE_AT)
            from anagrapheus import PinLedger

            result = await AGENT.run(prompt, capabilities=[Pinning(PinLedger(store, unit_id="in-workflow"))])
        else:
            result = await AGENT.run(prompt)
        return result.all_messages_json().decode()


async def main(address: str, task_queue: str) -> None:
    """Run a worker for the workflow and the agent's activities until killed."""
    assert AGENT is not None
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[HarbourWorkflow],
        plugins=[AgentPlugin(AGENT)],
        workflow_runner=UnsandboxedWorkflowRunner(),
        # A killed worker's workflow task goes to the next worker soon, instead of after the default 10 s.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    )
    print("worker ready", flush=True)
    await worker.run()


if __name__ == "__main__":
    # SIGTERM ends the worker as a process's end does: `atexit` runs (a coverage run saves its data there).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    asyncio.run(main(sys.argv[1], sys.argv[2]))
