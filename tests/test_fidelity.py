"""Fidelity: each run surface recorded live through `Pinning`, then replayed strictly in a fresh process.

Every surface is recorded in one process and replayed in another (one process per mode, not per
surface, to keep the suite's time). For every surface: the replay reaches no model and no tool body,
produces the same output (or the same exception class and status), and the same messages. Not yet
byte-equal: message timestamps, `run_id` and `conversation_id` are drawn afresh by the replaying
run, so `same_messages` leaves out exactly those fields (the issue's clock-and-ids item); everything
else, a fallback's failed-attempt times included, is compared as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fidelity_runs import SURFACES

ROOT = Path(__file__).resolve().parents[1]
# Drawn afresh by the replaying run (not pinned yet): message timestamps and run ids.
UNPINNED_FIELDS = frozenset({"timestamp", "run_id", "conversation_id"})
FAILING = {"usage_limits", "failed_stream"}


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


def same_messages(value: Any) -> Any:
    """The messages without the fields the replaying run still draws afresh."""
    if isinstance(value, dict):
        return {k: same_messages(v) for k, v in value.items() if k not in UNPINNED_FIELDS}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [same_messages(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_surface_replays_strictly_in_a_fresh_process(
    surface: str, runs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    live, replayed = runs[0][surface], runs[1][surface]

    assert live["model_calls"] > 0
    assert (replayed["model_calls"], replayed["tool_calls"]) == (0, 0)
    if surface in FAILING:
        assert "error" in live
        assert replayed["error"] == live["error"]
        return
    assert "error" not in replayed, replayed.get("error")
    assert replayed["output"] == live["output"]
    assert same_messages(replayed["messages"]) == same_messages(live["messages"])
