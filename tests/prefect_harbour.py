"""A Prefect flow for the Prefect recipe's tests: the harbour agent's run as a flow run, killable mid-run.

`python -m tests.prefect_harbour STORE LOG new` runs a new flow run of `harbour` on `the north quay`;
`python -m tests.prefect_harbour STORE LOG FLOW_RUN_ID` runs that flow run again (the recovery recipe). Either
prints the run's `all_messages()` as JSON. The Prefect server is the one PREFECT_API_URL names. HARBOUR_PINNING:
`flow` gives the agent `Pinning(UnitPerRun(..., unit_of=prefect_flow_run_id))` (pins in flow code, around each
task), `tasks` also pins each tool inside its task (`pinned_tool`), `0` pins nothing. HARBOUR_HANG hangs one call
(see tests/harbour_agent.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.flow_engine import run_flow
from prefect.runtime import flow_run
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec.prefect import PrefectDurability

from anagrapheus import Pinning, SQLiteEventStore
from anagrapheus.provider import UnitPerRun, pinned_tool, prefect_flow_run_id
from tests.harbour_agent import harbour_agent


def whose() -> str | None:
    """The flow run the running call belongs to, as the log names it."""
    found: Any = flow_run.id
    return None if found is None else str(found)


def build(store_at: str, log: Path) -> Agent[None, str]:
    """The recipe: `PrefectDurability`, and `Pinning` whose unit is the flow run (its tools pinned in their tasks)."""
    capabilities: list[AbstractCapability[Any]] = [PrefectDurability()]
    pinning = os.environ.get("HARBOUR_PINNING", "flow")
    pin_tool: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda tool: tool  # noqa: E731
    if pinning != "0":
        routed = UnitPerRun(SQLiteEventStore(store_at), unit_of=prefect_flow_run_id)
        capabilities.append(Pinning(routed))
        if pinning == "tasks":
            pin_tool = lambda tool: pinned_tool(routed, tool)  # noqa: E731
    return harbour_agent(
        log, capabilities=capabilities, whose=whose, hang=os.environ.get("HARBOUR_HANG"), pin_tool=pin_tool
    )


AGENT = build(sys.argv[1], Path(sys.argv[2])) if __name__ == "__main__" else None


@flow(name="harbour", persist_result=True)
async def harbour(prompt: str) -> str:
    """One agent run, durable: its model requests and tool calls are Prefect tasks."""
    assert AGENT is not None
    return (await AGENT.run(prompt)).all_messages_json().decode()


async def again(flow_run_id: str) -> str:
    """Run the flow run `flow_run_id` again, in this process: its finished tasks answer from Prefect's cache."""
    async with get_client() as client:
        found = await client.read_flow_run(UUID(flow_run_id))
    return await run_flow(harbour, flow_run=found, parameters=found.parameters)  # type: ignore[return-value]


if __name__ == "__main__":
    which = sys.argv[3]
    messages = asyncio.run(harbour("the north quay") if which == "new" else again(which))
    sys.stdout.write(messages)
