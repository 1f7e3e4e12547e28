"""ReplayPins: answers keyed effects from the log, and says where and how a run left it."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Literal, TypeVar

from typing_extensions import override

from anagrapheus.errors import AmbiguousPin, PinMiss, UsageError
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import Divergence, diverged_at
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    EventTypeRegistry,
    PinPromoted,
    PinText,
    StoredEvent,
    given_or_builtins,
)
from anagrapheus.timeline.provenance import Provenance, ProvenanceCheck, Stamping, versions_note
from anagrapheus.timeline.recording.header import RecordingHeader
from anagrapheus.timeline.recording.lookup import IndexedPins, indexed_pins, indexed_unit_pins
from anagrapheus.timeline.recording.pins import stream_pins
from anagrapheus.timeline.resolving.failures import answered, answered_stream
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.resolving.resolver import FailureCodec, Resolver, StreamDraw
from anagrapheus.timeline.stores.ports import EventStore
from anagrapheus.timeline.tracing import PinSpan, pin_span, spans_made
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = ["AmbiguousPinWarning", "Divergence", "ReplayPins"]

T = TypeVar("T")
S = TypeVar("S")
Conflicts = dict[str, tuple[str, ...]]
"""Keys pinned with different results by several units, each with those units."""


class AmbiguousPinWarning(UserWarning):
    """Emitted when a replay is built from events in which one key has several different results."""


class ReplayPins(Resolver):
    """Answers keyed effects from pins in the log; the same resolver interface as `PinLedger`.

    `on_miss="strict"` raises `PinMiss` before any effect runs. `on_miss="record"` marks the first
    miss as the divergence and draws fresh through the ledger given as `into=`, adopting every
    replayed pin into its scratch, so the ledger's commit is a new log that replays strictly.
    """

    def __init__(
        self,
        pins: Mapping[str, PinText],
        *,
        ambiguous: Mapping[str, tuple[str, ...]] | None = None,
        on_miss: Literal["strict", "record"] = "strict",
        into: PinLedger | None = None,
    ) -> None:
        if on_miss not in ("strict", "record"):
            raise UsageError(f"on_miss must be 'strict' or 'record', not {on_miss!r}")
        if on_miss == "record" and into is None:
            raise UsageError("on_miss='record' needs into=PinLedger(...): the fresh draws belong to a unit of work")
        if on_miss == "strict" and into is not None:
            raise UsageError("into= is only for on_miss='record'; strict replay never draws")
        self._pins: Mapping[str, PinText] = dict(pins)
        self._ambiguous = dict(ambiguous or {})
        self._into = into
        self._hits = 0
        self._used: set[str] = set()
        self._divergence: Divergence | None = None
        self._fingerprints: dict[str, Mapping[str, str]] = {}
        self._units: tuple[str, ...] | None = None
        self.recorded_with: Provenance | None = None
        """The provenance of the recording the pins came from (`from_recording`): a miss names its versions."""
        # What says which versions this process is, for a miss to name beside the recording's (`from_recording`).
        self._stamping: Stamping | None = None

    @classmethod
    def from_events(
        cls,
        events: Iterable[StoredEvent],
        registry: EventTypeRegistry | None = None,
        *,
        unit_id: str | None = None,
        upcasts: UpcastRegistry | None = None,
        on_miss: Literal["strict", "record"] = "strict",
        into: PinLedger | None = None,
    ) -> ReplayPins:
        """Collect the `PinPromoted` events of a stream (all of it, or one unit's), upcast first.

        `registry` reads the pins; by default, one that knows the built-in events.
        """
        types = given_or_builtins(registry)
        pins = (
            PinPromoted.read_text(stored, types, upcasts=upcasts)
            for stored in events
            if stored.namespace == BUILTIN_NAMESPACE and stored.type == PinPromoted.event_type
        )
        return cls._collect(pins, unit_id=unit_id, on_miss=on_miss, into=into)

    @classmethod
    def _collect(
        cls,
        texts: Iterable[PinText],
        *,
        unit_id: str | None,
        on_miss: Literal["strict", "record"],
        into: PinLedger | None,
    ) -> ReplayPins:
        pins, conflicts = _gathered(texts, unit_id)
        return cls._answering_from(pins, conflicts, on_miss=on_miss, into=into, stacklevel=4)

    @classmethod
    def _answering_from(
        cls,
        pins: Mapping[str, PinText],
        conflicts: Conflicts,
        *,
        on_miss: Literal["strict", "record"],
        into: PinLedger | None,
        stacklevel: int,
    ) -> ReplayPins:
        """A replay answering from `pins` as they are (a dict, or a recording's pins read as asked)."""
        if conflicts:
            warnings.warn(
                f"{len(conflicts)} key(s) were pinned with different results by different units; resolving one"
                " raises AmbiguousPin (replay one unit with unit_id=... to answer it exactly)",
                AmbiguousPinWarning,
                stacklevel=stacklevel,
            )
        replay = cls({}, ambiguous=conflicts, on_miss=on_miss, into=into)
        replay._pins = pins
        return replay

    @classmethod
    def from_store(
        cls,
        store: EventStore,
        registry: EventTypeRegistry | None = None,
        *,
        unit_id: str | None = None,
        upcasts: UpcastRegistry | None = None,
        on_miss: Literal["strict", "record"] = "strict",
        into: PinLedger | None = None,
    ) -> ReplayPins:
        """Collect a store's pins as `from_events` does, reading only `PinPromoted` rows, a page at a time."""
        events = store.read(namespace=BUILTIN_NAMESPACE, type=PinPromoted.event_type)
        types = given_or_builtins(registry)
        pins = (PinPromoted.read_text(stored, types, upcasts=upcasts) for stored in events)
        return cls._collect(pins, unit_id=unit_id, on_miss=on_miss, into=into)

    @classmethod
    def from_recording(
        cls,
        path: str | os.PathLike[str],
        registry: EventTypeRegistry | None = None,
        *,
        unit_id: str | None = None,
        upcasts: UpcastRegistry | None = None,
        on_miss: Literal["strict", "record"] = "strict",
        into: PinLedger | None = None,
        call_policy: object | None = None,
        provenance: ProvenanceCheck = "warn",
        stamping: Stamping | None = None,
    ) -> ReplayPins:
        """Collect a recording's pins as `from_events` does, reading the file a line at a time (`stream_pins`).

        The header's provenance is checked first, against `call_policy`, as `read_recording` checks it, under
        `stamping` (the provider layer's if None), which a miss also names the versions with.
        A recording with an index beside it (`write_recording` writes one for large recordings) is opened, not
        read: with `unit_id`, only that unit's lines are read; without, each pin's line when its key is first
        asked (a miss, `unused()` and any other walk over every pin read them all). The answers and errors are a
        whole read's; an index that disagrees with its recording warns (`RecordingIndexWarning`) and is not used.
        """
        types = given_or_builtins(registry)

        def whole(checked: ProvenanceCheck = provenance) -> tuple[RecordingHeader, dict[str, PinText], Conflicts]:
            header, pins = stream_pins(
                path, types, upcasts=upcasts, call_policy=call_policy, provenance=checked, stamping=stamping
            )
            return (header, *_gathered(pins, unit_id))

        if unit_id is not None:
            unit = indexed_unit_pins(
                path,
                types,
                unit_id,
                upcasts=upcasts,
                call_policy=call_policy,
                provenance=provenance,
                stamping=stamping,
            )
            header, pins, conflicts = whole() if unit is None else (unit[0], *_gathered(unit[1], unit_id))
            replay = cls._answering_from(pins, conflicts, on_miss=on_miss, into=into, stacklevel=3)
        else:
            opened = indexed_pins(
                path,
                types,
                call_policy=call_policy,
                provenance=provenance,
                whole=lambda: whole("ignore")[1],
                stamping=stamping,
            )
            if opened is None:
                header, pins, conflicts = whole()
                replay = cls._answering_from(pins, conflicts, on_miss=on_miss, into=into, stacklevel=3)
            else:
                header, lazy, conflicts = opened
                replay = cls._answering_from(lazy, conflicts, on_miss=on_miss, into=into, stacklevel=3)
        replay.recorded_with = header.provenance
        replay._stamping = stamping
        return replay

    def __len__(self) -> int:
        return len(self._pins)

    def __contains__(self, key: object) -> bool:
        return key in self._pins

    @override
    def answered_within(self, keys: Iterable[str]) -> None:
        """Count `keys` as used: a draw answered from its pin asked them when it ran (an agent it delegated to).

        Under `on_miss="record"` they are adopted into the new unit too, so its log keeps them. A key the
        recording lacks is passed over: the draw's own pin answered, and that is what replay needs.
        """
        for key in keys:
            pin = self._pins.get(key)
            if pin is None or key in self._used:
                continue
            self._used.add(key)
            if self._into is not None:
                self._into.adopt(key, kind=pin.kind, raw=pin.raw_text, fingerprint=pin.fingerprint, failed=pin.failed)

    @override
    def asked(self, key: str) -> int:
        """How many times the recorded unit asked for `key` (its pin's `attempts`); 0 when it has no pin."""
        pin = self._pins.get(key)
        return 0 if pin is None else pin.attempts

    @override
    def recorded(self, key: str) -> JSONValue | None:
        """The result the recording holds under `key`, read without answering it; None for none, or a failure's."""
        pin = self._pins.get(key)
        if pin is None or pin.failed or key in self._ambiguous:
            return None
        return json.loads(pin.raw_text)

    @property
    def hits(self) -> int:
        """How many resolves were answered from the recording."""
        return self._hits

    def unused(self) -> dict[str, str]:
        """The recorded keys no resolve has asked for, each with its kind, in recorded order: a stale recording."""
        return {key: pin.kind for key, pin in self._pins.items() if key not in self._used}

    @property
    def units(self) -> tuple[str, ...]:
        """The ids of the units of work whose pins this replay answers from, in recorded order."""
        if self._units is None:
            pins = self._pins
            # A recording opened through its index knows its units without reading every pin.
            units = pins.units if isinstance(pins, IndexedPins) else dict.fromkeys(pin.unit_id for pin in pins.values())
            self._units = tuple(units)
        return self._units

    @property
    def into(self) -> PinLedger | None:
        """The ledger fresh draws go to under `on_miss="record"`; None under strict replay."""
        return self._into

    @property
    @override
    def draws_live(self) -> bool:
        """False: a replay reaches the world only on a miss, and only under `on_miss="record"`."""
        return False

    @property
    @override
    def replays(self) -> bool:
        """True: it says how many times its recording asked for a key (`asked`)."""
        return True

    @property
    @override
    def draws_into(self) -> PinLedger | None:
        """Where its fresh draws land (`into`): the new unit under `on_miss="record"`; None under strict replay."""
        return self._into

    @property
    @override
    def unit(self) -> str | None:
        """The unit its runs are positions in: the new unit when recording anew, else the one unit it answers from.

        None for a strict replay of several units (or none), which cannot tell whose position a run is.
        """
        if self._into is not None:
            # Recording anew: the runs are the new unit's, which a later strict replay of it will ask for.
            return self._into.unit_id
        units = self.units
        return units[0] if len(units) == 1 else None

    @override
    def answering_position(self, key: str) -> Resolver | None:
        """Who answers a position's pin (a run's id, its clock): this replay where it holds it, else its new unit.

        A position the recording does not answer is never a miss: it is drawn into the new unit under
        `on_miss="record"`, and unpinned (None) under strict replay or when the replay spans several units.
        """
        if self.unit is None:
            return None
        return self if key in self._pins else self._into

    @property
    def ambiguous(self) -> Mapping[str, tuple[str, ...]]:
        """Keys pinned with different results by several units, with those units' ids."""
        return dict(self._ambiguous)

    @property
    @override
    def divergence(self) -> Divergence | None:
        """The first miss, if the run has left the recording."""
        return self._divergence

    def _answer(self, key: str) -> PinText | None:
        if key in self._ambiguous:
            raise AmbiguousPin(key, unit_ids=list(self._ambiguous[key]))
        pin = self._pins.get(key)
        return None if pin is None else self._taken(key, pin)

    def _taken(self, key: str, pin: PinText) -> PinText:
        """Count `pin` as the answer to `key`, and adopt it into the new unit under `on_miss="record"`."""
        self._hits += 1
        self._used.add(key)
        if self._into is not None:
            self._into.adopt(key, kind=pin.kind, raw=pin.raw_text, fingerprint=pin.fingerprint, failed=pin.failed)
        return pin

    def _untraced_hit(self, key: str) -> PinText | None:
        """The pin answering `key`, counted as `_answer` counts it, when no span is to be made; else None.

        A replay's hits are most of what it does: answered here they skip the span's context and its generator.
        An ambiguous key, a miss or a traced resolve returns None, for `_answering` to say so in its span.
        """
        if key in self._ambiguous:
            return None
        pin = self._pins.get(key)
        return None if pin is None or spans_made() else self._taken(key, pin)

    def _miss(self, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> PinLedger:
        if self._into is not None and self._divergence is not None:
            # Record mode past its divergence: only the first miss is described, so later ones skip the comparison.
            return self._into
        divergence = self._compare(key, kind, fingerprint)
        if self._divergence is None:
            self._divergence = divergence
        if self._into is None:
            raise PinMiss(divergence)
        self._into.note_divergence(self._divergence)
        return self._into

    def _missed(self, span: PinSpan, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> PinLedger:
        """`_miss`, told to the key's span: a strict miss with what moved, a recorded one as missed then drawn."""
        try:
            ledger = self._miss(key, kind, fingerprint)
        except PinMiss as e:
            span.set("missed", moved=e.divergence.moved)
            raise
        span.set("missed", moved=self._divergence.moved if self._divergence is not None else ())
        return ledger

    @contextmanager
    def _answering(
        self, key: str, kind: str, fingerprint: Mapping[str, str] | None, *, current: bool = True
    ) -> Generator[PinText | PinLedger]:
        """In `key`'s span: the pin answering it, or the ledger drawing it after a miss (strict: `PinMiss`)."""
        with pin_span(kind, key, self._unit_of(key), current=current) as span:
            pin = self._answer(key)
            if pin is None:
                yield self._missed(span, key, kind, fingerprint)
            else:
                span.set("answered", attempts=pin.attempts)
                yield pin

    def _unit_of(self, key: str) -> str | None:
        """The unit a span of `key` names: the recorded pin's unit, else the unit a record-mode miss draws into."""
        pin = self._pins.get(key)
        if pin is not None:
            return pin.unit_id
        return self._into.unit_id if self._into is not None else None

    def _compare(self, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> Divergence:
        divergence = diverged_at(key, kind, fingerprint, after_hits=self._hits, recorded=self._recorded(kind))
        note = versions_note(self.recorded_with, stamping=self._stamping)
        return divergence if note is None else divergence.noted(note)

    def _recorded(self, kind: str) -> Iterator[tuple[str, str, Mapping[str, str] | None]]:
        """The recorded calls of `kind` with their fingerprints, parsed on first use and kept for the next miss."""
        parsed = self._fingerprints
        for recorded_key, pin in self._pins.items():
            if pin.kind != kind or pin.fingerprint is None:
                continue
            fingerprint = parsed.get(recorded_key)
            if fingerprint is None:
                fingerprint = parsed[recorded_key] = json.loads(pin.fingerprint)
            yield recorded_key, pin.kind, fingerprint

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
        """Answer `key` from the recording; on a miss raise `PinMiss` (strict) or draw through the ledger (record)."""
        hit = self._untraced_hit(key)
        if hit is not None:
            return answered(hit.raw_text, failed=hit.failed, interpret=interpret, codec=failure)
        with self._answering(key, kind, fingerprint) as found:
            if isinstance(found, PinText):
                return answered(found.raw_text, failed=found.failed, interpret=interpret, codec=failure)
            return found.resolve(
                key, kind=kind, effect=effect, interpret=interpret, fingerprint=fingerprint, failure=failure
            )

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
        """Like `resolve`, with an asynchronous effect."""
        hit = self._untraced_hit(key)
        if hit is not None:
            return answered(hit.raw_text, failed=hit.failed, interpret=interpret, codec=failure)
        with self._answering(key, kind, fingerprint) as found:
            if isinstance(found, PinText):
                return answered(found.raw_text, failed=found.failed, interpret=interpret, codec=failure)
            return await found.aresolve(
                key, kind=kind, effect=effect, interpret=interpret, fingerprint=fingerprint, failure=failure
            )

    @override
    def resolve_held(
        self, key: str, *, kind: str, effect: Callable[[], object], interpret: Callable[[JSONValue], T]
    ) -> T:
        """Answer a run-level pin (a run's id, its place) as `resolve` does, with no closure around its effect."""
        hit = self._untraced_hit(key)
        if hit is not None:
            return answered(hit.raw_text, failed=hit.failed, interpret=interpret, codec=None)
        return self.resolve(key, kind=kind, effect=effect, interpret=interpret)

    @override
    async def aresolve_held(
        self, key: str, *, kind: str, effect: Callable[[], object], interpret: Callable[[JSONValue], T]
    ) -> T:
        """Answer a run's timestamps as `aresolve` does; a hit without wrapping the effect in a coroutine."""
        hit = self._untraced_hit(key)
        if hit is not None:
            return answered(hit.raw_text, failed=hit.failed, interpret=interpret, codec=None)
        return await super().aresolve_held(key, kind=kind, effect=effect, interpret=interpret)

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
        """Answer a streamed call from the recording; a miss is strict or recorded as for `resolve`."""
        with self._answering(key, kind, fingerprint, current=False) as found:
            answer = (
                answered_stream(found.raw_text, failed=found.failed, interpret=interpret, codec=failure)
                if isinstance(found, PinText)
                else found.resolve_stream(
                    key,
                    kind=kind,
                    effect=effect,
                    capture=capture,
                    interpret=interpret,
                    fingerprint=fingerprint,
                    failure=failure,
                )
            )
            async with answer as draw:
                yield draw


def _gathered(texts: Iterable[PinText], unit_id: str | None) -> tuple[dict[str, PinText], Conflicts]:
    """The pins by key (the first of a key answers; all, or one unit's) and the keys several units pinned otherwise."""
    pins: dict[str, PinText] = {}
    # Only keys pinned by more than one unit get a list of units: most logs have none.
    units: dict[str, list[str]] = {}
    ambiguous: set[str] = set()
    for pin in texts:
        if unit_id is not None and pin.unit_id != unit_id:
            continue
        key = pin.key
        # Interned: a log repeats a handful of kinds and unit ids across thousands of pins. The fingerprint
        # stays text, parsed only when a miss compares fingerprints, so a replay that hits never pays.
        found = PinText(
            unit_id=sys.intern(pin.unit_id),
            key=key,
            kind=sys.intern(pin.kind),
            raw_text=pin.raw_text,
            attempts=pin.attempts,
            fingerprint=pin.fingerprint,
            failed=pin.failed,
        )
        seen = pins.get(key)
        if seen is None:
            pins[key] = found
            continue
        units.setdefault(key, [seen.unit_id]).append(found.unit_id)
        if seen.raw_text != found.raw_text or seen.failed != found.failed:
            ambiguous.add(key)
    return pins, {key: tuple(units[key]) for key in sorted(ambiguous)}
