"""The Prefect recipe (docs/how-to/durable-prefect.md) against a real local Prefect server on SQLite, with SIGKILLs.

The server is `prefect server start` on a fresh SQLite database. Each process (tests/prefect_harbour.py) runs the
harbour agent in a flow under `PrefectDurability` and `Pinning(UnitPerRun(..., unit_of=prefect_flow_run_id))`,
its tools pinned inside their tasks. One flow run goes through three kills: (a) while a model request is in flight,
(b) while a side-effecting tool runs, (c) after a tool returned and before Prefect recorded its task as complete;
after each, a fresh process runs the same flow run again (the recovery recipe). Then the flow run's unit replays
offline, in a process that never imports Prefect, and its `all_messages()` are compared byte for byte.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_temporal_recipe import replay_offline

pytestmark = pytest.mark.durable

ROOT = Path(__file__).resolve().parents[2]
KILLS = ["model 0", "tide", "berths returned"]
"""Where each process but the last hangs, to be killed: (a) a model request, (b) a tool running, (c) a tool returned."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A local Prefect server on SQLite: the environment that points a process at it."""
    try:
        import prefect  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        pytest.skip("Prefect is not installed (pip install -e '.[prefect]')")
    cli = Path(sys.executable).parent / "prefect"
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        [str(cli) if cli.exists() else "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not _healthy(env["PREFECT_API_URL"]):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"the Prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
        yield env
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _healthy(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


class FlowRuns:
    """Runs the harbour flow in fresh processes on one server and one anagrapheus store, and reads their log."""

    def __init__(self, env: dict[str, str], tmp_path: Path, *, pinning: str) -> None:
        self.env, self.store_at, self.log = env, str(tmp_path / "pins.db"), tmp_path / "calls.log"
        self.pinning = pinning

    def start(self, which: str, *, hang: str | None = None) -> subprocess.Popen[str]:
        env = {**self.env, "PYTHONPATH": str(ROOT), "HARBOUR_PINNING": self.pinning}
        env.pop("HARBOUR_HANG", None)
        if hang is not None:
            env["HARBOUR_HANG"] = hang
        command = [sys.executable, "-m", "tests.prefect_harbour", self.store_at, str(self.log), which]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def logged(self, line: str) -> bool:
        """Whether `line` (`<kind> <what>`) was logged, by any flow run, since `mark`."""
        kind, what = line.split(" ", 1)
        return any(seen.split(" ", 2)[::2] == [kind, what] for seen in self.lines()[self.mark :])

    def wait_for(self, line: str, process: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 120
        while not self.logged(line):
            if process.poll() is not None:
                raise AssertionError(f"the flow run ended before {line!r}: {process.communicate()[1][-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {line!r} in the log after 120 s: {self.lines()}")
            time.sleep(0.05)

    mark = 0

    def through_kills(self) -> tuple[str, str]:
        """Run a new flow run, kill it at each of KILLS in turn running it again, and let a last process finish it."""
        which = "new"
        for hang in KILLS:
            self.mark = len(self.lines())
            process = self.start(which, hang=f"*:{hang}")
            self.wait_for(_logged(hang), process)
            process.send_signal(signal.SIGKILL)
            process.communicate()
            which = self.lines()[0].split()[1]  # the flow run's id, as the first model request logged it
        out, err = self.start(which).communicate(timeout=180)
        assert out, err[-3000:]
        return which, out


def _logged(hang: str) -> str:
    """The log line (kind and what, the flow run's id between) the call hung at writes."""
    if hang.startswith("model "):
        return f"model {hang.removeprefix('model ')}"
    if hang.endswith(" returned"):
        return f"returned {hang.removesuffix(' returned')}"
    return f"tool {hang}"


def _calls(lines: list[str], flow_run: str) -> Counter[str]:
    return Counter(line.replace(f" {flow_run} ", " ") for line in lines)


def test_pins_in_tasks_repeat_no_finished_call_and_close_the_returned_tools_window(
    prefect_api: dict[str, str], tmp_path: Path
) -> None:
    runs = FlowRuns(prefect_api, tmp_path, pinning="tasks")
    flow_run, messages = runs.through_kills()
    # (a) and (b) were in flight and ran again; (c) had returned, its pin written inside the task before Prefect
    # recorded the task: the task run again is answered from the pin. Finished tasks answer from Prefect's cache.
    assert _calls(runs.lines(), flow_run) == Counter(
        {
            "model 0": 2,
            "tool weather": 1,
            "model 1": 1,
            "tool tide": 2,
            "model 2": 1,
            "tool berths": 1,
            "returned berths": 1,
            "model 3": 1,
        }
    )
    assert replay_offline(runs.store_at, f"prefect:{flow_run}", tmp_path) == messages


def test_without_pins_the_tool_killed_after_it_returned_runs_again(prefect_api: dict[str, str], tmp_path: Path) -> None:
    runs = FlowRuns(prefect_api, tmp_path, pinning="0")
    flow_run, _ = runs.through_kills()
    calls = _calls(runs.lines(), flow_run)
    assert calls["tool berths"] == 2  # the side effect repeated: Prefect never recorded the task as complete
    assert calls["tool weather"] == 1 and calls["model 1"] == 1  # finished and cached: not repeated


def test_the_flow_run_id_names_the_unit_only_inside_a_flow_run() -> None:
    from anagrapheus.errors import UsageError
    from anagrapheus.provider import prefect_flow_run_id

    with pytest.raises(UsageError, match="not inside a Prefect flow run"):
        prefect_flow_run_id(None)  # type: ignore[arg-type]
