"""A wait for the store's connection that outlives `busy_timeout` is `StoreUnavailable`: the caller may try again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError, StoreUnavailable
from anagrapheus.testing.conformance import pending
from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.stores.ownership import Ownership


@contextmanager
def held_by_another_thread(hold: Callable[[], AbstractContextManager[object]]) -> Iterator[None]:
    """Run the block while another thread is inside `hold()`; it lets go when the block ends."""
    inside, leave = threading.Event(), threading.Event()

    def holding() -> None:
        with hold():
            inside.set()
            leave.wait(10)

    holder = threading.Thread(target=holding)
    holder.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        leave.set()
        holder.join()


def test_a_stranger_that_waits_past_the_timeout_may_try_again() -> None:
    owner = Ownership(where="log.db", timeout=0)
    with held_by_another_thread(owner.held), pytest.raises(StoreUnavailable) as caught, owner.held():
        pass
    assert str(caught.value).startswith("log.db: waited 0 s for another task or thread")
    with owner.held() as took:
        assert took  # once the holder let go, the same call gets in: the wait was transient


def test_a_store_waiting_past_its_busy_timeout_for_another_thread_raises_store_unavailable(db_path: Path) -> None:
    with SQLiteEventStore(db_path, busy_timeout=0) as store:
        with held_by_another_thread(store.transaction), pytest.raises(StoreUnavailable) as caught:
            store.append([pending(1)])
        store.append([pending(1)])
        assert store.last_seq() == 1
    assert isinstance(caught.value, StoreError)  # callers catching the parent still catch it
