"""Who may use a store's one connection: the task or thread that holds it, never merely the thread it runs on."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar

from anagrapheus.errors import StoreUnavailable, UsageError

__all__ = ["Ownership"]


class _Hold:
    """One claim on a connection, made by one context; the contexts that inherit it share it."""

    __slots__ = ("thread",)

    def __init__(self) -> None:
        self.thread = threading.get_ident()


# The holds of the running context. asyncio gives every task its own copy, and `asyncio.to_thread` /
# anyio worker threads inherit their caller's, so work a holder hands to a thread joins the hold,
# while a sibling task on the same thread does not.
_HOLDS: ContextVar[frozenset[_Hold]] = ContextVar("anagrapheus_holds", default=frozenset())


class Ownership:
    """Grants a store's connection to one context (a thread, or an asyncio task) at a time.

    `held()` blocks a stranger until the holder lets go, and re-enters for the holder and the
    threads it hands work to. `exclusive` use is additionally one thread at a time, so two
    threads of one holder never interleave statements or savepoints.
    """

    def __init__(self, *, where: str, timeout: float) -> None:
        self._where = where
        self._timeout = timeout
        # Entered as the lock itself, not the condition: a lock's own enter and exit run no Python code in
        # which a KeyboardInterrupt could fall with the lock taken and no exit to come.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._hold: _Hold | None = None
        self._busy_thread: int | None = None
        self._busy = 0
        # Strangers take the hold in arrival order, so a busy holder that lets go and asks again at once
        # cannot starve a commit waiting in another thread.
        self._queue: deque[object] = deque()

    def _may_enter(self, mine: bool, exclusive: bool, me: int, ticket: object) -> bool:
        if self._hold is not None and not mine:
            return False
        if self._hold is None and self._queue and self._queue[0] is not ticket:
            return False
        return not exclusive or self._busy_thread in (None, me)

    def _wait_turn(self, me: int, ticket: object, exclusive: bool, deadline: float) -> None:
        while True:
            hold = self._hold
            mine = hold is not None and hold in _HOLDS.get()
            if self._may_enter(mine, exclusive, me, ticket):
                return
            if hold is not None and not mine and hold.thread == me:
                # The holder is another task on this very thread, suspended in an await: it can only
                # move on when this thread does, so waiting would never end.
                raise UsageError(
                    f"{self._where}: the store is held by another task on this thread (a transaction left open"
                    " across an await); waiting for it here would block forever. Call the async methods"
                    " (aresolve, acommit, aabandon), which wait off the event loop, or end the transaction"
                    " before awaiting"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                # Nothing was decided, and the holder will let go: the caller may try again, as after SQLite's own lock.
                raise StoreUnavailable(
                    f"{self._where}: waited {self._timeout:g} s for another task or thread of this process to"
                    " finish its transaction (database is locked)"
                )
            if not mine and ticket not in self._queue:
                self._queue.append(ticket)
            self._changed.wait(left)

    @contextmanager
    def held(self, *, exclusive: bool = True) -> Generator[bool]:
        """Hold the connection for the running context; yield True when this call took the hold (it is outermost)."""
        me = threading.get_ident()
        taken = counted = False
        token = None
        # One try from before the hold is taken: an interrupt (Ctrl-C) that falls between taking it and
        # yielding would otherwise leave it taken for ever, and every later call would be told the store is
        # "held by another task". (A generator, not a class: one interrupted before its exit ran is closed when
        # collected, and its `finally` lets go.)
        try:
            with self._lock:
                hold = self._hold
                # Re-entry by the holder (its statements, its worker threads'), about 60 a recorded run, skips the
                # queue and the deadline, which only a stranger waits on.
                if hold is None or hold not in _HOLDS.get() or (exclusive and self._busy_thread not in (None, me)):
                    ticket = object()
                    try:
                        self._wait_turn(me, ticket, exclusive, time.monotonic() + self._timeout)
                    finally:
                        if ticket in self._queue:
                            self._queue.remove(ticket)
                            self._changed.notify_all()
                if self._hold is None:
                    taken = True
                    self._hold = _Hold()
                    token = _HOLDS.set(_HOLDS.get() | {self._hold})
                if exclusive:
                    counted = True
                    self._busy += 1
                    self._busy_thread = me
            yield taken
        finally:
            # Inline, with no call before the hold is let go: an interrupt there would leave it taken. A re-entry
            # that counted nothing changed nothing a waiter waits on.
            if taken or counted:
                with self._lock:
                    if counted:
                        self._busy -= 1
                        if self._busy == 0:
                            self._busy_thread = None
                    if taken:
                        released = self._hold
                        self._hold = None
                        try:
                            _HOLDS.reset(token)  # pyright: ignore[reportArgumentType]
                        except (ValueError, TypeError):
                            # Left in another context than it was entered in (a generator closed elsewhere), or
                            # interrupted before the hold joined this context.
                            _HOLDS.set(_HOLDS.get() - {released} if released is not None else _HOLDS.get())
                    self._changed.notify_all()
