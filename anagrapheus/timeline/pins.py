"""PinLedger: the live resolver for one unit of work, with crash-safe scratch and atomic commit."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal, TypeVar

from anagrapheus.errors import CanonicalError, PinResultError, UsageError
from anagrapheus.timeline.canonical import JSONValue, canonical_json
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
    new_uuid7,
)
from anagrapheus.timeline.resolver import StreamDraw
from anagrapheus.timeline.store import OpenUnit, ScratchPin, TimelineStore

__all__ = ["LedgerState", "PinLedger"]

LedgerState = Literal["open", "committed", "abandoned"]
"""Where a unit of work stands: drawing (`open`), or closed for good by `commit()` or `abandon()`."""

T = TypeVar("T")
S = TypeVar("S")


def raw_text_of(result: object, *, key: str, kind: str) -> str:
    """Return an effect's result as canonical JSON text, or raise `PinResultError` saying why it cannot be pinned."""
    try:
        return canonical_json(result)
    except CanonicalError as e:
        raise PinResultError(
            f"the {kind} effect for {key} returned a result that is not JSON-shaped ({e});"
            " return JSON types, or convert the value deliberately before pinning"
        ) from e


class _Draw:
    """A draw in flight: later requests for its key wait on it, from threads or from event loops."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._guard = threading.Lock()

    def finish(self) -> None:
        with self._guard:
            self._done.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            loop.call_soon_threadsafe(_wake, future)

    def wait(self) -> None:
        self._done.wait()

    async def wait_async(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._guard:
            if self._done.is_set():
                return
            self._waiters.append((loop, future))
        await future


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PinLedger:
    """The live resolver for one unit of work: draws once per key, keeps draws in scratch, commits them atomically.

    A first draw runs the effect and writes its raw result to the store's scratch at once
    (durable, invisible to the log). A repeat of the key in the unit answers from scratch and
    counts the attempt; concurrent requests for one key wait for the draw in flight.
    `commit()` promotes every pin into the log; `abandon()` drops them with one audit event.
    """

    def __init__(
        self,
        store: TimelineStore,
        registry: EventTypeRegistry,
        *,
        unit_id: str | None = None,
    ) -> None:
        if (BUILTIN_NAMESPACE, PinPromoted.event_type) not in registry:
            raise UsageError("the registry lacks the built-in events (it was made with builtins=False)")
        self.unit_id: str = unit_id if unit_id is not None else new_uuid7()
        """The unit of work's id: a UUIDv7 unless given (give an open unit's id to resume it)."""
        self._store = store
        self._registry = registry
        self._state: LedgerState = "open"
        self._inflight: dict[str, _Draw] = {}
        self._lock = threading.Lock()
        self._divergence: Divergence | None = None

    @staticmethod
    def open_units(store: TimelineStore) -> list[OpenUnit]:
        """List the units with pins in scratch that were never committed or abandoned (e.g. after a crash)."""
        return store.open_units()

    @property
    def state(self) -> LedgerState:
        """`open`, `committed` or `abandoned`."""
        return self._state

    def pins(self) -> list[ScratchPin]:
        """Return the unit's pins drawn so far, in draw order."""
        return self._store.scratch_list(self.unit_id)

    def _check_open(self) -> None:
        if self._state != "open":
            raise UsageError(f"unit {self.unit_id} is already {self._state}; start a new PinLedger for more work")

    def _claim(self, key: str) -> ScratchPin | _Draw | None:
        """Return the scratch pin, the draw in flight to wait for, or None once this caller owns the draw."""
        with self._lock:
            pin = self._store.scratch_get(self.unit_id, key)
            if pin is not None:
                return pin
            draw = self._inflight.get(key)
            if draw is not None:
                return draw
            self._inflight[key] = _Draw()
            return None

    def _turn(self, key: str) -> ScratchPin | None:
        """Wait out a draw in flight for `key`; return its pin, or None once this caller owns the draw."""
        self._check_open()
        while isinstance(claimed := self._claim(key), _Draw):
            claimed.wait()
        return claimed

    async def _aturn(self, key: str) -> ScratchPin | None:
        """Like `_turn`, waiting without blocking the event loop."""
        self._check_open()
        while isinstance(claimed := self._claim(key), _Draw):
            await claimed.wait_async()
        return claimed

    def _reuse(self, pin: ScratchPin, interpret: Callable[[JSONValue], T]) -> T:
        self._store.scratch_bump(self.unit_id, pin.key)
        return interpret(json.loads(pin.raw))

    def _release(self, key: str) -> None:
        with self._lock:
            draw = self._inflight.pop(key)
        draw.finish()

    def _put(self, key: str, kind: str, result: object, fingerprint: Mapping[str, str] | None) -> str:
        raw = raw_text_of(result, key=key, kind=kind)
        # Any Mapping (a provider may digest its fingerprint lazily); canonical JSON takes only a real dict.
        digests = None if fingerprint is None else canonical_json(dict(fingerprint))
        self._store.scratch_put(self.unit_id, key, kind=kind, raw=raw, fingerprint=digests)
        return raw

    def resolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
    ) -> T:
        """Resolve `key` with a synchronous effect: drawn once per unit, reused after."""
        pin = self._turn(key)
        if pin is not None:
            return self._reuse(pin, interpret)
        try:
            raw = self._put(key, kind, effect(), fingerprint)
        finally:
            self._release(key)
        return interpret(json.loads(raw))

    async def aresolve(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], Awaitable[object]],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
    ) -> T:
        """Resolve `key` with an asynchronous effect: drawn once per unit, reused after."""
        pin = await self._aturn(key)
        if pin is not None:
            return self._reuse(pin, interpret)
        try:
            raw = self._put(key, kind, await effect(), fingerprint)
        finally:
            self._release(key)
        return interpret(json.loads(raw))

    def resolve_stream(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[StreamDraw[S, T]]:
        """Resolve `key` with a streaming effect; a live stream is pinned as `capture(stream)` on exit, even failed."""
        return self._stream(key, kind, effect, capture, interpret, fingerprint)

    @asynccontextmanager
    async def _stream(
        self,
        key: str,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None,
    ) -> AsyncGenerator[StreamDraw[S, T]]:
        pin = await self._aturn(key)
        if pin is not None:
            yield StreamDraw(live=None, pinned=self._reuse(pin, interpret))
            return
        try:
            async with effect() as live:
                failed = False
                try:
                    yield StreamDraw(live=live, pinned=None)
                except BaseException:
                    failed = True
                    raise
                finally:
                    # A partial answer is still something the model produced: pin it, even when the
                    # consumer stopped early or the stream failed. Never let pinning mask that failure.
                    try:
                        self._put(key, kind, capture(live), fingerprint)
                    except Exception:
                        if not failed:
                            raise
        finally:
            self._release(key)

    # Used by ReplayPins in record mode.

    def adopt(self, key: str, *, kind: str, raw: str, fingerprint: str | None) -> None:
        """Take a replayed pin into this unit's scratch (or count one more attempt at it)."""
        self._check_open()
        with self._lock:
            if self._store.scratch_get(self.unit_id, key) is None:
                self._store.scratch_put(self.unit_id, key, kind=kind, raw=raw, fingerprint=fingerprint)
                return
        self._store.scratch_bump(self.unit_id, key)

    def note_divergence(self, divergence: Divergence) -> None:
        """Record where a record-mode replay left its recording; written as `ReplayDiverged` on commit."""
        self._check_open()
        if self._divergence is None:
            self._divergence = divergence

    @property
    def divergence(self) -> Divergence | None:
        """The divergence noted by a record-mode replay, if any."""
        return self._divergence

    def _check_idle(self, action: str) -> None:
        self._check_open()
        with self._lock:
            if self._inflight:
                raise UsageError(
                    f"cannot {action} unit {self.unit_id} while {len(self._inflight)} draw(s) are in flight"
                )

    def commit(self) -> list[StoredEvent]:
        """Promote every scratch pin to the log as `PinPromoted`, in draw order, and clear scratch, atomically."""
        self._check_idle("commit")
        pins = self._store.scratch_list(self.unit_id)
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
        stored = self._store.settle_unit(self.unit_id, events)
        self._state = "committed"
        return stored

    def _promoted(self, pin: ScratchPin) -> PendingEvent:
        payload = PinPromoted.payload_text(
            unit_id=pin.unit_id,
            key=pin.key,
            kind=pin.kind,
            raw=pin.raw,
            attempts=pin.attempts,
            fingerprint=pin.fingerprint,
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
        self._check_idle("abandon")
        pins = self._store.scratch_list(self.unit_id)
        event = PinsAbandoned(
            unit_id=self.unit_id,
            reason=reason,
            pins=tuple(AbandonedPin(key=p.key, kind=p.kind, attempts=p.attempts) for p in pins),
        )
        (stored,) = self._store.settle_unit(self.unit_id, [self._registry.encode(event, correlation_id=self.unit_id)])
        self._state = "abandoned"
        return stored
