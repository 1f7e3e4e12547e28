"""Crash safety with real processes: SIGKILL at random moments never leaves half a unit in the log.

The normal suite runs 50 kills; `pytest --soak` runs 1000, and ANAGRAPHEUS_CRASH_TRIALS sets any number.
Each child is forked from a process that has imported anagrapheus once (tests/fork_server.py): a process of
its own, with its own connection, killed by a real SIGKILL, without a second of imports before every kill.
"""

from __future__ import annotations

import ast
import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from tests.bounds import bound
from tests.fork_server import ForkServer

PINS_PER_UNIT = 5
TRIALS = bound("ANAGRAPHEUS_CRASH_TRIALS", normal=50, soak=1000)
# A unit few pins long but heavy, so its commit is long enough for a kill to land inside it.
COMMIT_PINS = 40
COMMIT_KILLS = bound("ANAGRAPHEUS_COMMIT_KILLS", normal=10, soak=200)

CHILD = """
import random, sys, time
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
types = EventTypeRegistry()
store = SQLiteEventStore(sys.argv[1])
pins, pause_after = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
while True:
    ledger = PinLedger(store, types)
    for i in range(pins):
        nonce = random.random()
        ledger.resolve(f"p1:model_call:k{i}", kind="model_call", effect=lambda: {"nonce": nonce}, interpret=dict)
        if i + 1 == pause_after:
            # Hold still mid-unit, so this trial's kill is known to land between two draws.
            print("paused", flush=True)
            time.sleep(60)
    ledger.commit()
"""


def check_log(store: SQLiteEventStore) -> Counter[str]:
    events = list(store.read())
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq must stay gap-free"
    units: Counter[str] = Counter()
    for event in events:
        assert event.type == "pin_promoted"
        units[json.loads(event.payload)["unit_id"]] += 1
    torn = {unit: n for unit, n in units.items() if n != PINS_PER_UNIT}
    assert not torn, f"units in the log must be whole: {torn}"
    return units


def never() -> object:
    raise AssertionError("a resumed unit must reuse its scratch draws, not draw again")


@pytest.mark.soak
def test_sigkill_at_random_moments_leaves_every_unit_whole_or_absent(tmp_path: Path, forks: ForkServer) -> None:
    path = tmp_path / "crash.db"
    types = EventTypeRegistry()
    rng = random.Random(20261130)
    resumed_draws = 0
    for trial in range(TRIALS):
        # Every fifth kill lands mid-unit for certain (the child pauses after two draws); the rest at random.
        pause_after = 2 if trial % 5 == 0 else 0
        child = forks.start(CHILD, str(path), str(PINS_PER_UNIT), str(pause_after))
        assert child.stdout.readline().strip() == "ready"
        if pause_after:
            assert child.stdout.readline().strip() == "paused"
        else:
            time.sleep(rng.uniform(0.0, 0.04))
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child.close()
        with SQLiteEventStore(path) as store:
            check_log(store)
            open_units = PinLedger.open_units(store)
            assert len(open_units) <= 1, "only the unit in progress can be open"
            for unit in open_units:
                drawn = store.scratch_list(unit.unit_id)
                assert [p.key for p in drawn] == [f"p1:model_call:k{i}" for i in range(len(drawn))]
                resumed = PinLedger(store, types, unit_id=unit.unit_id)
                for pin in drawn:
                    value = resumed.resolve(pin.key, kind="model_call", effect=never, interpret=dict)
                    assert value == json.loads(pin.raw_text)
                    resumed_draws += 1
                for i in range(len(drawn), PINS_PER_UNIT):
                    resumed.resolve(
                        f"p1:model_call:k{i}", kind="model_call", effect=lambda: {"nonce": -1}, interpret=dict
                    )
                resumed.commit()
            check_log(store)
            assert PinLedger.open_units(store) == []
    # Resumption was exercised, whatever the number of trials: the paused kills left draws to reuse.
    assert resumed_draws >= 2


@pytest.mark.soak
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_kill_during_commit_never_half_commits(tmp_path: Path, forks: ForkServer) -> None:
    """Kill as a large unit starts to commit: it is all in the log or all in scratch, and some kills land mid-commit."""
    path = tmp_path / "commit.db"
    script = """
import sys
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
types = EventTypeRegistry()
store = SQLiteEventStore(sys.argv[1], synchronous="NORMAL")
print("ready", flush=True)
while True:
    ledger = PinLedger(store, types)
    for i in range(int(sys.argv[2])):
        ledger.resolve(f"p1:model_call:k{i}", kind="model_call", effect=lambda: "x" * 4000, interpret=str)
    print("committing", flush=True)
    ledger.commit()
"""
    types = EventTypeRegistry()
    rng = random.Random(7)
    landed_in_commit = 0
    for _ in range(COMMIT_KILLS):
        child = forks.start(script, str(path), str(COMMIT_PINS))
        assert child.stdout.readline().strip() == "ready"
        assert child.stdout.readline().strip() == "committing"
        time.sleep(rng.choice([0.0, rng.uniform(0.0, 0.003)]))
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child.close()
        with SQLiteEventStore(path) as store:
            events = list(store.read())
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            per_unit = Counter(json.loads(e.payload)["unit_id"] for e in events if e.type == "pin_promoted")
            assert all(n == COMMIT_PINS for n in per_unit.values()), per_unit
            for unit in PinLedger.open_units(store):
                assert unit.unit_id not in per_unit
                # The whole unit still in scratch after its commit began: the kill landed inside commit().
                landed_in_commit += unit.pins == COMMIT_PINS
                PinLedger(store, types, unit_id=unit.unit_id).abandon(reason="killed mid-commit")
    assert landed_in_commit > 0, "no kill landed while a commit was under way"


RETRYING = """
import os, sys, threading, warnings
from collections import Counter
from anagrapheus.timeline import PinLedger, SQLiteEventStore
from tests.retry_turn import Harbour, try_until_done

way, where, crash = sys.argv[1], sys.argv[2], sys.argv[3] == "crash"
harbour = Harbour(drops=1 if crash else 0)
if crash:
    # The first run's radio drops only once the tide's body has started, so that run reads the tide (its failure
    # may still cancel the tide call while its body runs): cancelled before it started, the tide would be read by
    # the retry, which the kill may cut short before its pin is written.
    tide, tide_started = harbour.tide, threading.Event()
    def tide_started_first(port: str) -> str:
        \"\"\"Read the tide table.\"\"\"
        tide_started.set()
        return tide(port)
    tide_started_first.__name__ = "tide"
    harbour.tide = tide_started_first
    # The retry's radio call kills the process while it is out: nothing after it is drawn or pinned.
    radio = harbour.radio
    def radio_then_die(to: str) -> str:
        \"\"\"Call someone on the radio.\"\"\"
        if harbour.reached["radio"] == 0:
            tide_started.wait(10)
        if harbour.reached["radio"] == 1:
            harbour.reached["radio"] += 1
            print(dict(harbour.reached), flush=True)
            os._exit(9)
        return radio(to)
    radio_then_die.__name__ = "radio"
    harbour.radio = radio_then_die
    # The resumed process meets the first run's pinned failure again: its radio does not drop a second time.
store = SQLiteEventStore(where)
ledger = PinLedger(store, unit_id="berth-booking")
print(try_until_done(harbour.agent(way, ledger))[1], flush=True)
ledger.commit()
print(dict(harbour.reached), flush=True)
"""


@pytest.mark.parametrize("way", ["pinned", "pinning"])
def test_a_retry_killed_midway_is_resumed_by_the_next_process_from_its_pins(
    tmp_path: Path, forks: ForkServer, way: str
) -> None:
    # The retry rule (#40) across a crash: the next process takes the same places, so what was drawn is not redrawn.
    where = str(tmp_path / "berth.db")

    def run(mode: str) -> tuple[int, list[str]]:
        child = forks.start(RETRYING, way, where, mode)
        out, errors = child.communicate(timeout=120)
        assert child.returncode in (0, 9), errors
        return child.returncode, out.splitlines()

    code, said = run("crash")
    assert code == 9
    first = ast.literal_eval(said[-1])
    code, said = run("resume")
    assert code == 0 and said[-2] == "berth 4 at high tide, pilot told"
    second = ast.literal_eval(said[-1])
    # The first request was drawn once (in the first process), the tide read once; the radio call the kill cut short
    # is drawn again by the second process, and the closing request once. Before the rule: the model three times.
    # The radio's failure may cancel the sync tide call beside it while its body runs: what it returned is pinned
    # all the same, both ways, so the second process does not read the tide again.
    assert first["model"] + second["model"] == 2
    assert second["radio"] == 1
    assert first["tide"] + second["tide"] == 1
