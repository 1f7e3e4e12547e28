"""Many processes on one Postgres log: nothing lost, nothing torn, no gaps, typed conflicts only; SIGKILL mid-unit.

The processes are forked from one that has imported anagrapheus once (tests/fork_server.py).
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.timeline import EventTypeRegistry
from anagrapheus.timeline.stores.postgres import PostgresEventStore
from tests.fork_server import ForkServer

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]

PINS = 4

WORKER = """
import json, sys, time
from anagrapheus.errors import SeqConflict, UnitBusy, UnitClosed
from anagrapheus.timeline import EventTypeRegistry, PendingEvent, PinLedger
from anagrapheus.timeline.stores.postgres import PostgresEventStore
from tests.fork_server import ForkServer
dsn, schema, tag, units, pins = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
types = EventTypeRegistry()
store = PostgresEventStore(dsn, schema=schema, unit_wait=0.1)
report = {"committed": [], "busy": 0, "closed": 0, "seq_conflicts": 0, "markers": 0}
print("ready", flush=True)
sys.stdin.readline()
# Every worker goes for the same unit at once: one draws (slowly: it holds the unit for 4 s, so the others
# arrive while it does), the others are refused before any effect.
shared = PinLedger(store, types, unit_id="shared")
try:
    for i in range(pins):
        shared.resolve(f"p1:tool_call:s{i}", kind="tool_call", effect=lambda: time.sleep(1.0) or tag, interpret=str)
    shared.commit()
    report["committed"].append("shared")
except UnitBusy:
    report["busy"] += 1
except UnitClosed as e:
    # Arrived after the winner committed (a very slow start): refused too, and before its effect.
    assert e.raw_text is None, "the effect of a draw into a closed unit ran"
    report["closed"] += 1
for u in range(units):
    ledger = PinLedger(store, types)
    for i in range(pins):
        ledger.resolve(f"p1:tool_call:{i}", kind="tool_call", effect=lambda: [tag, u, i], interpret=list)
    ledger.commit()
    report["committed"].append(ledger.unit_id)
    marker = PendingEvent(namespace="test", type="marker", schema_version=1, payload=json.dumps({"w": tag, "u": u}))
    try:
        store.append([marker], expected_last_seq=store.last_seq())
        report["markers"] += 1
    except SeqConflict:
        report["seq_conflicts"] += 1
store.close()
print(json.dumps(report), flush=True)
"""


def test_processes_commit_units_at_once(
    postgres_dsn: str, pg_schema: str, types: EventTypeRegistry, forks: ForkServer
) -> None:
    workers, units = 4, 15
    PostgresEventStore(postgres_dsn, schema=pg_schema).close()  # migrated once; the race is on the log
    procs = [forks.start(WORKER, postgres_dsn, pg_schema, f"w{n}", str(units), str(PINS)) for n in range(workers)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=180) for proc in procs]
    # Any error but the typed conflicts (SeqConflict, UnitBusy, UnitClosed) would have ended a worker with a traceback.
    assert [proc.returncode for proc in procs] == [0] * workers, [err for _, err in outputs]
    reports: list[dict[str, Any]] = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]

    with PostgresEventStore(postgres_dsn, schema=pg_schema) as store:
        events = list(store.read())
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), "0 gaps"
        assert store.last_seq() == len(events)
        pins = Counter(e.payload_json()["unit_id"] for e in events if e.type == "pin_promoted")
        committed = Counter(unit for report in reports for unit in report["committed"])
        assert set(pins) == set(committed), "0 lost, none invented"
        assert all(n == 1 for n in committed.values())
        assert all(n == PINS for n in pins.values()), "0 torn"
        # Each unit's pins are one append: consecutive seq numbers.
        for unit in pins:
            seqs = [e.seq for e in events if e.correlation_id == unit]
            assert seqs == list(range(seqs[0], seqs[0] + PINS))
        assert committed["shared"] == 1
        assert sum(r["busy"] + r["closed"] for r in reports) == workers - 1
        markers = [e for e in events if e.type == "marker"]
        assert len(markers) == sum(r["markers"] for r in reports)
        assert len(markers) + sum(r["seq_conflicts"] for r in reports) == workers * units
        assert store.open_units() == []


DRAWER = """
import sys, time
from anagrapheus.timeline import EventTypeRegistry, PinLedger
from anagrapheus.timeline.stores.postgres import PostgresEventStore
from tests.fork_server import ForkServer
dsn, schema, unit_id, pins = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
types = EventTypeRegistry()
store = PostgresEventStore(dsn, schema=schema)
ledger = PinLedger(store, types, unit_id=unit_id)
for i in range(pins):
    ledger.resolve(f"p1:tool_call:k{i}", kind="tool_call", effect=lambda: f"drawn by {unit_id} #{i}", interpret=str)
    print(f"drawn {i}", flush=True)
    time.sleep(float(sys.argv[5]))
ledger.commit()
print("committed", flush=True)
time.sleep(60)
"""

RESUMER = """
import json, sys
from anagrapheus.timeline import EventTypeRegistry, PinLedger
from anagrapheus.timeline.stores.postgres import PostgresEventStore
from tests.fork_server import ForkServer
dsn, schema, pins = sys.argv[1], sys.argv[2], int(sys.argv[3])
types = EventTypeRegistry()
store = PostgresEventStore(dsn, schema=schema, unit_wait=10.0)
resumed = {}
for unit in PinLedger.open_units(store):
    ledger = PinLedger(store, types, unit_id=unit.unit_id)
    kept = {p.key: p.raw_text for p in ledger.pins()}
    fresh = 0
    for i in range(pins):
        key = f"p1:tool_call:k{i}"
        def effect(key=key):
            global fresh
            assert key not in kept, f"{key} was in scratch, yet drawn again"
            fresh += 1
            return "drawn by the resumer"
        ledger.resolve(key, kind="tool_call", effect=effect, interpret=str)
    ledger.commit()
    resumed[unit.unit_id] = {"reused": len(kept), "fresh": fresh}
store.close()
print(json.dumps(resumed), flush=True)
"""


def test_sigkill_mid_unit_is_resumed_by_another_process(postgres_dsn: str, pg_schema: str, forks: ForkServer) -> None:
    PostgresEventStore(postgres_dsn, schema=pg_schema).close()
    pins = 5
    rng = random.Random(14)
    expected_units: list[str] = []
    reused = 0
    # Kill after 2, 4 or all 5 draws (mid-unit, or around the commit), then at a random point.
    for trial, wanted in enumerate([1, 3, pins - 1, rng.randint(0, pins - 1)]):
        unit_id = f"unit-{trial}"
        expected_units.append(unit_id)
        child = forks.start(DRAWER, postgres_dsn, pg_schema, unit_id, str(pins), "0.05")
        for _ in range(wanted + 1):
            assert child.stdout.readline().startswith("drawn")
        time.sleep(rng.uniform(0.0, 0.06) if trial == 3 else 0.0)
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child.close()

        resumer = forks.start(RESUMER, postgres_dsn, pg_schema, str(pins))
        out, err = resumer.communicate(timeout=120)
        assert resumer.returncode == 0, err
        resumed = json.loads(out.strip().splitlines()[-1])
        for counts in resumed.values():
            assert counts["reused"] + counts["fresh"] == pins
            reused += counts["reused"]

    with PostgresEventStore(postgres_dsn, schema=pg_schema) as store:
        events = list(store.read())
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        per_unit = Counter(e.correlation_id for e in events)
        # Every unit is in the log exactly once and whole: finished by its drawer or by the resumer.
        assert sorted(per_unit) == expected_units
        assert set(per_unit.values()) == {pins}
        for unit_id in expected_units:
            raws = [str(e.payload_json()["raw"]) for e in events if e.correlation_id == unit_id]
            drawn_by_child = [r for r in raws if r.startswith(f"drawn by {unit_id}")]
            # The child's draws come first and were never drawn twice.
            assert raws[: len(drawn_by_child)] == [f"drawn by {unit_id} #{i}" for i in range(len(drawn_by_child))]
        assert store.open_units() == []
    assert reused > 0, "the kills must land mid-unit at least once"
