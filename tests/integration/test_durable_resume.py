"""anagrapheus.resume: a run killed mid-way is listed as open and resumed, repeating only the call in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from anagrapheus import OpenRun, PinLedger, Pinning, SQLiteEventStore, aresume, open_runs, resume
from anagrapheus.errors import UnitClosed, UsageError
from anagrapheus.timeline import EventTypeRegistry
from tests.harbour_agent import harbour_agent

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from pathlib import Path
from anagrapheus import EventTypeRegistry, PinLedger, Pinning, SQLiteEventStore
from tests.harbour_agent import harbour_agent
types = EventTypeRegistry()
ledger = PinLedger(SQLiteEventStore(sys.argv[1]), types, unit_id="voyage")
agent = harbour_agent(Path(sys.argv[2]), capabilities=[Pinning(ledger)], whose=lambda: "voyage", hang="voyage:tide")
agent.run_sync("the north quay")
"""


def crash_mid_run(store_at: Path, log: Path) -> None:
    """Run the harbour agent in a child process and SIGKILL it while its `tide` call runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(store_at), str(log)], cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while not (log.exists() and "tool voyage tide" in log.read_text()):
        assert child.poll() is None and time.monotonic() < deadline, "the child never reached the tide call"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()


def test_a_crashed_run_is_listed_and_resumed_repeating_only_the_call_in_flight(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    store_at, log = tmp_path / "pins.db", tmp_path / "calls.log"
    crash_mid_run(store_at, log)
    store = SQLiteEventStore(store_at)

    (found,) = open_runs(store)
    assert isinstance(found, OpenRun)
    assert found.unit_id == "voyage"
    # Two model requests, the weather, the run's id and its clock stamps: the tide never finished.
    assert found.kinds["model_call"] == 2 and found.kinds["tool_call"] == 1
    assert found.pins == sum(found.kinds.values())
    assert found.retried == 0 and found.failed == 0
    assert found.last_activity is not None

    agent = harbour_agent(log, capabilities=[], whose=lambda: "voyage")
    result = resume(agent, "the north quay", store=store, registry=types, unit_id="voyage")

    calm_log = tmp_path / "calm.log"
    calm = harbour_agent(calm_log, capabilities=[]).run_sync("the north quay")
    assert result.output == calm.output
    calls = Counter(log.read_text().splitlines())
    assert calls == Counter(
        {
            "model voyage 0": 1,
            "tool voyage weather": 1,
            "model voyage 1": 1,
            "tool voyage tide": 2,  # in flight at the kill: at least once more
            "model voyage 2": 1,
            "tool voyage berths": 1,
            "model voyage 3": 1,
        }
    )
    assert open_runs(store) == []
    assert PinLedger(store, types, unit_id="voyage").state == "committed"
    with pytest.raises(UnitClosed):
        resume(agent, "the north quay", store=store, registry=types, unit_id="voyage")
    store.close()


def test_aresume_resumes_from_async_code_and_refuses_an_agent_that_pins_itself(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    # An open unit with nothing drawn yet resumes as a fresh run.
    ledger = PinLedger(store, types, unit_id="fresh")
    pinned = harbour_agent(log, capabilities=[Pinning(ledger)])
    with pytest.raises(UsageError, match="carries a Pinning"):
        resume(pinned, "the north quay", store=store, registry=types, unit_id="fresh")

    plain = harbour_agent(log, capabilities=[])
    result = asyncio.run(aresume(plain, "the north quay", store=store, registry=types, unit_id="fresh"))
    assert "high tide" not in result.output and "tide at the north quay" in result.output
    assert PinLedger(store, types, unit_id="fresh").state == "committed"
    assert open_runs(store) == []


def test_open_runs_counts_retries_and_failures_of_a_unit_with_no_clock(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    from anagrapheus.provider.failures import ExceptionCodec

    ledger = PinLedger(store, types, unit_id="bare")
    ledger.resolve("p1:x:1", kind="x", effect=lambda: 1, interpret=int)
    ledger.resolve("p1:x:1", kind="x", effect=lambda: 1, interpret=int)

    def broken() -> object:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        ledger.resolve("p1:x:2", kind="x", effect=broken, interpret=int, failure=ExceptionCodec())
    (found,) = open_runs(store)
    assert (found.pins, found.retried, found.failed, found.last_activity) == (2, 1, 1, None)
    assert found.kinds == {"x": 1, "x!failed": 1}
