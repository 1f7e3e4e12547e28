"""Failed draws as pins: how a failure is kept with its key, and how it is raised again on reuse and replay."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from anagrapheus.errors import PinnedFailure
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.ordered import parsed_json
from anagrapheus.timeline.resolving.resolver import StreamDraw

if TYPE_CHECKING:
    from anagrapheus.timeline.resolving.resolver import FailureCodec

T = TypeVar("T")

__all__ = [
    "answered",
    "answered_stream",
    "failed_raw",
    "failure_of",
    "replayed_failure",
    "scratch_kind",
    "stored_kind",
]

# A failed draw waits in scratch under its kind with this suffix, so the store needs no column of its own for it.
_FAILED_SUFFIX = "!failed"


def scratch_kind(kind: str, *, failed: bool) -> str:
    """The kind a draw is kept under in scratch: a failed draw's carries the failure mark."""
    return kind + _FAILED_SUFFIX if failed else kind


def stored_kind(kind: str) -> tuple[str, bool]:
    """Split a scratch kind into the draw's kind and whether it failed."""
    if kind.endswith(_FAILED_SUFFIX):
        return kind[: -len(_FAILED_SUFFIX)], True
    return kind, False


def failed_raw(error: JSONValue, *, captured: object = None, has_captured: bool = False) -> dict[str, object]:
    """The raw JSON of a failed draw: the codec's description of the error, and what a stream captured before it."""
    if has_captured:
        return {"error": error, "captured": captured}
    return {"error": error}


def failure_of(raw: JSONValue, codec: FailureCodec | None) -> tuple[BaseException, JSONValue | None, bool]:
    """Rebuild a failed draw's exception, and return it with what a stream captured (and whether it captured)."""
    error: JSONValue = raw.get("error") if isinstance(raw, dict) else raw
    captured = raw.get("captured") if isinstance(raw, dict) else None
    has_captured = isinstance(raw, dict) and "captured" in raw
    if codec is not None:
        return codec.rebuild(error), captured, has_captured
    # Without a codec the caller cannot say what the exception was: name it from the record, typed, never silent.
    type_name = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return (
        PinnedFailure(error, type_name=str(type_name or "an unknown exception"), message=str(message or "")),
        captured,
        has_captured,
    )


@asynccontextmanager
async def replayed_failure(
    raw: JSONValue, interpret: Callable[[JSONValue], T], codec: FailureCodec | None
) -> AsyncGenerator[StreamDraw[Any, T]]:
    """Answer a streamed call whose pinned draw failed: what it streamed first, then its failure; or the failure now."""
    error, captured, has_captured = failure_of(raw, codec)
    if not has_captured:
        raise error
    yield StreamDraw(live=None, pinned=interpret(captured), failure=error)


def answered(raw_text: str, *, failed: bool, interpret: Callable[[JSONValue], T], codec: FailureCodec | None) -> T:
    """A pin's answer, on reuse and on replay: its value, or the failure it pinned, raised where the draw raised it."""
    if failed:
        raise failure_of(parsed_json(raw_text), codec)[0]
    return interpret(parsed_json(raw_text))


@asynccontextmanager
async def answered_stream(
    raw_text: str, *, failed: bool, interpret: Callable[[JSONValue], T], codec: FailureCodec | None
) -> AsyncGenerator[StreamDraw[Any, T]]:
    """A streamed call's answer from its pin, as `answered` gives a call's: see `replayed_failure` for a failed one."""
    if not failed:
        yield StreamDraw(live=None, pinned=interpret(parsed_json(raw_text)))
        return
    async with replayed_failure(parsed_json(raw_text), interpret, codec) as draw:
        yield draw
