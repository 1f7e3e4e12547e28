"""The single-flight gate of a unit of work: one draw of a key in flight at a time, shared by the unit's ledgers.

A ledger asks its unit's gate for a key's turn: it gets the pin already there (asked through the ledger's
`look`), waits for the draw in flight and looks again, or owns the draw until it releases it. The gate also
refuses work on a closed or closing unit, and keeps the unit's in-process state its ledgers share: the order
keys were first asked in, and the drawn results the store has not confirmed yet.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial

from anagrapheus.errors import UnitClosed, UsageError
from anagrapheus.timeline.scoped import scoped
from anagrapheus.timeline.stores.ports import ScratchPin, TimelineStore, UnitOutcome

__all__ = ["Draw", "Held", "Look", "UnitGate", "gate_for", "noting_keys"]

Look = Callable[[str], ScratchPin | None]
"""How a ledger finds a key's pin without drawing it (its attempt counted), or None when the key must be drawn."""


class Draw:
    """A draw in flight: later requests for its key wait on it, from threads or from event loops."""

    def __init__(self) -> None:
        self._done = False
        # Released once, when the draw finishes: a lock's release is one step no Ctrl-C can cut in half,
        # where an Event's set runs Python code that one can.
        self._open = threading.Lock()
        self._open.acquire()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._guard = threading.Lock()

    def finish(self) -> None:
        """Wake every waiter; safe to call again after an interrupt cut a first call short."""
        with self._guard:
            self._done = True
            waiters, self._waiters = self._waiters, []
            if self._open.locked():
                self._open.release()
        for loop, future in waiters:
            # A waiter's loop may have closed since it queued (it timed out, its `asyncio.run` ended): nobody
            # waits there any more, and the waiters behind it must still wake.
            try:
                loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:
                continue

    def wait(self) -> None:
        """Block until the draw finishes."""
        with self._open:
            pass

    async def wait_async(self) -> None:
        """Wait until the draw finishes, without blocking the event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._guard:
            if self._done:
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._guard:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))


def _nothing_there(key: str) -> None:
    """The look of a key scratch cannot hold: no pin."""
    del key


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(slots=True)
class Held:
    """A drawn result the store has not confirmed yet, kept in memory until it is written."""

    kind: str
    """The scratch kind (a failed draw's ends in `!failed`)."""
    raw_text: str
    """The result as canonical JSON text."""
    fingerprint: str | None
    """The fingerprint as canonical JSON text, if any."""
    attempts: int = 1
    """How many times the unit asked for the key, counting the asks answered from memory."""
    writing: bool = False
    """Set while one caller writes it, so that two never write it at once."""
    tried: bool = False
    """Whether a write of it was tried: one cut short may have landed, so scratch is looked at before the next."""


# The (gate, key) pairs whose effect the running context is inside: asking for one of them again would
# wait for itself. Tasks and worker threads started by the effect inherit it, and would wait just the same.
_DRAWING: ContextVar[frozenset[tuple[int, str]]] = ContextVar("anagrapheus_drawing", default=frozenset())


# The keys asked of any ledger while a `noting_keys()` block is open in this context (and the tasks it starts).
_NOTED: ContextVar[list[str] | None] = ContextVar("anagrapheus_noted_keys", default=None)


@contextmanager
def noting_keys() -> Generator[list[str]]:
    """Collect, in order, every key a ledger is asked for inside the block, by this context and the tasks it starts.

    What a draw itself asked for (an agent it ran, say) can then be pinned with it, so that a replay that
    answers the draw from its pin can count those keys as used.
    """
    noted: list[str] = []
    with scoped(_NOTED, noted):
        yield noted


def _note(key: str) -> None:
    noted = _NOTED.get()
    if noted is not None and key not in noted:
        noted.append(key)


class UnitGate:
    """The in-process state of one unit of work, shared by every ledger this process opens on it through one store.

    Two ledgers on one unit id (in two threads, say) then see each other's draws in flight: a second draw of a
    key waits for the first, a close waits for every draw, and a draw after a close is refused before its
    effect runs. Ledgers in other processes, or through another store object, are kept apart by the store.
    """

    def __init__(self, store: TimelineStore, unit_id: str) -> None:
        self.unit_id = unit_id
        self._store = store
        self.lock = threading.Lock()
        self.inflight: dict[str, Draw] = {}
        self.releases = 0
        # Drawn results whose write the store has not confirmed (it failed, or an interrupt cut it short), in
        # draw order: the key is answered from here, and they are written on the next chance (see the ledger).
        self.held: dict[str, Held] = {}
        # A unit is closed once, for good; `closing` is set while a commit or abandon is at the store.
        self.closing: str | None = None
        self.closed: UnitOutcome | None = None
        # Each key's place in the order it was first asked for: the order a commit promotes the pins in. Draws
        # that run at once (tool calls gathered in one task group) land in scratch as they finish, in an order
        # the scheduler picks; the order they were asked in is the program's own, the same on every run.
        self.asked: dict[str, int] = {}
        # Whether the unit had no pin in scratch when a run-level pin was first asked for here (None: not read yet).
        # A key first asked for since then, and never drawn by this gate, cannot be there: another store drawing in
        # the unit would hold its lease, and this gate's first write is refused before any effect runs.
        self.began_empty: bool | None = None

    def refuse_unless_open(self) -> None:
        """Refuse work on a unit closed or closing; the caller holds `lock`."""
        if self.closing is not None:
            raise UnitClosed(self.unit_id, state=self.closing)
        if self.closed is not None:
            # The store is the truth: the commit may have been undone by an outer transaction's rollback.
            self.closed = self._store.unit_outcome(self.unit_id)
            if self.closed is not None:
                raise UnitClosed(self.unit_id, state=self.closed)

    def note_asked(self, key: str) -> bool:
        """Give `key` its place in the unit's asking order, if this is the first time it is asked for; say if it is."""
        with self.lock:
            first = key not in self.asked
            if first:
                self.asked[key] = len(self.asked)
            return first

    def claim(self, key: str, look: Look, mine: list[Draw] | None = None) -> ScratchPin | Draw | None:
        """Return the pin `look` finds, the draw in flight to wait for, or None once this caller owns the draw.

        The draw taken is put in `mine` first, so a caller interrupted right after can still release it.
        """
        while True:
            with self.lock:
                self.refuse_unless_open()
                draw = self.inflight.get(key)
                if draw is not None:
                    if (id(self), key) in _DRAWING.get():
                        raise UsageError(
                            f"{key} was asked for inside its own effect; it would wait for itself forever."
                            " An effect must not resolve its own key"
                        )
                    return draw
                releases = self.releases
            # The store is not touched under `lock`, so a ledger waiting on a busy store blocks no one else.
            pin = look(key)
            if pin is not None:
                return pin
            with self.lock:
                self.refuse_unless_open()
                if key in self.inflight or self.releases != releases:
                    continue  # a draw started or landed meanwhile: look again
                draw = Draw()
                if mine is not None:
                    mine.append(draw)
                self.inflight[key] = draw
                return None

    def claim_here(self, key: str) -> Draw | None:
        """`claim` of a key no pin of which can be in scratch, its unit fenced already: no look, so no hop needed.

        None once this caller owns the draw; else the draw in flight (another thread asked at the same moment),
        after which the caller looks in scratch as `aturn` does.
        """
        _note(key)
        claimed = self.claim(key, _nothing_there)
        return claimed if isinstance(claimed, Draw) else None

    def draw_at_once(self, key: str, *, asked_before: bool) -> Draw | None:
        """Take the draw of a key nobody asked for, draws or holds, without looking at the store; else None."""
        _note(key)
        with self.lock:
            self.refuse_unless_open()
            if asked_before or key in self.inflight or key in self.held:
                return None
            draw = self.inflight[key] = Draw()
            return draw

    def turn(self, key: str, look: Look, mine: list[Draw] | None = None) -> ScratchPin | None:
        """Wait out a draw in flight for `key`; return its pin, or None once this caller owns the draw."""
        _note(key)
        while isinstance(claimed := self.claim(key, look, mine), Draw):
            claimed.wait()
        return claimed

    async def aturn(self, key: str, look: Look) -> ScratchPin | None:
        """Like `turn`, waiting without blocking the event loop."""
        _note(key)
        while True:
            claim = asyncio.ensure_future(asyncio.to_thread(self.claim, key, look))
            try:
                claimed = await asyncio.shield(claim)
            except asyncio.CancelledError:
                # The claim goes on in its worker thread. If it took the draw, nobody would ever release it,
                # and every later draw of the key, and the unit's close, would wait for it for ever.
                claim.add_done_callback(partial(self._drop_claim, key))
                raise
            if not isinstance(claimed, Draw):
                return claimed
            await claimed.wait_async()

    def _drop_claim(self, key: str, claim: asyncio.Future[ScratchPin | Draw | None]) -> None:
        """Release a draw that a cancelled caller's claim took after the caller had gone."""
        if not claim.cancelled() and claim.exception() is None and claim.result() is None:
            self.release(key)

    def release(self, key: str, mine: list[Draw] | None = None) -> None:
        """Let the draw of `key` go (only `mine`, if given: an interrupted claim may not have registered it)."""
        with self.lock:
            draw = self.inflight.get(key)
            if draw is None or (mine is not None and draw not in mine):
                draw = mine[0] if mine else None
            else:
                del self.inflight[key]
                self.releases += 1
        if draw is not None:
            draw.finish()

    @contextmanager
    def drawing(self, key: str) -> Generator[None]:
        """Mark the running context as inside `key`'s effect, so that asking for `key` again fails at once."""
        drawing = (id(self), key)
        token = _DRAWING.set(_DRAWING.get() | {drawing})
        try:
            yield
        finally:
            try:
                _DRAWING.reset(token)
            except ValueError:
                # A stream's context manager may be closed from another context than it was opened in.
                _DRAWING.set(_DRAWING.get() - {drawing})


# Process-wide because a unit is: two ledgers over one unit through one store (a retried run, a resumed workflow,
# a resolver per agent) must share one gate, or both would draw one key and each write it. Nothing to tear down:
# held weakly, a gate goes with the last ledger holding it.
_GATES: weakref.WeakValueDictionary[tuple[int, str], UnitGate] = weakref.WeakValueDictionary()
_GATES_LOCK = threading.Lock()


def gate_for(store: TimelineStore, unit_id: str) -> UnitGate:
    """The gate of `unit_id` through `store`, made on first use; it lives while a ledger holds it."""
    # The store's id is safe as a key: every ledger holding the gate holds the store, and so does the gate.
    with _GATES_LOCK:
        gate = _GATES.get((id(store), unit_id))
        if gate is None:
            gate = _GATES[(id(store), unit_id)] = UnitGate(store, unit_id)
        return gate
