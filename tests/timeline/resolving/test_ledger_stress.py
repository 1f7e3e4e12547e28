"""Concurrency stress: threads and asyncio tasks drawing, committing and abandoning, with injected failures.

After every round the invariant holds: every value a resolve returned is in the log under a committed
unit (or listed by its abandoned unit's summary), and no closed unit keeps scratch. The normal suite runs a
few bounded rounds; set ANAGRAPHEUS_STRESS_SECONDS (e.g. 300) for a long run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import defaultdict
from typing import Any

from anagrapheus.errors import UsageError
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_key

SECONDS = float(os.environ.get("ANAGRAPHEUS_STRESS_SECONDS", "0"))
ROUNDS = 3
JOIN_SECONDS = 60.0


class Flaky(Exception):
    """An injected failure inside an effect."""


class Round:
    """One round: a few units, each shared by threads and tasks that draw while someone closes it."""

    def __init__(self, store: SQLiteEventStore, types: EventTypeRegistry, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.ledgers = [PinLedger(store, types) for _ in range(3)]
        # A second ledger on one unit id: the case where an effect may run before the unit closes under it.
        self.ledgers.append(PinLedger(store, types, unit_id=self.ledgers[0].unit_id))
        self.returned: dict[str, set[str]] = defaultdict(set)
        self.guard = threading.Lock()
        self.counter = 0
        self.errors: list[BaseException] = []

    def value(self) -> str:
        with self.guard:
            self.counter += 1
            return f"v{self.counter}"

    def note(self, ledger: PinLedger, value: Any) -> None:
        with self.guard:
            self.returned[ledger.unit_id].add(value)

    def effect(self) -> str:
        if self.rng.random() < 0.1:
            raise Flaky
        return self.value()

    def thread_drawer(self, ledger: PinLedger, stop: threading.Event) -> None:
        while not stop.is_set():
            key = pin_key("model_call", {"k": self.rng.randrange(12)})
            try:
                self.note(ledger, ledger.resolve(key, kind="model_call", effect=self.effect, interpret=str))
            except Flaky:
                continue
            except UsageError:
                return
            except BaseException as e:
                self.errors.append(e)
                return

    async def task_drawer(self, ledger: PinLedger, stop: threading.Event) -> None:
        async def effect() -> str:
            await asyncio.sleep(0)
            return self.effect()

        while not stop.is_set():
            key = pin_key("tool_call", {"k": self.rng.randrange(12)})
            try:
                self.note(ledger, await ledger.aresolve(key, kind="tool_call", effect=effect, interpret=str))
            except Flaky:
                continue
            except UsageError:
                return
            except Exception as e:
                self.errors.append(e)
                return

    def closer(self, ledger: PinLedger) -> None:
        # Retried while the ledger's own draws are in flight; an injected failure abandons instead.
        while True:
            try:
                if self.rng.random() < 0.3:
                    ledger.abandon(reason="injected")
                else:
                    ledger.commit()
                return
            except UsageError as e:
                if "in flight" not in str(e):
                    return  # another ledger on the same unit closed it first
                time.sleep(0.001)

    def run(self) -> None:
        stop = threading.Event()
        threads = [
            threading.Thread(target=self.thread_drawer, args=(ledger, stop), daemon=True) for ledger in self.ledgers
        ]
        loop_thread = threading.Thread(target=lambda: asyncio.run(self._tasks(stop)), name="event loop", daemon=True)
        for thread in [*threads, loop_thread]:
            thread.start()
        time.sleep(0.15)
        closers = [threading.Thread(target=self.closer, args=(ledger,), daemon=True) for ledger in self.ledgers]
        for thread in closers:
            thread.start()
        for thread in closers:
            thread.join(JOIN_SECONDS)
        stop.set()
        for thread in [*threads, loop_thread]:
            thread.join(JOIN_SECONDS)
        # A hang is a defect (a draw left in flight keeps a close waiting for ever): fail, naming it.
        stuck = [t.name for t in [*closers, *threads, loop_thread] if t.is_alive()]
        assert not stuck, f"still running after {JOIN_SECONDS} s: {stuck}; in flight: {self.in_flight()}"
        assert not self.errors, f"a drawer died of an error outside the expected ones: {self.errors!r}"

    def in_flight(self) -> dict[str, int]:
        return {ledger.unit_id: len(ledger._gate.inflight) for ledger in self.ledgers}  # pyright: ignore[reportPrivateUsage]

    async def _tasks(self, stop: threading.Event) -> None:
        await asyncio.gather(*(self.task_drawer(ledger, stop) for ledger in self.ledgers for _ in range(2)))

    def check(self) -> None:
        promoted: dict[str, set[str]] = defaultdict(set)
        abandoned: dict[str, int] = {}
        for event in self.store.read():
            payload = json.loads(event.payload)
            if event.type == "pin_promoted":
                promoted[payload["unit_id"]].add(payload["raw"])
            elif event.type == "pins_abandoned":
                abandoned[payload["unit_id"]] = len(payload["pins"])
        for unit_id, values in self.returned.items():
            if unit_id in abandoned:
                assert abandoned[unit_id] >= len(values), f"unit {unit_id}: a returned draw is missing from its audit"
            else:
                assert values <= promoted[unit_id], f"unit {unit_id}: returned {values - promoted[unit_id]} unpinned"
            assert self.store.scratch_list(unit_id) == [], f"closed unit {unit_id} kept scratch"
            assert self.store.unit_outcome(unit_id) is not None


def test_threads_and_tasks_racing_closes_lose_no_returned_draw(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    deadline = time.monotonic() + SECONDS
    seed = 0
    while seed < ROUNDS or time.monotonic() < deadline:
        round_ = Round(store, types, seed)
        round_.run()
        round_.check()
        seed += 1
