"""Crash safety with real processes: SIGKILL at random moments never leaves half a unit in the log.

The normal suite runs 50 kills; set ANAGRAPHEUS_CRASH_TRIALS (e.g. 1000) for a longer soak.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, register_builtin_events

PINS_PER_UNIT = 5
TRIALS = int(os.environ.get("ANAGRAPHEUS_CRASH_TRIALS", "50"))

CHILD = """
import random, sys
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, register_builtin_events
types = EventTypeRegistry()
register_builtin_events(types)
store = SQLiteEventStore(sys.argv[1])
pins = int(sys.argv[2])
print("ready", flush=True)
while True:
    ledger = PinLedger(store, types)
    for i in range(pins):
        nonce = random.random()
        ledger.resolve(f"p1:model_call:k{i}", kind="model_call", effect=lambda: {"nonce": nonce}, interpret=dict)
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


def test_sigkill_at_random_moments_leaves_every_unit_whole_or_absent(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    types = EventTypeRegistry()
    register_builtin_events(types)
    rng = random.Random(20261130)
    resumed_draws = 0
    for _ in range(TRIALS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(PINS_PER_UNIT)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.04))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
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
                    assert value == json.loads(pin.raw)
                    resumed_draws += 1
                for i in range(len(drawn), PINS_PER_UNIT):
                    resumed.resolve(
                        f"p1:model_call:k{i}", kind="model_call", effect=lambda: {"nonce": -1}, interpret=dict
                    )
                resumed.commit()
            check_log(store)
            assert PinLedger.open_units(store) == []
    if TRIALS >= 50:
        # The kills must land mid-unit often enough to prove resumption, not only between units.
        assert resumed_draws > 0


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_kill_during_commit_never_half_commits(tmp_path: Path) -> None:
    """Kill while commits of large units are in flight: each unit is all in the log or all in scratch."""
    path = tmp_path / "commit.db"
    script = """
import sys
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, register_builtin_events
types = EventTypeRegistry(); register_builtin_events(types)
store = SQLiteEventStore(sys.argv[1], synchronous="NORMAL")
print("ready", flush=True)
while True:
    ledger = PinLedger(store, types)
    for i in range(300):
        ledger.resolve(f"p1:model_call:k{i}", kind="model_call", effect=lambda: "x" * 200, interpret=str)
    ledger.commit()
"""
    types = EventTypeRegistry()
    register_builtin_events(types)
    rng = random.Random(7)
    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        with SQLiteEventStore(path) as store:
            events = list(store.read())
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            per_unit = Counter(json.loads(e.payload)["unit_id"] for e in events if e.type == "pin_promoted")
            assert all(n == 300 for n in per_unit.values()), per_unit
            for unit in PinLedger.open_units(store):
                assert unit.unit_id not in per_unit
                PinLedger(store, types, unit_id=unit.unit_id).abandon(reason="killed mid-commit")
