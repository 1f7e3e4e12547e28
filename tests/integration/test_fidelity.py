"""Fidelity: each run surface recorded live through `Pinning`, then replayed strictly in a fresh process.

Every surface is recorded in one process and replayed in another (one process per mode, not per
surface, to keep the suite's time). For every surface: the replay reaches no model and no tool body
(but the body of a tool that delegates to an agent, which runs again, its delegate answered from its
pins), produces the same output (or the same exception class and status), and the same messages, byte
for byte as JSON: timestamps, `run_id` and `conversation_id` included. The MCP surface's stdio server
logs each start: the live run starts it once, the replay never. `run_stream` with an output tool ends
with a request it builds after the run's last hook: its times are pinned too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fidelity_runs import SURFACES

ROOT = Path(__file__).resolve().parents[2]
FAILING = {"usage_limits", "failed_stream"}
DELEGATING = {"delegation"}
"""Surfaces whose tool runs another agent: a replay runs its body again, the agent answered from its pins (#45)."""


def in_fresh_process(mode: str, directory: Path) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fidelity_runs", mode, str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((directory / f"{mode}.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every surface recorded in one process, then replayed in another that never saw the recording run."""
    directory = tmp_path_factory.mktemp("fidelity")
    return in_fresh_process("record", directory), in_fresh_process("replay", directory)


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_surface_replays_strictly_in_a_fresh_process(
    surface: str, runs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    live, replayed = runs[0][surface], runs[1][surface]

    assert live["model_calls"] > 0
    assert (replayed["model_calls"], replayed["mcp_servers_started"]) == (0, 0)
    assert replayed["tool_calls"] == (live["tool_calls"] if surface in DELEGATING else 0)
    assert live["mcp_servers_started"] == (1 if surface == "mcp_stdio" else 0)
    if surface == "mcp_stdio":
        assert "Ask the harbour master" in live["output"]  # the server's instructions reached the model
    if surface in FAILING:
        assert "error" in live
        assert replayed["error"] == live["error"]
        return
    assert "error" not in replayed, replayed.get("error")
    assert replayed["output"] == live["output"]
    assert replayed["messages"] == live["messages"]
