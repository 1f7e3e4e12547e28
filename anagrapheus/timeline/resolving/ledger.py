"""PinLedger: the live resolver for one unit of work, with crash-safe scratch and atomic commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Literal, TypeVar, cast

from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.timeline.canonical import JSONValue, stored_json
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    AbandonedPin,
    EventTypeRegistry,
    PendingEvent,
    PinPromoted,
    PinsAbandoned,
    ReplayDiverged,
    StoredEvent,
    given_or_builtins,
    new_uuid7,
)
from anagrapheus.timeline.resolving.failures import answered, answered_stream, failed_raw, scratch_kind, stored_kind
from anagrapheus.timeline.resolving.gate import Draw, Held, gate_for, noting_keys
from anagrapheus.timeline.resolving.held import HeldDraws
from anagrapheus.timeline.resolving.resolver import FailureCodec, Resolver, StreamDraw
from anagrapheus.timeline.stores.ports import OpenUnit, ScratchPin, TimelineStore, UnitOutcome
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore
from anagrapheus.timeline.tracing import PinSpan, pin_span, unit_span

__all__ = ["LedgerState", "PinLedger", "noting_keys"]

LedgerState = Literal["open", "committed", "abandoned"]
"""Where a unit of work stands: drawing (`open`), or closed for good by `commit()` or `abandon()`."""

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")


def _digests_text(fingerprint: Mapping[str, str] | None) -> str | None:
    """The fingerprint as the pin keeps it, checked before the effect runs: names to digests, all strings."""
    if fingerprint is None:
        return None
    # Any Mapping (a provider may digest its fingerprint lazily); canonical JSON takes only a real dict.
    # Typed as strings, but a caller's mapping may hold anything at run time.
    fields = cast("dict[object, object]", dict(fingerprint))
    wrong = [name for name, digest in fields.items() if not isinstance(name, str) or not isinstance(digest, str)]
    if wrong:
        raise UsageError(f"a fingerprint maps field names to digest strings; {wrong[0]!r} does not")
    return stored_json(fields)


class PinLedger(Resolver):
    """The live resolver for one unit of work: draws once per key, keeps draws in scratch, commits them atomically.

    A first draw runs the effect and writes its raw result to the store's scratch at once
    (durable, invisible to the log). A repeat of the key in the unit answers from scratch and
    counts the attempt; concurrent requests for one key wait for the draw in flight.
    `commit()` promotes every pin into the log; `abandon()` drops them with one audit event.
    A draw racing a commit or abandon is either part of it or refused with `UnitClosed` before
    its effect runs. The async methods do their store work in a worker thread, off the event loop.
    """

    def __init__(
        self,
        store: TimelineStore,
        registry: EventTypeRegistry | None = None,
        *,
        unit_id: str | None = None,
    ) -> None:
        registry = given_or_builtins(registry)
        if (BUILTIN_NAMESPACE, PinPromoted.event_type) not in registry:
            raise UsageError("the registry lacks the built-in events (it was made with builtins=False)")
        self.unit_id: str = unit_id if unit_id is not None else new_uuid7()
        """The unit of work's id: a UUIDv7 unless given (give an open unit's id to resume it)."""
        self._store = store
        self._registry = registry
        # A unit is closed once, for good: on a closed unit's id, the first draw, commit or abandon is refused
        # with `UnitClosed` (a second, different result under one unit could not be told apart in replay).
        # The constructor itself touches no store, so it never waits on one.
        self._gate = gate_for(store, self.unit_id)
        self._lock = self._gate.lock
        self._held = HeldDraws(store, self._gate)
        if unit_id is None and self._gate.began_empty is None:
            # A unit id minted here is in no store's scratch: its run-level pins need no read to know it.
            self._gate.began_empty = True
        self._divergence: Divergence | None = None
        self._noted: list[PendingEvent] = []

    @property
    @override
    def unit(self) -> str:
        """The unit of work its runs are positions in: its own (`unit_id`)."""
        return self.unit_id

    @property
    @override
    def draws_into(self) -> PinLedger:
        """Where its fresh draws land: itself."""
        return self

    @staticmethod
    def open_units(store: TimelineStore) -> list[OpenUnit]:
        """List the units with pins in scratch that were never committed or abandoned (e.g. after a crash)."""
        return store.open_units()

    @property
    def state(self) -> LedgerState:
        """`open`, `committed` or `abandoned`, as the store holds it.

        A commit made inside `store.transaction()` that then rolls back leaves the unit `open`
        again, with its pins in scratch, ready to commit once more.
        """
        outcome = self._store.unit_outcome(self.unit_id)
        with self._lock:
            self._gate.closed = outcome
        return outcome or "open"

    def pins(self) -> list[ScratchPin]:
        """Return the unit's pins drawn so far, in draw order; a failed draw's kind ends in `!failed`."""
        return self._store.scratch_list(self.unit_id)

    def _look(self, key: str) -> ScratchPin | None:
        """The pin of `key` found without drawing (held results written first), its attempt counted; None if none."""
        if (held := self._held.flush_for(key)) is not None:
            return held
        if (held := self._held.answer(key)) is not None:
            # Held, and being written by another caller right now (the flush passed it over): scratch has no
            # pin yet, and drawing now would run the effect a second time (issue #35). Answered from memory.
            return held
        # Counting the attempt and reading the pin are one store step: a commit cannot fall between them.
        return self._store.scratch_reuse(self.unit_id, key)

    def _look_first(self, key: str) -> ScratchPin | None:
        """`_look` for a key first asked for now in a unit whose scratch began empty: no pin of it can be there.

        So its claim counts nothing and writes nothing: on SQLite it takes the unit's lease (the unit's first write)
        and reads whether the unit is still open and still this store's, before the effect runs, with no transaction.
        What the ledger holds (the run's id, place, times) is written with the draw itself, in its one synced
        transaction (`HeldDraws.write`), not here.
        """
        store = self._store
        if not isinstance(store, SQLiteEventStore):
            return self._look(key)
        store.fence_unit(self.unit_id)
        return None

    async def _claimed(self, key: str, *, first: bool) -> ScratchPin | None:
        """The key's turn for `aresolve`: its pin, or None once this caller owns the draw.

        A key first asked for now in a unit whose scratch began empty is claimed on the calling thread (the event
        loop's) when the unit can be fenced there (`SQLiteEventStore.fence_unit_here`): no pin can be in scratch,
        so nothing else needs the store, and the claim needs no hop to a worker thread.
        """
        if not (first and self._gate.began_empty):
            return await self._gate.aturn(key, self._look)
        store = self._store
        if self._gate.closed is None and isinstance(store, SQLiteEventStore) and store.fence_unit_here(self.unit_id):
            in_flight = self._gate.claim_here(key)
            if in_flight is None:
                return None
            await in_flight.wait_async()  # asked at the same moment in another thread: its pin is looked for now
            return await self._gate.aturn(key, self._look)
        return await self._gate.aturn(key, self._look_first)

    def _put_failure(self, key: str, kind: str, failed: object, digests: str | None) -> None:
        """Pin a failed draw; never let pinning it mask the failure it records (a failed write keeps it held)."""
        with suppress(Exception):
            self._held.put(key, kind, failed, digests, failed=True)

    def _draw_now(
        self,
        key: str,
        kind: str,
        effect: Callable[[], object],
        digests: str | None,
        failure: FailureCodec | None,
    ) -> Held:
        """Run a synchronous effect and hold its result; an interrupt after the effect returned keeps it too."""
        drawn: list[object] = []
        try:
            with self._gate.drawing(key):
                drawn.append(effect())
            return self._held.keep(key, kind, drawn[0], digests)
        except Exception as e:
            if not drawn and (failed := _failed_draw(e, failure)) is not None:
                self._put_failure(key, kind, failed, digests)
            raise
        except BaseException:
            # A KeyboardInterrupt (or SystemExit) after the effect returned: what was paid for is held, and
            # written on the next resolve or commit, before the interrupt goes on.
            if drawn and key not in self._held:
                with suppress(Exception):
                    self._held.keep(key, kind, drawn[0], digests)
            raise

    @override
    def resolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> T:
        """Resolve `key` with a synchronous effect: drawn once per unit, reused after (a pinned failure is raised).

        If the store fails to write the result after the effect ran, the result is not lost: see
        `StoreError.drawn` and the how-to "Units of work" on failed writes.
        """
        with pin_span(kind, key, self.unit_id) as span:
            return self._resolve(span, key, kind, effect, interpret, fingerprint, failure)

    def _resolve(
        self,
        span: PinSpan,
        key: str,
        kind: str,
        effect: Callable[[], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None,
        failure: FailureCodec | None,
    ) -> T:
        self._gate.note_asked(key)
        mine: list[Draw] = []
        try:
            pin = self._gate.turn(key, self._look, mine)
            if pin is None:
                digests = _digests_text(fingerprint)
                # Normally this draw's own pin; if another store object drew the key first, its pin is the answer.
                pin = self._held.write(key, self._draw_now(key, kind, effect, digests, failure))
                span.set("drawn", attempts=pin.attempts)
            else:
                span.set("reused", attempts=pin.attempts)
        finally:
            try:
                self._gate.release(key, mine)
            except BaseException:
                # A Ctrl-C cut the release short (it can fall as the call begins): release again, or every
                # later draw of the key, and the unit's close, would wait for it for ever.
                self._gate.release(key, mine)
                raise
        return _answered(pin, interpret, failure)

    @override
    async def aresolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], Awaitable[object]],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> T:
        """Resolve `key` with an asynchronous effect: drawn once per unit, reused after (a pinned failure is raised)."""
        # Noted before the first await: tasks started in one order reach this line in that order.
        first = self._gate.note_asked(key)
        with pin_span(kind, key, self.unit_id) as span:
            pin = await self._claimed(key, first=first)
            if pin is not None:
                span.set("reused", attempts=pin.attempts)
                return _answered(pin, interpret, failure)
            try:
                digests = _digests_text(fingerprint)
                try:
                    with self._gate.drawing(key):
                        result = await effect()
                except Exception as e:
                    if (failed := _failed_draw(e, failure)) is not None:
                        await _written(self._put_failure, key, kind, failed, digests)
                    raise
                pin = await _written(self._held.put, key, kind, result, digests)
                span.set("drawn", attempts=pin.attempts)
            finally:
                self._gate.release(key)
            return _answered(pin, interpret, failure)

    @override
    @asynccontextmanager
    async def resolve_stream(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> AsyncGenerator[StreamDraw[S, T]]:
        """Resolve `key` with a streaming effect; a live stream is pinned as `capture(stream)` on exit, even failed."""
        with pin_span(kind, key, self.unit_id, current=False) as span:
            self._gate.note_asked(key)
            pin = await self._gate.aturn(key, self._look)
            if pin is not None:
                span.set("reused", attempts=pin.attempts)
                failed = stored_kind(pin.kind)[1]
                async with answered_stream(pin.raw_text, failed=failed, interpret=interpret, codec=failure) as draw:
                    yield draw
                return
            try:
                digests = _digests_text(fingerprint)
                opened = False
                try:
                    with self._gate.drawing(key):
                        async with effect() as live:
                            opened = True
                            span.set("drawn")
                            error: BaseException | None = None
                            try:
                                yield StreamDraw(live=live, pinned=None)
                            except BaseException as e:
                                error = e
                                raise
                            finally:
                                # A partial answer is still something the model produced: pin it, even when the
                                # consumer stopped early or the stream failed. With a codec, a failure is pinned
                                # as what it was, after what the stream produced. Never let pinning mask it.
                                failed = (
                                    None
                                    if error is None
                                    else _failed_draw(error, failure, capture=lambda: capture(live))
                                )
                                try:
                                    if failed is not None:
                                        await _written(self._put_failure, key, kind, failed, digests)
                                    else:
                                        await _written(self._held.put, key, kind, capture(live), digests)
                                except Exception:
                                    if error is None:
                                        raise
                except Exception as e:
                    if not opened and (failed := _failed_draw(e, failure)) is not None:
                        # The stream never opened: the failure is the whole draw.
                        await _written(self._put_failure, key, kind, failed, digests)
                    raise
            finally:
                self._gate.release(key)

    @override
    def resolve_held(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], object],
        interpret: Callable[[JSONValue], T],
    ) -> T:
        """Resolve a run-level pin (a run's id, place or clock) with no store write on the calling thread.

        For an effect that reads only the process (a fresh id, the wall clock) and is safe to run under the
        unit's bookkeeping. A key not drawn yet is drawn now and held in memory: the unit's next store write
        writes it (the next draw's, in that draw's worker thread and transaction, before its pin; or a claim's
        that writes), or `flush_held`, or the commit. Until then a later ask is answered from memory, as after a
        failed write. A key the unit holds in scratch (a resumed unit) is answered from there, as `resolve` does.
        A crash before the write loses it and the draw in flight only: nothing durable was built on them yet.
        """
        asked_before = key in self._gate.asked
        self._gate.note_asked(key)
        with pin_span(kind, key, self.unit_id) as span:
            held = self._held.draw_at_once(key, kind, effect, asked_before=asked_before)
            if held is None:
                # Asked for before, drawn by another caller right now, or in scratch: the general path answers it.
                return self._resolve(span, key, kind, effect, interpret, None, None)
            span.set("drawn", attempts=1)
        return _answered(ScratchPin(self.unit_id, key, held.kind, held.raw_text, 1, 0, None), interpret, None)

    @override
    async def aresolve_held(
        self, key: str, *, kind: str, effect: Callable[[], object], interpret: Callable[[JSONValue], T]
    ) -> T:
        """`resolve_held` from async code: no hop, no write (a run's timestamps before its next draw)."""
        return self.resolve_held(key, kind=kind, effect=effect, interpret=interpret)

    @property
    @override
    def holding(self) -> bool:
        """Whether it holds drawn results in memory the store has not taken yet (see `resolve_held`)."""
        return bool(self._held)

    @override
    def flush_held(self) -> None:
        """Write the results held in memory (`resolve_held`'s, or a failed write's) durably; for a worker thread."""
        self._held.flush()

    # Used by ReplayPins in record mode.

    def adopt(self, key: str, *, kind: str, raw: str, fingerprint: str | None, failed: bool = False) -> None:
        """Take a replayed pin into this unit's scratch (or count one more attempt at it)."""
        self._gate.note_asked(key)
        if self._gate.turn(key, self._look) is not None:
            return
        try:
            self._store.scratch_put(
                self.unit_id, key, kind=scratch_kind(kind, failed=failed), raw=raw, fingerprint=fingerprint
            )
        finally:
            self._gate.release(key)

    def note_divergence(self, divergence: Divergence) -> None:
        """Record where a record-mode replay left its recording; written as `ReplayDiverged` on commit."""
        with self._lock:
            self._gate.refuse_unless_open()
            if self._divergence is None:
                self._divergence = divergence

    @override
    def note_event(self, event: PendingEvent) -> None:
        """Add an event (a run's inputs, say) to the unit's commit: appended after its pins, in the order noted.

        Kept in memory only: a unit resumed after a crash commits its pins without the events noted before it.
        """
        with self._lock:
            self._gate.refuse_unless_open()
            self._noted.append(event)

    @property
    @override
    def divergence(self) -> Divergence | None:
        """The divergence noted by a record-mode replay, if any."""
        return self._divergence

    def _close(
        self, outcome: UnitOutcome, events: Callable[[list[ScratchPin]], list[PendingEvent]]
    ) -> list[StoredEvent]:
        action = "commit" if outcome == "committed" else "abandon"
        with unit_span(action, self.unit_id) as span:
            stored = self._settle(outcome, action, events)
            if span is not None:
                span.set_attribute("anagrapheus.unit.pins", _pins_settled(stored))
                span.set_attribute("anagrapheus.unit.events", len(stored))
            return stored

    def _settle(
        self, outcome: UnitOutcome, action: str, events: Callable[[list[ScratchPin]], list[PendingEvent]]
    ) -> list[StoredEvent]:
        """Settle the unit in the store: its pins promoted (or its scratch dropped) with `events`, atomically."""
        with self._lock:
            self._gate.refuse_unless_open()
            if self._gate.inflight:
                raise UsageError(
                    f"cannot {action} unit {self.unit_id} while {len(self._gate.inflight)} draw(s) are in flight"
                )
            # From here until the store answers, a new draw is refused before its effect runs.
            self._gate.closing = "committing" if outcome == "committed" else "abandoning"
        try:
            self._held.flush_before(action)
            stored = self._store.settle_unit(self.unit_id, outcome=outcome, events=events)
        finally:
            with self._lock:
                self._gate.closing = None
        with self._lock:
            self._gate.closed = outcome
        return stored

    def commit(self) -> list[StoredEvent]:
        """Promote every scratch pin to the log as `PinPromoted`, and clear scratch, atomically.

        Pins are promoted in the order their keys were first asked for, not the order concurrent draws
        finished in, so an unchanged run commits the same log however its draws were scheduled. Pins an
        earlier ledger drew and nobody asked for again come first, in draw order. Results held in memory
        after a failed write are written first; if they cannot be, the commit raises the store's error and
        the unit stays open with them held.
        """
        return self._close("committed", self._commit_events)

    async def acommit(self) -> list[StoredEvent]:
        """Like `commit`, with the store work in a worker thread, so it waits off the event loop."""
        return await asyncio.to_thread(self.commit)

    def _commit_events(self, drawn: list[ScratchPin]) -> list[PendingEvent]:
        asked = self._gate.asked
        # Stable: pins asked for in no ledger of this process keep their draw order, ahead of the rest.
        pins = sorted(drawn, key=lambda pin: (pin.key in asked, asked.get(pin.key, 0)))
        events = [self._promoted(pin) for pin in pins]
        divergence = self._divergence
        if divergence is not None:
            diverged = self._registry.encode(
                ReplayDiverged(
                    unit_id=self.unit_id,
                    key=divergence.key,
                    kind=divergence.kind,
                    after_hits=divergence.after_hits,
                    moved=divergence.moved,
                    nearest_key=divergence.nearest_key,
                ),
                correlation_id=self.unit_id,
            )
            # The marker goes right before the first pin the recording could not answer.
            at = next((i for i, pin in enumerate(pins) if pin.key == divergence.key), len(events))
            events.insert(at, diverged)
        with self._lock:
            events.extend(self._noted)
        return events

    def _promoted(self, pin: ScratchPin) -> PendingEvent:
        kind, failed = stored_kind(pin.kind)
        payload = PinPromoted.payload_text(
            unit_id=pin.unit_id,
            key=pin.key,
            kind=kind,
            raw=pin.raw_text,
            attempts=pin.attempts,
            fingerprint=pin.fingerprint,
            failed=failed,
        )
        return PendingEvent(
            namespace=BUILTIN_NAMESPACE,
            type=PinPromoted.event_type,
            schema_version=PinPromoted.schema_version,
            payload=payload,
            correlation_id=self.unit_id,
        )

    def abandon(self, *, reason: str) -> StoredEvent:
        """Drop the unit's scratch and append one `PinsAbandoned` listing each key, kind and attempts."""

        def summary(pins: list[ScratchPin]) -> list[PendingEvent]:
            event = PinsAbandoned(
                unit_id=self.unit_id,
                reason=reason,
                pins=tuple(AbandonedPin(key=p.key, kind=p.kind, attempts=p.attempts) for p in pins),
            )
            return [self._registry.encode(event, correlation_id=self.unit_id)]

        (stored,) = self._close("abandoned", summary)
        return stored

    async def aabandon(self, *, reason: str) -> StoredEvent:
        """Like `abandon`, with the store work in a worker thread, so it waits off the event loop."""
        return await asyncio.to_thread(self.abandon, reason=reason)


def _pins_settled(stored: list[StoredEvent]) -> int:
    """How many pins a settled unit's events promoted, or listed as abandoned."""
    promoted = sum(event.type == PinPromoted.event_type for event in stored)
    listed = (event.payload_json().get("pins") for event in stored if event.type == PinsAbandoned.event_type)
    abandoned = sum(len(pins) for pins in listed if isinstance(pins, list))
    return promoted + abandoned


async def _written(write: Callable[..., R], *args: object) -> R:
    """Run a pin's write in a worker thread to its end, even if the awaiting task is cancelled meanwhile.

    A draw was paid for by the time it is written. Cancelled while the write still waited for a worker,
    a plain `to_thread` would drop the write, and the draw with it (a consumer that stops a stream
    early cancels the run that is writing it). The cancellation is passed on once the pin is written.
    """
    write_task = asyncio.ensure_future(asyncio.to_thread(write, *args))
    try:
        return await asyncio.shield(write_task)
    except asyncio.CancelledError:
        while not write_task.done():
            with suppress(asyncio.CancelledError):
                await asyncio.wait({write_task})
        if not write_task.cancelled():
            write_task.exception()  # retrieved: the cancellation is what the caller hears of
        raise


def _failed_draw(
    error: BaseException, failure: FailureCodec | None, *, capture: Callable[[], object] | None = None
) -> object | None:
    """The raw of a failed draw to pin, or None without a codec or when it says the error is not the draw's outcome."""
    if failure is None:
        return None
    try:
        record = failure.describe(error)
        if record is None:
            return None
        return failed_raw(record) if capture is None else failed_raw(record, captured=capture(), has_captured=True)
    except Exception:
        return None


def _answered(pin: ScratchPin, interpret: Callable[[JSONValue], T], failure: FailureCodec | None) -> T:
    """A reused pin's value, or the failure it pinned, raised again (a retry after a failure has a key of its own)."""
    return answered(pin.raw_text, failed=stored_kind(pin.kind)[1], interpret=interpret, codec=failure)
