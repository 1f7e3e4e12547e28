"""Ctrl-C during a SQLite resolve or commit: the store stays usable, the file unlocked, and no paid draw lost.

The interrupts are real: `_thread.interrupt_main()` from a timer thread raises KeyboardInterrupt in
the main thread wherever it happens to be, as a user's Ctrl-C does. The random run is bounded in
the normal suite (ANAGRAPHEUS_INTERRUPT_TRIALS sets any number; `pytest --soak` runs it long).
"""

from __future__ import annotations

import _thread
import itertools
import json
import random
import sqlite3
import sys
import threading
import time
from collections import Counter
from contextlib import suppress
from functools import partial
from pathlib import Path

import pytest

from anagrapheus.errors import UnitClosed
from anagrapheus.timeline import EventTypeRegistry, PendingEvent, PinLedger, SQLiteEventStore
from tests.bounds import bound

TRIALS = bound("ANAGRAPHEUS_INTERRUPT_TRIALS", normal=60, soak=1500)
KEYS = [f"p1:model_call:k{i}" for i in range(4)]


# Python's own SIGINT handler for each test (see `ctrl_c_raises` in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("ctrl_c_raises")


def unlocked(path: Path) -> bool:
    """Whether another process could write to the file right now, without waiting."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


def marker() -> PendingEvent:
    return PendingEvent(namespace="test", type="marker", schema_version=1, payload="{}")


def test_ctrl_c_while_a_commit_waits_for_the_lock_leaves_the_store_usable(
    db_path: Path, types: EventTypeRegistry
) -> None:
    with SQLiteEventStore(db_path) as store:
        ledger = PinLedger(store, types)
        ledger.resolve(KEYS[0], kind="model_call", effect=lambda: "drawn", interpret=str)
        other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        # Ctrl-C lands while the commit waits for the lock; the lock is then let go, so the commit's
        # BEGIN IMMEDIATE succeeds just before the interrupt is raised.
        threading.Timer(0.05, _thread.interrupt_main).start()
        threading.Timer(0.2, lambda: other.execute("ROLLBACK")).start()
        with pytest.raises(KeyboardInterrupt):
            ledger.commit()
            time.sleep(5)  # the commit won the race with the interrupt: it lands here instead
        other.close()
        assert unlocked(db_path), "another process must be able to write after the interrupt"
        store.append([marker()])
        if ledger.state == "open":
            ledger.commit()
        assert sorted(e.type for e in store.read()) == ["marker", "pin_promoted"]


def test_ctrl_c_at_random_moments_loses_no_paid_draw_and_wedges_nothing(
    db_path: Path, types: EventTypeRegistry
) -> None:
    rng = random.Random(20261202)
    tokens = itertools.count()
    # The effect's own record of what it was paid for, outside the store. It is written as the effect's
    # last step, by a plain store into a dict, so an interrupt cannot fall between the payment and the return.
    paid: dict[int, tuple[str, str]] = {}
    interrupts = locked_after = 0
    store = SQLiteEventStore(db_path)
    units: list[str] = []

    for trial in range(TRIALS):
        ledger = PinLedger(store, types)
        units.append(ledger.unit_id)
        pause = rng.uniform(0, 0.0015)

        def effect(unit: str, key: str, pause: float) -> str:
            time.sleep(pause)
            value = f"{unit} {key}"
            token = next(tokens)
            paid[token] = (unit, key)
            return value

        timer = threading.Timer(rng.uniform(0, 0.02), _thread.interrupt_main)
        started = done = False
        while True:
            try:
                if not started:
                    started = True
                    timer.start()  # it may fire before start() returns
                if not done:
                    try:
                        for key in KEYS:
                            draw = partial(effect, ledger.unit_id, key, pause)
                            ledger.resolve(key, kind="model_call", effect=draw, interpret=str)
                        ledger.commit()
                    except UnitClosed:
                        pass  # the interrupt fell after the commit's own COMMIT: it is committed
                    done = True
                timer.join()
                for _ in range(100):
                    pass  # a pending interrupt is raised here at the latest
                break
            except KeyboardInterrupt:
                interrupts += 1
                locked_after += not unlocked(db_path)
        assert ledger.state == "committed", f"trial {trial}"

    # The store is still whole: it writes, it closes.
    store.append([marker()])
    store.close()
    with SQLiteEventStore(db_path) as reopened:
        events = [e for e in reopened.read() if e.type == "pin_promoted"]
        assert PinLedger.open_units(reopened) == []
    logged = Counter((str(e.correlation_id), str(json.loads(e.payload)["key"])) for e in events)
    paid_keys = Counter(paid.values())
    dropped = [draw for draw in paid_keys if draw not in logged]
    twice = [draw for draw, n in paid_keys.items() if n > 1]
    assert interrupts >= TRIALS // 2
    assert (dropped, twice, locked_after) == ([], [], 0)
    assert set(logged.values()) == {1} and len(logged) == len(units) * len(KEYS)


# Every how many function calls of a unit's resolves and commit an interrupt is placed; --soak places one at each.
EVERY_NTH_CALL = bound("ANAGRAPHEUS_INTERRUPT_STRIDE", normal=6, soak=1)


class InterruptAt:
    """A profile hook that raises KeyboardInterrupt as the `at`-th Python function call begins, as Ctrl-C can."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def __call__(self, frame: object, event: str, arg: object) -> None:
        if event == "call":
            self.calls += 1
            if self.calls == self.at:
                sys.setprofile(None)
                raise KeyboardInterrupt


def test_ctrl_c_at_every_call_of_a_unit_loses_no_paid_draw_and_wedges_nothing(
    db_path: Path, types: EventTypeRegistry
) -> None:
    paid: dict[int, tuple[str, str]] = {}
    tokens = itertools.count()

    def effect(unit: str, key: str) -> str:
        token = next(tokens)
        paid[token] = (unit, key)
        return f"{unit} {key}"

    def run(ledger: PinLedger) -> None:
        try:
            for key in KEYS[:2]:
                ledger.resolve(key, kind="model_call", effect=partial(effect, ledger.unit_id, key), interpret=str)
            ledger.commit()
        except UnitClosed:
            pass  # interrupted after the commit's own COMMIT: it is committed

    with SQLiteEventStore(db_path, busy_timeout=2) as store:
        count = InterruptAt(0)
        sys.setprofile(count)
        try:
            run(PinLedger(store, types))
        finally:
            sys.setprofile(None)
        assert count.calls > 100
        for at in range(1, count.calls + 1, EVERY_NTH_CALL):
            ledger = PinLedger(store, types)
            with suppress(KeyboardInterrupt):
                interrupt = InterruptAt(at)
                sys.setprofile(interrupt)
                try:
                    run(ledger)
                finally:
                    # Disarmed first: removing the hook calls any audit hook installed earlier in this process (the
                    # entropy guard's), a Python call the hook would count, and could not interrupt from inside it.
                    interrupt.at = 0
                    sys.setprofile(None)
            assert unlocked(db_path), f"interrupted at call {at}"
            # The same unit goes on where it stopped, and ends committed.
            run(ledger)
            assert ledger.state == "committed"
        logged = Counter((str(e.correlation_id), str(json.loads(e.payload)["key"])) for e in store.read())
    paid_keys = Counter(paid.values())
    assert [draw for draw in paid_keys if draw not in logged] == []
    assert [draw for draw, n in paid_keys.items() if n > 1] == []
