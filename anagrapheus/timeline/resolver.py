"""The resolver protocol: one interface for live pinning and for replay."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from anagrapheus.timeline.canonical import JSONValue

__all__ = ["FailureCodec", "PinResolver", "StreamDraw"]

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


@runtime_checkable
class PinResolver(Protocol):
    """Answers a keyed effect: draws it once (live) or answers it from pins (reuse, replay).

    Calling code never knows which implementation it runs under. `effect` draws the raw,
    JSON-shaped result; `interpret` turns the raw value, exactly as it comes back from the
    log, into what the caller gets, on every path. `fingerprint` is an optional compact
    per-field digest of the key material, kept with the pin so a later miss can say what moved.
    With `failure=`, an effect that raises is pinned as its failure and raised again on reuse and
    replay, as it was; without it, a failed draw pins nothing.
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
