"""A unit held by a live process is refused, and taken over once that process dies.

Kept apart from `tests/timeline/resolving/test_ledger_races.py` because it starts a Python process that imports
the package: under mutation testing the child inherits mutmut's environment and fails in its trampoline,
so this file cannot sit in tests/timeline/ (whose files `.ci/mutation_slice.py` runs against
`timeline/resolving/ledger.py`), and `tests/timeline/resolving/test_ledger_races.py` now can.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from anagrapheus.errors import UnitBusy
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_key


def identity(raw: Any) -> Any:
    return raw


K1 = pin_key("model_call", {"prompt": "one"})


HOLDER = """
import sys, time
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
store = SQLiteEventStore(sys.argv[1])
ledger = PinLedger(store, EventTypeRegistry(), unit_id="shared")
ledger.resolve("p1:model_call:k0", kind="model_call", effect=lambda: "held", interpret=str)
print("holding", flush=True)
time.sleep(60)
"""


def test_a_unit_held_by_a_live_process_is_refused_and_taken_over_once_it_dies(
    types: EventTypeRegistry, db_path: Any
) -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(db_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "holding"
        effects: list[str] = []
        with SQLiteEventStore(db_path, unit_wait=0.3) as store:
            ledger = PinLedger(store, types, unit_id="shared")
            with pytest.raises(UnitBusy):
                ledger.resolve(K1, kind="model_call", effect=lambda: effects.append("ran"), interpret=identity)
            assert effects == []
            child.send_signal(signal.SIGKILL)
            child.wait()
            # The holder died: its lease is stale, and the unit resumes here with what it drew.
            assert (
                ledger.resolve("p1:model_call:k0", kind="model_call", effect=lambda: "redrawn", interpret=str) == "held"
            )
            ledger.commit()
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
