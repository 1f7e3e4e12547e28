"""The resolver protocol: one interface for live pinning and for replay."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, Self, SupportsIndex, TypeVar, cast, runtime_checkable

from anagrapheus.errors import ResolverNotPicklable
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.events import PendingEvent

__all__ = [
    "Attachment",
    "Attachments",
    "DelegatingResolver",
    "FailureCodec",
    "PinResolver",
    "ProcessBound",
    "StreamDraw",
    "answered_within",
    "answering_position",
    "asked",
    "attached",
    "draws_into",
    "draws_live",
    "note_event",
    "recorded",
    "replays",
    "unit_of",
]

T = TypeVar("T")
S = TypeVar("S")


@dataclass(slots=True)
class StreamDraw(Generic[S, T]):
    """What `resolve_stream` yields: a live stream to consume, or the pinned value that answers it."""

    live: S | None
    """The live stream on a first draw; it is pinned through `capture` when the context exits."""
    pinned: T | None
    """The interpreted pinned value when the key was answered from a pin (reuse or replay)."""
    failure: BaseException | None = None
    """The pinned failure to raise once `pinned` (what the stream produced before it failed) is consumed."""


@runtime_checkable
class FailureCodec(Protocol):
    """Says how a failed draw is pinned and how it is raised again; given to a resolver with `failure=`."""

    def describe(self, error: BaseException) -> JSONValue | None:
        """Return the failure as JSON to pin, or None for an exception that is not the draw's outcome."""
        ...

    def rebuild(self, record: JSONValue) -> BaseException:
        """Return the exception a pinned failure record describes, to raise where the draw failed."""
        ...


@dataclass(frozen=True, eq=False)
class Attachment(Generic[T]):
    """The name of one value the layers above keep per resolver, in its `Attachments`; compared by identity."""

    name: str
    """What the value is, for a reader."""


class Attachments:
    """What the layers above keep for one resolver (the provider's run clocks): made on first ask, gone with it.

    The timeline never looks inside: each value is named by an `Attachment` its layer defines and holds.
    """

    def __init__(self) -> None:
        self._values: dict[object, object] = {}
        self._lock = threading.Lock()

    def get(self, attachment: Attachment[T], make: Callable[[], T]) -> T:
        """The value kept under `attachment`, made with `make` on the first ask (once, whichever thread asks)."""
        # Read without the lock first: it is asked on every model request, and a value, once made, never changes.
        found = self._values.get(attachment, _UNMADE)
        if found is _UNMADE:
            with self._lock:
                found = self._values.get(attachment, _UNMADE)
                if found is _UNMADE:
                    found = self._values[attachment] = make()
        return cast(T, found)


_UNMADE = object()
"""What `Attachments` holds under an attachment not yet made (a made value may be None)."""


class ProcessBound:
    """A resolver of the process that made it: pickling or deep-copying one raises `ResolverNotPicklable`.

    It holds locks, and a ledger an open store, which no other process can use; the typed error says what to
    hand over instead. A shallow `copy.copy` still shares what the original holds, as it always did.
    """

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refuse with a typed error: the default reaches a lock and says only `cannot pickle '_thread.lock'`."""
        raise ResolverNotPicklable(type(self).__name__)

    def __copy__(self) -> Self:
        """A shallow copy sharing every member (what `copy.copy` made before pickling was refused)."""
        clone = object.__new__(type(self))
        vars(clone).update(vars(self))
        return clone


@runtime_checkable
class PinResolver(Protocol):
    """Answers a keyed effect: draws it once (live) or answers it from pins (reuse, replay).

    Calling code never knows which implementation it runs under. `effect` draws the raw,
    JSON-shaped result; `interpret` turns the raw value, exactly as it comes back from the
    log, into what the caller gets, on every path. `fingerprint` is an optional compact
    per-field digest of the key material, kept with the pin so a later miss can say what moved.
    With `failure=`, an effect that raises is pinned as its failure and raised again on reuse and
    replay, as it was; without it, a failed draw pins nothing.

    A resolver may also say what it is, for the code that runs above it: `draws_live`, `unit`,
    `draws_into`, `answering_position(key)`, `asked(key)`, `answered_within(keys)` and
    `note_event(event)`, read through the functions of the same names in this module. Each is
    optional: a resolver that does not say is a live one with no unit of its own that records
    nothing beside its pins (as a `DelegatingResolver` is), so a resolver written before they
    existed keeps working unchanged. It may also carry `attachments` (an `Attachments`), where the
    layers above keep state of theirs for as long as it lives (read with `attached`).
    """

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
        """Resolve `key` with a synchronous effect."""
        ...

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
        """Resolve `key` with an asynchronous effect."""
        ...

    def resolve_stream(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> AbstractAsyncContextManager[StreamDraw[S, T]]:
        """Resolve `key` with a streaming effect; a live stream is pinned as `capture(stream)` on exit, even failed."""
        ...


class DelegatingResolver(ProcessBound, ABC):
    """A resolver that answers each key through another one it picks (`_target`), unchanged otherwise.

    It says nothing of itself (see `PinResolver`): a live resolver with no unit of its own, whatever
    the resolver it picks is. It carries `attachments` of its own: the resolvers it picks vary by key.
    """

    @property
    def attachments(self) -> Attachments:
        """What the layers above keep for this resolver; made on first use (a subclass need not call a base init)."""
        held: dict[str, object] = vars(self)
        found = held.get("_attachments")
        if found is None:
            # `setdefault` is atomic: two threads asking at once get the one that landed first.
            found = held.setdefault("_attachments", Attachments())
        return cast(Attachments, found)

    @abstractmethod
    def _target(self, key: str, kind: str) -> tuple[PinResolver, str]:
        """The resolver that answers `key` of `kind`, and the key to ask it for."""

    def _pick(self, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> tuple[PinResolver, str]:
        """`_target`, for a resolver that also reads what was asked (the request's fingerprint) to pick."""
        del fingerprint
        return self._target(key, kind)

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
        """Resolve `key` through the resolver `_target` picks, with a synchronous effect."""
        resolver, key = self._pick(key, kind, fingerprint)
        return resolver.resolve(
            key, kind=kind, effect=effect, interpret=interpret, fingerprint=fingerprint, failure=failure
        )

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
        """Resolve `key` through the resolver `_target` picks, with an asynchronous effect."""
        resolver, key = self._pick(key, kind, fingerprint)
        return await resolver.aresolve(
            key, kind=kind, effect=effect, interpret=interpret, fingerprint=fingerprint, failure=failure
        )

    def resolve_stream(
        self,
        key: str,
        *,
        kind: str,
        effect: Callable[[], AbstractAsyncContextManager[S]],
        capture: Callable[[S], object],
        interpret: Callable[[JSONValue], T],
        fingerprint: Mapping[str, str] | None = None,
        failure: FailureCodec | None = None,
    ) -> AbstractAsyncContextManager[StreamDraw[S, T]]:
        """Resolve a streamed `key` through the resolver `_target` picks."""
        resolver, key = self._pick(key, kind, fingerprint)
        return resolver.resolve_stream(
            key,
            kind=kind,
            effect=effect,
            capture=capture,
            interpret=interpret,
            fingerprint=fingerprint,
            failure=failure,
        )


# What a resolver says of itself. Read with `getattr` and a default, because each is optional: the protocol's
# three methods are all a resolver must have (see `PinResolver`).


def draws_live(resolver: PinResolver) -> bool:
    """Whether `resolver` may reach the world without a miss first: False for a replay, True unless it says."""
    return cast(bool, getattr(resolver, "draws_live", True))


def unit_of(resolver: PinResolver) -> str | None:
    """The one unit of work `resolver`'s runs are positions in (`unit`); None when it has none of its own."""
    return cast("str | None", getattr(resolver, "unit", None))


def answering_position(resolver: PinResolver, key: str) -> PinResolver | None:
    """Who answers a pin keyed on a position in the unit (a run's id, its clock), never leaving a recording.

    A replay answers it from its pin, or draws it into its new unit without marking a divergence, or
    says None: draw it unpinned. A resolver that does not say answers it itself.
    """
    said = getattr(resolver, "answering_position", None)
    return resolver if said is None else cast("PinResolver | None", said(key))


def replays(resolver: PinResolver) -> bool:
    """Whether `resolver` replays a recording: it says how many times the recording asked for a key (`asked`)."""
    # Not a method of the protocol: a resolver of the application's own may use the name for something else.
    return callable(getattr(resolver, "asked", None))


def asked(resolver: PinResolver, key: str) -> int:
    """How many times the recording `resolver` replays asked for `key`; 0 without a pin of it or a recording."""
    return cast(int, cast(Any, resolver).asked(key)) if replays(resolver) else 0


def recorded(resolver: PinResolver, key: str) -> JSONValue | None:
    """What the recording `resolver` replays holds under `key`, read without answering it; None if it holds none."""
    said = getattr(resolver, "recorded", None)
    return cast("JSONValue | None", said(key)) if callable(said) else None


def answered_within(resolver: PinResolver, keys: Iterable[str]) -> None:
    """Tell `resolver` a draw answered from its pin asked `keys` when it ran; only a replay takes note."""
    said = getattr(resolver, "answered_within", None)
    if said is not None:
        said(keys)


def draws_into(resolver: PinResolver) -> PinResolver | None:
    """The resolver whose unit `resolver`'s fresh draws land in (a ledger: itself); None when it records nothing."""
    return cast("PinResolver | None", getattr(resolver, "draws_into", None))


def attached(resolver: PinResolver, attachment: Attachment[T], make: Callable[[], T]) -> T | None:
    """The value `resolver` keeps under `attachment` (made with `make` on first ask); None if it keeps nothing."""
    said = getattr(resolver, "attachments", None)
    return None if said is None else cast(Attachments, said).get(attachment, make)


def note_event(resolver: PinResolver, event: PendingEvent) -> None:
    """Note `event` (a run's inputs, say) on `resolver`'s unit, committed after its pins; dropped if it records none."""
    said = getattr(resolver, "note_event", None)
    if said is not None:
        said(event)
