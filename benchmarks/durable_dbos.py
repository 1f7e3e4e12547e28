"""Pinning inside DBOS workflows: its overhead per workflow, and DBOS's recovery time with and without pins.

Overhead: the same agent workflow (a FunctionModel asking for four plain tools one by one, then
answering) runs in-process under `DBOSDurability`, without and with
`Pinning(UnitPerRun(..., unit_of=dbos_workflow_id))`; the two alternate workflow by workflow, and the
figure is the median of the paired ratios (each workflow with pins over the one without, run just before it).

Recovery: a worker process runs the workflow with tools that each take TOOL_SECONDS (standing for real
I/O) and is killed with SIGKILL inside the third tool call; a second process launches DBOS, which
recovers the workflow, and times it from launch to the workflow's result. Without pins DBOS runs every
plain tool call again; with them only the one in flight.

    python benchmarks/durable_dbos.py            # 7 rounds of 10 pairs of workflows; 3 recoveries each way
    python benchmarks/durable_dbos.py --quick    # smoke test (the recovery with pins only)
    python benchmarks/durable_dbos.py --sysdb postgresql://postgres@127.0.0.1:5432/dbos_bench   # DBOS on PostgreSQL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import EventTypeRegistry, Pinning, SQLiteEventStore
from anagrapheus.provider import UnitPerRun, dbos_workflow_id

TOOLS = ("weather", "tide", "berths", "pilots")
TOOL_SECONDS = 0.2
"""How long each tool takes in the recovery measurement (none in the overhead one)."""


def harbour(
    name: str, capabilities: list[AbstractCapability[Any]], log: Path | None, *, latency: float, hang: str | None
) -> Agent:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < len(TOOLS):
            return ModelResponse(parts=[ToolCallPart(TOOLS[len(returns)], {"where": "the north quay"})])
        return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])

    def tool(name: str) -> Any:
        def body(where: str) -> str:
            if log is not None:
                with log.open("a") as f:
                    f.write(f"{name}\n")
            if hang == name:
                time.sleep(600)  # killed here
            time.sleep(latency)
            return f"{name} at {where}"

        body.__name__ = name
        body.__doc__ = f"Read the {name} at a place."
        return body

    return Agent(
        FunctionModel(answer, model_name="harbour"),
        name=f"harbour_{name}",  # DBOS names each agent's steps after it: one name per agent
        tools=[tool(name) for name in TOOLS],
        capabilities=capabilities,
    )


AGENTS: dict[str, Agent] = {}


@DBOS.workflow()
async def bare_workflow(prompt: str) -> str:
    return (await AGENTS["bare"].run(prompt)).output


@DBOS.workflow()
async def pinned_workflow(prompt: str) -> str:
    return (await AGENTS["pinned"].run(prompt)).output


def pinning(store_at: str) -> Pinning:
    types = EventTypeRegistry()
    return Pinning(UnitPerRun(SQLiteEventStore(store_at), types, unit_of=dbos_workflow_id))


def launch(sysdb: str) -> None:
    config: DBOSConfig = {"name": "harbour-bench", "system_database_url": sysdb, "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()


async def overhead(sysdb: str, store_at: str, rounds: int, per_round: int) -> tuple[float, float, float, float]:
    """Median seconds per workflow without and with pins, and the median and upper quartile of paired ratios.

    The two variants alternate workflow by workflow, so a pair shares whatever the machine was doing.
    """
    AGENTS["bare"] = harbour("bare", [DBOSDurability()], None, latency=0, hang=None)
    AGENTS["pinned"] = harbour("pinned", [DBOSDurability(), pinning(store_at)], None, latency=0, hang=None)
    launch(sysdb)
    workflows = {"bare": bare_workflow, "pinned": pinned_workflow}
    times: dict[str, list[float]] = {"bare": [], "pinned": []}
    ratios: list[float] = []
    try:
        for round_no in range(rounds + 1):  # the first round warms up, unmeasured
            for _ in range(per_round):
                took: dict[str, float] = {}
                for variant, workflow in workflows.items():
                    started = time.perf_counter()
                    with SetWorkflowID(f"{variant}-{uuid.uuid4().hex}"):
                        await (await DBOS.start_workflow_async(workflow, "Where do we berth?")).get_result()
                    took[variant] = time.perf_counter() - started
                if round_no:
                    times["bare"].append(took["bare"])
                    times["pinned"].append(took["pinned"])
                    ratios.append(took["pinned"] / took["bare"])
    finally:
        DBOS.destroy()
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(times["bare"]), statistics.median(times["pinned"]), quartiles[1], quartiles[2]


async def child(sysdb: str, store_at: str, log: str, variant: str, workflow_id: str, hang: str | None) -> None:
    """One worker: start (or recover) the workflow, print its result and how long from launch it took."""
    capabilities: list[AbstractCapability[Any]] = [DBOSDurability()]
    if variant == "pinned":
        capabilities.append(pinning(store_at))
    AGENTS[variant] = harbour(variant, capabilities, Path(log), latency=TOOL_SECONDS, hang=hang)
    workflow = bare_workflow if variant == "bare" else pinned_workflow
    started = time.perf_counter()
    launch(sysdb)  # recovers the killed worker's workflow, if there is one
    try:
        if await DBOS.get_workflow_status_async(workflow_id) is None:
            with SetWorkflowID(workflow_id):
                handle = await DBOS.start_workflow_async(workflow, "Where do we berth?")
        else:
            handle = await DBOS.retrieve_workflow_async(workflow_id)
        output = await handle.get_result()
    finally:
        DBOS.destroy()
    print(json.dumps({"output": output, "seconds": time.perf_counter() - started}), flush=True)


def recovery(sysdb: str, store_at: str, folder: Path, variant: str) -> tuple[float, int]:
    """Kill a worker inside the third tool call; return the recovery's seconds and the finished calls it repeated."""
    workflow_id, log = f"{variant}-{uuid.uuid4().hex}", folder / f"{uuid.uuid4().hex}.log"
    command = [sys.executable, __file__, "--child", sysdb, store_at, str(log), variant, workflow_id]
    worker = subprocess.Popen([*command, TOOLS[2]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (log.exists() and TOOLS[2] in log.read_text().split()):
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker never reached its third tool: {worker.communicate()[1][-2000:]}")
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    before = len(log.read_text().split())
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    # The recovery must run the call in flight and the one never started: anything more repeats a finished call.
    return seconds, len(log.read_text().split()) - before - 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 1 round of 2, one recovery with pins")
    parser.add_argument("--sysdb", help="DBOS's system database URL (a fresh SQLite file by default)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sysdb, store_at, log, variant, workflow_id, *hang = args.child
        asyncio.run(child(sysdb, store_at, log, variant, workflow_id, hang[0] if hang else None))
        return
    rounds, per_round, recoveries = (1, 2, 1) if args.quick else (7, 10, 3)
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sysdb = args.sysdb or f"sqlite:///{folder / 'dbos.sqlite'}"
        store_at = str(folder / "pins.db")
        print(f"DBOS system database: {'PostgreSQL' if sysdb.startswith('postgres') else 'SQLite'}")
        bare, pinned, ratio, upper = asyncio.run(overhead(sysdb, store_at, rounds, per_round))
        print(
            f"\noverhead, {len(TOOLS)} tools + {len(TOOLS) + 1} model requests a workflow, {rounds * per_round} pairs:"
        )
        print(f"  DBOSDurability alone          {bare * 1000:8.1f} ms a workflow   1.000x")
        print(
            f"  DBOSDurability + Pinning      {pinned * 1000:8.1f} ms a workflow   {ratio:.3f}x",
            f"(paired; Q3 {upper:.3f}x)",
        )
        print(
            f"\nrecovery after SIGKILL in tool 3 of {len(TOOLS)} ({TOOL_SECONDS * 1000:.0f} ms a tool),"
            " DBOS launch to result:"
        )
        # --quick checks the script runs: the recovery without pins is the same code with two more process starts.
        variants = (("bare", "without pins"), ("pinned", "with pins   "))
        for variant, label in variants[1:] if args.quick else variants:
            runs = [recovery(sysdb, store_at, folder, variant) for _ in range(recoveries)]
            seconds = statistics.median(s for s, _ in runs)
            calls = max(c for _, c in runs)
            print(f"  {label}  {seconds:6.2f} s   finished tool calls run again: {calls}")


if __name__ == "__main__":
    main()
