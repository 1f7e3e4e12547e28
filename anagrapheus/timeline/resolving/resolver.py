"""The resolver: one abstract base class for live pinning and for replay, its optional parts members with defaults."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, Self, SupportsIndex, TypeVar, cast, runtime_checkable

from typing_extensions import override

from anagrapheus.deprecation import deprecated
from anagrapheus.errors import ResolverNotPicklable
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import PendingEvent

__all__ = [
    "Attachment",
    "Attachments",
    "DelegatingResolver",
    "FailureCodec",
    "PinResolver",
    "ProcessBound",
    "Resolver",
    "RunServer",
    "StreamDraw",
    "as_resolver",
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

    @override
    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refuse with a typed error: the default reaches a lock and says only `cannot pickle '_thread.lock'`."""
        raise ResolverNotPicklable(type(self).__name__)

    def __copy__(self) -> Self:
        """A shallow copy sharing every member (what `copy.copy` made before pickling was refused)."""
        clone = object.__new__(type(self))
        vars(clone).update(vars(self))
        return clone


class RunServer(Protocol):
    """A resolver that picks its unit for each run: `Pinning` runs each run through `serve` (`serves_each_run`).

    The run's context is the agent framework's (pydantic-ai's `RunContext`), which the timeline does not name.
    """

    def ledger_for(self, ctx: Any) -> Resolver:
        """What answers the run `ctx`: the resolver whose unit its ids, times and inputs belong to."""
        ...

    async def serve(
        self, ctx: Any, run: Callable[[], Awaitable[T]], *, started: Callable[[Resolver, Any], object]
    ) -> T:
        """Run `run` as a run of `ctx`'s unit, calling `started` with what answers it before the run begins."""
        ...


class Resolver(ProcessBound, ABC):
    """Answers a keyed effect: draws it once (live) or answers it from pins (reuse, replay).

    Calling code never knows which implementation it runs under. `effect` draws the raw, JSON-shaped
    result; `interpret` turns the raw value, exactly as it comes back from the log, into what the caller
    gets, on every path. `fingerprint` is a compact per-field digest of the key material, kept with the pin
    so a later miss can say what moved. With `failure=`, an effect that raises is pinned as its failure and
    raised again on reuse and replay; without it, a failed draw pins nothing. Every other member says what
    the resolver is, for the layers above, and has a default: a live resolver with no unit of its own.
    """

    @abstractmethod
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

    @abstractmethod
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

    @abstractmethod
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

    @property
    def draws_live(self) -> bool:
        """Whether it may reach the world without a miss first: False for a replay."""
        return True

    @property
    def unit(self) -> str | None:
        """The one unit of work its runs are positions in; None when it has none of its own."""
        return None

    @property
    def draws_into(self) -> Resolver | None:
        """The resolver whose unit its fresh draws land in (a ledger: itself); None when it records nothing."""
        return None

    @property
    def replays(self) -> bool:
        """Whether it replays a recording, and so says how many times the recording asked for a key (`asked`)."""
        return False

    @property
    def divergence(self) -> Divergence | None:
        """Where a replay left its recording (its first miss), or the one noted on a ledger; None before it has."""
        return None

    def answering_position(self, key: str) -> Resolver | None:
        """Who answers a pin keyed on a position in the unit (a run's id, its clock), never leaving a recording.

        A replay answers it from its pin, or draws it into its new unit without marking a divergence, or
        says None: draw it unpinned. By default the resolver answers it itself.
        """
        del key
        return self

    def asked(self, key: str) -> int:
        """How many times the recording it replays asked for `key`; 0 without a pin of it or a recording."""
        del key
        return 0

    def recorded(self, key: str) -> JSONValue | None:
        """What the recording it replays holds under `key`, read without answering it; None if it holds none."""
        del key
        return None

    def answered_within(self, keys: Iterable[str]) -> None:
        """Take note that a draw answered from its pin asked `keys` when it ran; only a replay does."""
        del keys

    def note_event(self, event: PendingEvent) -> None:
        """Note `event` (a run's inputs, say) on its unit, committed after its pins; dropped if it records none."""
        del event

    @property
    def attachments(self) -> Attachments | None:
        """What the layers above keep for this resolver (the provider's run clocks); None where it keeps nothing.

        Made on first use, so a subclass need not call a base `__init__`.
        """
        held: dict[str, object] = vars(self)
        found = held.get("_attachments")
        if found is None:
            # `setdefault` is atomic: two threads asking at once get the one that landed first.
            found = held.setdefault("_attachments", Attachments())
        return cast(Attachments, found)

    def attached(self, attachment: Attachment[T], make: Callable[[], T]) -> T | None:
        """What the layers above keep for it under `attachment` (made by `make` on first use); None without any."""
        held = self.attachments
        return None if held is None else held.get(attachment, make)

    @property
    def serves_each_run(self) -> RunServer | None:
        """What serves each run when it picks its unit per run (`UnitPerRun`); None for a resolver of one unit."""
        return None

    def resolve_held(
        self, key: str, *, kind: str, effect: Callable[[], object], interpret: Callable[[JSONValue], T]
    ) -> T:
        """Resolve a run-level pin (a run's id, its place) whose effect reads only the process; `resolve` by default.

        A ledger holds such a fresh draw in memory and writes it in its unit's next store step, off the calling
        thread (see `PinLedger.resolve_held`).
        """
        return self.resolve(key, kind=kind, effect=effect, interpret=interpret)

    async def aresolve_held(
        self, key: str, *, kind: str, effect: Callable[[], object], interpret: Callable[[JSONValue], T]
    ) -> T:
        """Like `resolve_held`, from async code (a run's timestamps); `aresolve` by default."""

        async def drawn() -> object:
            return effect()

        return await self.aresolve(key, kind=kind, effect=drawn, interpret=interpret)

    @property
    def holding(self) -> bool:
        """Whether it holds drawn results its store has not taken yet (`resolve_held`'s); False by default."""
        return False

    def flush_held(self) -> None:
        """Write what it holds (see `holding`), durably, on the calling thread; nothing by default."""


PinResolver = Resolver
"""The resolver contract's name before it was an abstract base class; the same class."""


class DelegatingResolver(Resolver):
    """A resolver that answers each key through another one it picks (`_target`), unchanged otherwise.

    It says nothing of itself: a live resolver with no unit of its own, whatever the resolver it picks
    is. It carries `attachments` of its own: the resolvers it picks vary by key.
    """

    @abstractmethod
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        """The resolver that answers `key` of `kind`, and the key to ask it for."""

    def _pick(self, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> tuple[Resolver, str]:
        """`_target`, for a resolver that also reads what was asked (the request's fingerprint) to pick."""
        del fingerprint
        return self._target(key, kind)

    # The three ways of resolving pass every option on as given: their signatures are `Resolver`'s.
    @override
    def resolve(self, key: str, *, kind: str, **options: Any) -> Any:
        """Resolve `key` through the resolver `_target` picks, with a synchronous effect."""
        resolver, key = self._pick(key, kind, options.get("fingerprint"))
        return resolver.resolve(key, kind=kind, **options)

    @override
    async def aresolve(self, key: str, *, kind: str, **options: Any) -> Any:
        """Resolve `key` through the resolver `_target` picks, with an asynchronous effect."""
        resolver, key = self._pick(key, kind, options.get("fingerprint"))
        return await resolver.aresolve(key, kind=kind, **options)

    @override
    def resolve_stream(self, key: str, *, kind: str, **options: Any) -> Any:
        """Resolve a streamed `key` through the resolver `_target` picks."""
        resolver, key = self._pick(key, kind, options.get("fingerprint"))
        return resolver.resolve_stream(key, kind=kind, **options)


def as_resolver(resolver: object) -> Resolver:
    """`resolver` as a `Resolver`: itself when it is one; one written to the old protocol adapted, with a warning.

    The entry points (`PinnedModel`, `pinned_tool`, `Pinning`, `mint_entity_id`) call it once, on what they are
    given; everything below them reads a `Resolver`'s members.
    """
    if isinstance(resolver, Resolver):
        return resolver
    deprecated(
        f"a resolver that does not subclass anagrapheus.timeline.Resolver ({type(resolver).__qualname__})",
        "subclass Resolver (anagrapheus.timeline.resolving.resolver) and override the members it says",
        stacklevel=4,  # the line that handed it to an entry point
    )
    return _Adapted(resolver)


class _Adapted(Resolver):
    """A resolver written to the old protocol (three methods, and traits read where present), as a `Resolver`.

    The one place that reads a resolver's traits with `getattr` and a default: each was optional.
    """

    def __init__(self, said: object) -> None:
        self._said: Any = said

    def _adapted(self, other: object) -> Resolver | None:
        """A resolver the adapted one names (where positions or draws land) as a `Resolver`; itself stays this one."""
        if other is None:
            return None
        return self if other is self._said else other if isinstance(other, Resolver) else _Adapted(other)

    @override
    def resolve(self, key: str, *, kind: str, **options: Any) -> Any:
        """The adapted resolver's own `resolve`."""
        return self._said.resolve(key, kind=kind, **options)

    @override
    async def aresolve(self, key: str, *, kind: str, **options: Any) -> Any:
        """The adapted resolver's own `aresolve`."""
        return await self._said.aresolve(key, kind=kind, **options)

    @override
    def resolve_stream(self, key: str, *, kind: str, **options: Any) -> Any:
        """The adapted resolver's own `resolve_stream`."""
        return self._said.resolve_stream(key, kind=kind, **options)

    @property
    @override
    def draws_live(self) -> bool:
        """What it says, else live."""
        return bool(getattr(self._said, "draws_live", True))

    @property
    @override
    def unit(self) -> str | None:
        """What it says, else none."""
        return getattr(self._said, "unit", None)

    @property
    @override
    def draws_into(self) -> Resolver | None:
        """What it says, else none."""
        return self._adapted(getattr(self._said, "draws_into", None))

    @property
    @override
    def replays(self) -> bool:
        """Whether it says how many times a recording asked for a key (an `asked` method)."""
        return callable(getattr(self._said, "asked", None))

    @property
    @override
    def divergence(self) -> Divergence | None:
        """What it says, else none."""
        return getattr(self._said, "divergence", None)

    @override
    def answering_position(self, key: str) -> Resolver | None:
        """What it says, else itself."""
        said = getattr(self._said, "answering_position", None)
        return self if said is None else self._adapted(said(key))

    @override
    def asked(self, key: str) -> int:
        """What it says, else 0."""
        return int(self._said.asked(key)) if self.replays else 0

    @override
    def recorded(self, key: str) -> JSONValue | None:
        """What it says, else none."""
        said = getattr(self._said, "recorded", None)
        return cast("JSONValue | None", said(key)) if callable(said) else None

    @override
    def answered_within(self, keys: Iterable[str]) -> None:
        """Passed on where it takes note."""
        said = getattr(self._said, "answered_within", None)
        if said is not None:
            said(keys)

    @override
    def note_event(self, event: PendingEvent) -> None:
        """Passed on where it takes note, else dropped."""
        said = getattr(self._said, "note_event", None)
        if said is not None:
            said(event)

    @property
    @override
    def attachments(self) -> Attachments | None:
        """Its own where it carries them; else none, so its runs' ids and times are drawn fresh and unpinned."""
        return getattr(self._said, "attachments", None)

    @property
    @override
    def serves_each_run(self) -> RunServer | None:
        """What it says, else none."""
        return getattr(self._said, "serves_each_run", None)
