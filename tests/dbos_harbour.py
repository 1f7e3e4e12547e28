"""A DBOS worker for the DBOS recipe's tests: the harbour agent's run as a workflow, killable mid-run.

`python -m tests.dbos_harbour SYSDB STORE LOG EXECUTOR [ID[=PROMPT] ...]` launches DBOS on the system
database SYSDB as executor EXECUTOR (which recovers that executor's pending workflows), starts each
workflow ID not yet started (with PROMPT, by default `berth of ID`), and prints one JSON line
`{id: output}` once all of them have finished. STORE is anagrapheus's store: a SQLite path, or a
`postgresql://` DSN followed by `#schema`. With HARBOUR_HANG=<id>:<tool>, that tool call hangs after
logging its line (see tests/harbour_agent.py); HARBOUR_PINNING=0 runs the agent without Pinning, and
HARBOUR_PINNING=tools also pins each tool inside its body (`pinned_tool`), so a tool killed after it returned is
answered from its pin. With HARBOUR_MESSAGES=1 each workflow returns its run's `all_messages()` as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec.dbos import DBOSDurability

from anagrapheus import EventTypeRegistry, Pinning, SQLiteEventStore
from anagrapheus.provider import UnitPerRun, dbos_workflow_id, pinned_tool
from anagrapheus.timeline.stores.ports import TimelineStore
from tests.harbour_agent import harbour_agent


def open_store(where: str) -> TimelineStore:
    """The anagrapheus store the workers share: SQLite at a path, or PostgreSQL at `dsn#schema`."""
    if where.startswith("postgresql://"):
        from anagrapheus.timeline.stores.postgres import PostgresEventStore

        dsn, _, schema = where.partition("#")
        return PostgresEventStore(dsn, schema=schema)
    return SQLiteEventStore(where)


def build(store_at: str, log: Path) -> Agent[None, str]:
    """The recipe: one agent, `DBOSDurability` and one `Pinning` whose unit is the running workflow's id."""
    types = EventTypeRegistry()
    capabilities: list[AbstractCapability[Any]] = [DBOSDurability()]
    pinning = os.environ.get("HARBOUR_PINNING", "1")
    pin_tool: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda tool: tool  # noqa: E731
    if pinning != "0":
        routed = UnitPerRun(open_store(store_at), types, unit_of=dbos_workflow_id)
        capabilities.append(Pinning(routed))
        if pinning == "tools":
            pin_tool = lambda tool: pinned_tool(routed, tool)  # noqa: E731
    hang = os.environ.get("HARBOUR_HANG")
    return harbour_agent(log, capabilities=capabilities, whose=lambda: DBOS.workflow_id, hang=hang, pin_tool=pin_tool)


AGENT: Agent[None, str] | None = None


@DBOS.workflow()
async def harbour_workflow(prompt: str) -> str:
    """One agent run, durable: its model requests are DBOS steps, its tool calls pinned in the workflow's unit."""
    assert AGENT is not None
    result = await AGENT.run(prompt)
    return result.all_messages_json().decode() if os.environ.get("HARBOUR_MESSAGES") == "1" else result.output


async def main(sysdb: str, store_at: str, log: Path, executor: str, workflows: list[str]) -> None:
    """Launch DBOS (recovering this executor's pending workflows), start the new ones, print every output."""
    global AGENT
    AGENT = build(store_at, log)
    config: DBOSConfig = {"name": "harbour", "system_database_url": sysdb, "executor_id": executor}
    DBOS(config=config)
    DBOS.launch()
    handles: dict[str, Any] = {}
    for token in workflows:
        workflow, _, prompt = token.partition("=")
        if await DBOS.get_workflow_status_async(workflow) is None:
            with SetWorkflowID(workflow):
                handles[workflow] = await DBOS.start_workflow_async(harbour_workflow, prompt or f"berth of {workflow}")
        else:
            handles[workflow] = await DBOS.retrieve_workflow_async(workflow)
    results = await asyncio.gather(*(handle.get_result() for handle in handles.values()))
    print(json.dumps(dict(zip(handles, results, strict=True))), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    sysdb_url, store_path, log_path, executor_id, *ids = sys.argv[1:]
    asyncio.run(main(sysdb_url, store_path, Path(log_path), executor_id, ids))
