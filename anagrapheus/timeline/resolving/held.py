"""Held draws: results a unit of work drew that its store has not taken yet, kept in memory until they are written.

A draw is held from the moment its effect returns, so that no failed write or interrupt loses what was paid
for: a later ask for its key is answered from memory, and the unit's next store step writes it (several at once
in one transaction, when the store can). A run-level pin (`resolve_held`) is held on purpose, drawn with no store
write on the calling thread. The held results live in the unit's gate, shared by every ledger open on the unit.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import TypeVar

from anagrapheus.errors import CanonicalError, PinResultError, StoreError, UnitBusy, UnitClosed
from anagrapheus.timeline.canonical import stored_json
from anagrapheus.timeline.resolving.failures import scratch_kind
from anagrapheus.timeline.resolving.gate import Held, UnitGate
from anagrapheus.timeline.stores.ports import ScratchPin, TimelineStore
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore

__all__ = ["HeldDraws", "raw_text_of"]

T = TypeVar("T")


def raw_text_of(result: object, *, key: str, kind: str) -> str:
    """Return an effect's result as the log stores it, or raise `PinResultError` saying why it cannot be pinned."""
    try:
        return stored_json(result)
    except CanonicalError as e:
        raise PinResultError(
            f"the {kind} effect for {key} returned a result that is not JSON-shaped ({e});"
            " return JSON types, or convert the value deliberately before pinning"
        ) from e


class HeldDraws:
    """One ledger's hand on its unit's held draws: holding a drawn result, answering from it, writing it."""

    def __init__(self, store: TimelineStore, gate: UnitGate) -> None:
        self._store = store
        self._gate = gate
        self._lock = gate.lock
        self._unit_id = gate.unit_id

    def __bool__(self) -> bool:
        """Whether any drawn result is held that the store has not taken yet."""
        return bool(self._gate.held)

    def __contains__(self, key: str) -> bool:
        """Whether `key`'s drawn result is held."""
        return key in self._gate.held

    def keys(self) -> list[str]:
        """The keys held, in draw order."""
        with self._lock:
            return list(self._gate.held)

    def keep(self, key: str, kind: str, result: object, digests: str | None, *, failed: bool = False) -> Held:
        """Hold a drawn result in memory, before it is written: from here on, no failure or interrupt loses it."""
        held = Held(scratch_kind(kind, failed=failed), raw_text_of(result, key=key, kind=kind), digests)
        with self._lock:
            self._gate.held[key] = held
        return held

    def put(self, key: str, kind: str, result: object, digests: str | None, *, failed: bool = False) -> ScratchPin:
        """Pin a draw; the pin returned is the key's pin in the unit, which another store may have written first."""
        return self.write(key, self.keep(key, kind, result, digests, failed=failed))

    def draw_at_once(self, key: str, kind: str, effect: Callable[[], object], *, asked_before: bool) -> Held | None:
        """Draw and hold a key nobody asked for, draws or holds, and no earlier run drew; else None, drawing nothing.

        No store write: the unit's next store step writes it. Whether scratch may hold the key is read on the
        calling thread (the first time per unit, whether scratch began empty; after that, per key).
        """
        draw = self._gate.draw_at_once(key, asked_before=asked_before)
        if draw is None:
            return None
        try:
            # Drawn by an earlier run of this unit? A read on the calling thread says (it writes nothing).
            if self._may_be_in_scratch(key):
                return None
            with self._gate.drawing(key):
                result = effect()
            return self.keep(key, kind, result, None)
        finally:
            self._gate.release(key, [draw])

    def _may_be_in_scratch(self, key: str) -> bool:
        """Whether scratch may hold `key`, never asked for in this process: read once per unit, then per key."""
        if self._gate.began_empty is None:
            self._gate.began_empty = not self._store.scratch_list(self._unit_id)
        if self._gate.began_empty:
            return False
        return self._store.scratch_get(self._unit_id, key) is not None

    def answer(self, key: str) -> ScratchPin | None:
        """`key`'s held result as its pin, its attempt counted in memory (the write carries it); None if not held."""
        with self._lock:
            held = self._gate.held.get(key)
            if held is None:
                return None
            held.attempts += 1
            return ScratchPin(self._unit_id, key, held.kind, held.raw_text, held.attempts, 0, held.fingerprint)

    def flush_for(self, key: str) -> ScratchPin | None:
        """Write the held results before a claim; if the store still fails, answer a held `key` from memory.

        Not once the unit is fenced (its lease broken, or held by another): its `UnitBusy` is raised, as a claim's
        is. The held result is no longer the unit's answer (the new holder may have drawn the key itself), so a run
        answered from it would go on with a value the log never takes.
        """
        try:
            # Unsynced: the claim's draw (or reuse) writes next, synced, and so syncs these with it.
            self.flush(synced=False)
        except UnitBusy:
            raise
        except StoreError:
            held = self.answer(key)
            if held is None:
                raise
            return held
        return None

    def flush_before(self, action: str) -> None:
        """Write the held results before a close; if the store cannot take them, the close fails and they stay held."""
        try:
            self.flush()
        except StoreError as e:
            keys = self.keys()
            e.add_note(
                f"anagrapheus: cannot {action} unit {self._unit_id}: {len(keys)} drawn result(s) the store has not"
                f" taken yet are held in memory ({', '.join(keys)}); the unit stays open: {action} again once the"
                " store is back"
            )
            raise

    def flush(self, *, synced: bool = True) -> None:
        """Write every held result, in draw order; raise the store's error (the rest stay held) if one fails."""
        if not self._gate.held:
            return
        with self._taken() as pending:
            for key, held in self._written_together(pending, synced=synced):
                self._write_held(key, held, checked=True)

    @contextmanager
    def _taken(self, *, besides: Held | None = None) -> Generator[list[tuple[str, Held]]]:
        """The held results no other caller is writing (`besides` left out), marked as being written for the block."""
        with self._lock:
            pending = [(key, held) for key, held in self._gate.held.items() if held is not besides and not held.writing]
            for _, held in pending:
                held.writing = True
        try:
            yield pending
        finally:
            with self._lock:
                for _, held in pending:
                    held.writing = False

    def _written_together(self, pending: list[tuple[str, Held]], *, synced: bool) -> list[tuple[str, Held]]:
        """Write several held results in one SQLite transaction (one sync to disk); return those left to write singly.

        Each is let go only once the transaction committed. If it failed, it was rolled back whole, and the
        caller writes each on its own as before (looking in scratch first, in case the commit landed after all);
        a unit fenced there (its lease broken, or held by another) raises its `UnitBusy` at once.
        """
        store = self._store
        if len(pending) < 2 or not isinstance(store, SQLiteEventStore):
            return pending
        return pending if self._together(store, pending, lambda: None, synced=synced) is None else []

    def _together(
        self, store: SQLiteEventStore, pending: list[tuple[str, Held]], then: Callable[[], T], *, synced: bool
    ) -> tuple[T] | None:
        """Write `pending`, then run `then`, in one transaction, letting each go once it committed; None if it failed.

        Failed, it was rolled back whole: nothing is let go. A unit fenced there (its lease broken, or held by
        another) raises its `UnitBusy` at once: written again, singly, each would wait for the lease, then lose
        the note.
        """
        # The unit's lease first, in a transaction of its own: taken inside this one, it would wait for the leases'
        # lock while holding the connection that another thread taking a lease waits for.
        store.hold_unit(self._unit_id)
        try:
            with store.transaction() if synced else store.unsynced_transaction():
                if any(held.tried for _, held in pending):
                    # One may have landed already: each is looked for, then written, as on its own.
                    for key, held in pending:
                        self._write_once(key, held, checked=True)
                else:
                    # None tried (run-level pins held on purpose), so none can be there: written with their
                    # attempts in one statement's steps, the unit checked once for them all.
                    for _, held in pending:
                        held.tried = True
                    rows = [(key, held.kind, held.raw_text, held.fingerprint, held.attempts) for key, held in pending]
                    store.scratch_put_many(self._unit_id, rows)
                done = then()
        except UnitBusy:
            raise  # fenced: a decision, not a failure to try again
        except StoreError:
            return None
        for key, held in pending:
            self._let_go(key, held)
        return (done,)

    def _with_the_held(self, key: str, held: Held) -> ScratchPin | None:
        """Write a draw with the results held before it, in its one synced transaction (they first, in draw order).

        The run's id, place and times held on the event loop's thread are written by the unit's next draw this way,
        with no transaction of their own: durable with the first draw whose asking they are part of. None, with
        nothing written, when nothing else is held, the store is not SQLite, or the transaction failed (the caller
        then writes the draw on its own, and the held results stay held for the next store step).
        """
        store = self._store
        if not self._gate.held or not isinstance(store, SQLiteEventStore):
            return None
        with self._taken(besides=held) as pending:
            if not pending:
                return None
            try:
                written = self._together(
                    store, pending, lambda: self._write_once(key, held, checked=False), synced=True
                )
            except UnitClosed:
                return None  # written on its own, the draw's refusal carries its own raw
            return None if written is None else written[0]

    def write(self, key: str, held: Held) -> ScratchPin:
        """Write a held draw at once; if the store fails, it stays held and the error carries it as `.drawn`."""
        with self._lock:
            held.writing = True
        try:
            if (pin := self._with_the_held(key, held)) is not None:
                self._let_go(key, held)
                return pin
            # Checked: had the transaction with the held results committed after all, the pin is found, not counted.
            return self._write_held(key, held, checked=True)
        except StoreError as e:
            e.drawn = held.raw_text
            e.add_note(
                f"anagrapheus: the result drawn for {key} is kept on this error as .drawn (canonical JSON), and held"
                f" by the ledger of unit {self._unit_id}, which writes it on its next resolve or commit"
            )
            raise
        finally:
            with self._lock:
                held.writing = False

    def _write_held(self, key: str, held: Held, *, checked: bool) -> ScratchPin:
        """Write one held result (a second, fresh attempt if the first fails) and let it go once the store has it.

        `checked` first looks for the pin in scratch: a write cut short may have landed all the same, and
        writing it again would count an attempt too many. `UnitBusy` is raised at once, with no second attempt.
        """
        try:
            pin = self._write_once(key, held, checked=checked)
        except UnitBusy:
            raise  # fenced, as in `_together`: a fresh attempt would wait for the lease, then lose the note
        except StoreError:
            # A fresh attempt: a dead pooled connection is replaced, a lock that timed out is asked again.
            pin = self._write_once(key, held, checked=True)
        self._let_go(key, held)
        return pin

    def _write_once(self, key: str, held: Held, *, checked: bool) -> ScratchPin:
        """One try at writing a held result, with the attempts it was asked for from memory."""
        # Found in scratch already: the write that seemed to fail landed (or another store's draw of the key
        # did, which is then the key's answer, as `scratch_put` would make it).
        # Never tried (held by `resolve_held`): no write can have landed, so there is nothing to look for.
        pin = self._store.scratch_get(self._unit_id, key) if checked and held.tried else None
        held.tried = True
        if pin is None:
            pin = self._store.scratch_put(
                self._unit_id, key, kind=held.kind, raw=held.raw_text, fingerprint=held.fingerprint
            )
        for _ in range(held.attempts - 1):
            # The pin is there: counting an attempt at it is what reusing it does.
            pin = self._store.scratch_reuse(self._unit_id, key) or pin
        return pin

    def _let_go(self, key: str, held: Held) -> None:
        """Forget a held result once written (or refused for good)."""
        with self._lock:
            if self._gate.held.get(key) is held:
                del self._gate.held[key]
