"""Who holds a store's connection, rule by rule: re-entry, one thread at a time, arrival order, refusals in full."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError, UsageError
from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.stores.ownership import Ownership

from ...store_conformance import pending


def _in_thread_of_this_context(work: Callable[[], None]) -> threading.Thread:
    """Start `work` in a thread that inherits the running context, as `asyncio.to_thread` hands work to one."""
    thread = threading.Thread(target=contextvars.copy_context().run, args=(work,))
    thread.start()
    return thread


def _until(condition: Callable[[], bool]) -> None:
    # Polled, not slept: on a loaded machine a thread may take long to reach its wait.
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.005)


def _waiting(owner: Ownership) -> int:
    """How many strangers wait in line for the hold."""
    return len(owner._queue)  # pyright: ignore[reportPrivateUsage]


def test_the_holder_re_enters_on_its_own_thread_at_once() -> None:
    # Were it made to wait for its own busy thread, it would give up after the timeout with a StoreError.
    owner = Ownership(where="log.db", timeout=1.0)
    with owner.held() as outer, owner.held() as inner, owner.held(exclusive=False) as shared:
        pass
    assert (outer, inner, shared) == (True, False, False)


def test_two_threads_of_one_holder_take_exclusive_use_in_turn() -> None:
    owner = Ownership(where="log.db", timeout=5.0)
    order: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with owner.held() as took:
            order.append(f"first in, took the hold: {took}")
            first_in.set()
            time.sleep(0.5)
            order.append("first out")

    def second() -> None:
        first_in.wait(5)
        with owner.held():
            order.append("second in")

    with owner.held(exclusive=False):
        threads = [_in_thread_of_this_context(first), _in_thread_of_this_context(second)]
        for thread in threads:
            thread.join()
    assert order == ["first in, took the hold: False", "first out", "second in"]


def test_shared_use_by_the_holder_does_not_wait_for_its_busy_thread() -> None:
    owner = Ownership(where="log.db", timeout=5.0)
    order: list[str] = []
    first_in = threading.Event()
    second_in = threading.Event()

    def first() -> None:
        with owner.held():
            first_in.set()
            # Held until the shared user is in: were it made to wait, it would get in only 5 s later, after this.
            second_in.wait(5)
            order.append("exclusive out")

    def second() -> None:
        first_in.wait(5)
        with owner.held(exclusive=False):
            order.append("shared in")
            second_in.set()

    with owner.held(exclusive=False):
        threads = [_in_thread_of_this_context(first), _in_thread_of_this_context(second)]
        for thread in threads:
            thread.join()
    assert order == ["shared in", "exclusive out"]


def test_a_stranger_waiting_in_line_goes_before_a_holder_that_lets_go_and_asks_again() -> None:
    owner = Ownership(where="log.db", timeout=10.0)
    order: list[str] = []

    def stranger() -> None:
        with owner.held():
            order.append("stranger")

    with owner.held():
        thread = threading.Thread(target=stranger)
        thread.start()
        _until(lambda: _waiting(owner) == 1)
    # Asked again at once, before the stranger's thread has woken: it is first in line, so it goes first.
    with owner.held():
        order.append("holder again")
    thread.join()
    assert order == ["stranger", "holder again"]
    assert _waiting(owner) == 0


def test_a_stranger_woken_many_times_leaves_the_line_clear_behind_it(tmp_path: Path) -> None:
    store = SQLiteEventStore(tmp_path / "log.db", busy_timeout=2.0)
    waiting = threading.Event()
    done = threading.Event()

    def stranger() -> None:
        waiting.set()
        store.append([pending(9)])
        done.set()

    thread = threading.Thread(target=stranger)
    with store.transaction():
        store.append([pending(1)])
        thread.start()
        assert waiting.wait(10)
        # Each statement of the holder wakes the stranger, who finds the store still held and waits again.
        for n in range(2, 5):
            time.sleep(0.1)
            store.append([pending(n)])
        time.sleep(0.1)
    thread.join()
    assert done.is_set()
    # A line left holding the stranger's place would keep everyone after it waiting until the timeout.
    started = time.monotonic()
    store.append([pending(10)])
    assert time.monotonic() - started < 1.0
    assert [e.payload for e in store.read()] == [f'{{"n":{n}}}' for n in (1, 2, 3, 4, 9, 10)]
    store.close()


def test_a_stranger_gives_up_after_the_timeout_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = SQLiteEventStore(path, busy_timeout=0.4)
    inside = threading.Event()
    gave_up = threading.Event()

    def holder() -> None:
        with store.transaction():
            store.append([pending(1)])
            inside.set()
            # Holds on without a statement (nothing wakes the stranger) until the stranger gives up.
            gave_up.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()
    try:
        with pytest.raises(StoreError) as caught:
            store.append([pending(2)])
        waited = time.monotonic() - started
    finally:
        gave_up.set()
        thread.join()
    assert str(caught.value) == (
        f"{path}: waited 0.4 s for another task or thread of this process to finish its transaction"
        " (database is locked)"
    )
    assert 0.4 <= waited < 4
    assert [e.payload for e in store.read()] == ['{"n":1}']
    store.close()


def test_a_stranger_that_waits_less_than_the_timeout_gets_in(tmp_path: Path) -> None:
    # Under a second: a wait measured against a whole second instead of none would give up at once.
    store = SQLiteEventStore(tmp_path / "log.db", busy_timeout=0.9)
    inside = threading.Event()

    def holder() -> None:
        with store.transaction():
            store.append([pending(1)])
            inside.set()
            # Lets go as soon as the stranger waits in line, not after a guessed sleep.
            _until(lambda: _waiting(store._owner) == 1)  # pyright: ignore[reportPrivateUsage]

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(10)
    store.append([pending(2)])
    thread.join()
    assert [e.payload for e in store.read()] == ['{"n":1}', '{"n":2}']
    store.close()


@pytest.mark.anyio
async def test_a_task_on_the_holders_thread_is_refused_in_full(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = SQLiteEventStore(path, busy_timeout=5.0)
    inside = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        with store.transaction():
            store.append([pending(1)])
            inside.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await inside.wait()
    try:
        with pytest.raises(UsageError) as caught:
            store.append([pending(2)])
    finally:
        release.set()
        await task
    assert str(caught.value) == (
        f"{path}: the store is held by another task on this thread (a transaction left open across an await);"
        " waiting for it here would block forever. Call the async methods (aresolve, acommit, aabandon), which"
        " wait off the event loop, or end the transaction before awaiting"
    )
    store.close()
