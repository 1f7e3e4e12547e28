"""PinnedStreamedResponse: a stream rebuilt from a pinned response, so streaming consumers work under replay.

A streamed pin keeps, beside the response, where its chunks fell (`CHUNKS`): one entry per event the provider
yielded, `[part index, end]`, the end an offset into that part's content (a text's or thinking's `content`, a
tool call's `args` text), so the first entry of a part is its start and each later one a delta up to that offset.
An event no offset describes (a start that is not a prefix of the part, a delta carrying more than content) is
kept whole, as `{"event": <its JSON>}`. A last entry `"end"` says the provider's events ran out there (a consumer
may still have stopped before the part end pydantic-ai adds after them). The entries are part of the stored
answer, never of the key: the pin still answers a plain request, which reads the response and ignores them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

import anyio
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.messages import (
    BaseToolCallPart,
    ModelRequestAttempt,
    ModelResponse,
    ModelResponsePart,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPartDelta,
)
from pydantic_ai.models import CompletedStreamedResponse, ModelRequestParameters
from typing_extensions import override

from anagrapheus.errors import PartialPin, PinResultError
from anagrapheus.provider.compat import stamped_call_parts
from anagrapheus.timeline.canonical import JSONValue

__all__ = [
    "CHUNKS",
    "PARTIAL_STATES",
    "READ_ON_GRACE",
    "PinnedStreamedResponse",
    "StreamAnswer",
    "attempt_times_of",
    "attempt_times_raw",
    "chunks_in",
    "chunks_of",
    "replayed_events",
    "stream_answer",
    "timed_attempts",
]

PARTIAL_STATES = frozenset({"incomplete", "interrupted"})
"""States of a response whose stream stopped before completing: the consumer stopped, it failed or was cancelled."""

READ_ON_GRACE = 1.0
"""Seconds a replayed stream that stopped early waits at its end before raising `PartialPin`.

A debouncing consumer (pydantic-ai's `stream_text()` groups deltas for 0.1 s by default) reads ahead of
what it hands on, and would meet the error before handing on what the live run read. Waiting lets it hand
that on, so a run that stopped there stops there again; only a consumer that reads on meets `PartialPin`.
"""

CHUNKS = "$anagrapheus.chunks"
"""Where a streamed pin keeps its chunk boundaries, beside the response's ordered text."""

ATTEMPTS_TIMED = "$anagrapheus.attempt_times"
"""Where a streamed pin keeps the times of the failed attempts a `FallbackModel` around its model handed it over
with: a fallback times them by the wall clock, and a replayed stream reports them as the recorded one did."""

ENDED = "end"
"""The last entry of a stream's boundaries whose provider reached the end of its events."""

_events: TypeAdapter[ModelResponseStreamEvent] = TypeAdapter(ModelResponseStreamEvent)


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """A pinned response read for a stream: the response, and where its chunks fell (None: not recorded)."""

    response: ModelResponse
    """The response the stream built, as pinned."""
    chunks: list[JSONValue] | None
    """The recorded boundaries (`CHUNKS`), or None for a pin drawn by a plain request or before they were kept."""
    attempt_times: list[tuple[datetime, timedelta]] | None = None
    """The times of the failed attempts a fallback handed the recorded stream over with (`ATTEMPTS_TIMED`)."""


def attempt_times_raw(attempts: Sequence[ModelRequestAttempt]) -> JSONValue:
    """Failed attempts' times as a pin keeps them: `[[timestamp, seconds], ...]`."""
    return [[a.timestamp.isoformat(), a.duration.total_seconds()] for a in attempts]


def attempt_times_of(raw: JSONValue, *, kind: str) -> list[tuple[datetime, timedelta]]:
    """Read what `attempt_times_raw` wrote, or raise `PinResultError` naming the pin `kind` that held it."""
    if not isinstance(raw, list):
        raise PinResultError(f"an {kind} pin holds {type(raw).__name__}, not a list of [timestamp, seconds]")
    times: list[tuple[datetime, timedelta]] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise PinResultError(f"an {kind} pin holds {item!r}, not [timestamp, seconds]")
        seconds = item[1]
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise PinResultError(f"an {kind} pin holds {item!r}, not [timestamp, seconds]")
        times.append((datetime.fromisoformat(item[0]), timedelta(seconds=seconds)))
    return times


def timed_attempts(
    attempts: list[ModelRequestAttempt], times: Sequence[tuple[datetime, timedelta]] | None
) -> list[ModelRequestAttempt]:
    """`attempts` with the recorded `times`, one each; as they are when there are none, or not one each."""
    if not times or len(times) != len(attempts):
        return attempts
    return [replace(a, timestamp=at, duration=took) for a, (at, took) in zip(attempts, times, strict=True)]


def _field(part: ModelResponsePart) -> str | None:
    """The name of the text a part's deltas extend, or None for a part that arrives whole."""
    if isinstance(part, (TextPart, ThinkingPart)):
        return "content"
    if isinstance(part, BaseToolCallPart) and isinstance(part.args, str):
        return "args"
    return None


def _text(part: ModelResponsePart, field: str) -> str:
    return cast(str, getattr(part, field))


def _delta_text(event: PartDeltaEvent) -> str | None:
    delta = event.delta
    if isinstance(delta, (TextPartDelta, ThinkingPartDelta)):
        return delta.content_delta
    if isinstance(delta, ToolCallPartDelta) and isinstance(delta.args_delta, str):
        return delta.args_delta
    return None


def _delta(
    part: ModelResponsePart, text: str, *, with_id: bool = False
) -> TextPartDelta | ThinkingPartDelta | ToolCallPartDelta:
    if isinstance(part, TextPart):
        return TextPartDelta(content_delta=text)
    if isinstance(part, ThinkingPart):
        return ThinkingPartDelta(content_delta=text)
    # Some providers repeat the call's id on every piece of its arguments (`[index, end, 1]`).
    return ToolCallPartDelta(args_delta=text, tool_call_id=getattr(part, "tool_call_id", None) if with_id else None)


def _reached_after(event: ModelResponseStreamEvent, reached: dict[int, int]) -> None:
    """Move `reached` (each part's offset so far) past an event kept whole."""
    if isinstance(event, PartStartEvent):
        field = _field(event.part)
        reached[event.index] = 0 if field is None else len(_text(event.part, field))
    elif isinstance(event, PartDeltaEvent):
        reached[event.index] = reached.get(event.index, 0) + len(_delta_text(event) or "")


def _rebuilt(response: ModelResponse, entry: JSONValue, reached: dict[int, int]) -> ModelResponseStreamEvent:
    """The event `entry` stands for, given each part's offset so far (`reached`, moved past it)."""
    if isinstance(entry, dict):
        try:
            event = _events.validate_python(entry.get("event"))
        except ValidationError as e:
            raise PinResultError(f"a streamed pin keeps {entry!r:.200} as an event, which it is not ({e})") from e
        _reached_after(event, reached)
        return event
    if not (
        isinstance(entry, list)
        and len(entry) in (2, 3)
        and all(type(n) is int and n >= 0 for n in entry)
        and entry[2:] in ([], [1])
        and cast(int, entry[0]) < len(response.parts)
    ):
        raise PinResultError(f"a streamed pin keeps {entry!r:.200} as a chunk, not [part index, end] of its response")
    index, end = cast(list[int], entry)[:2]
    part = response.parts[index]
    field = _field(part)
    start = reached.get(index)
    reached[index] = end
    if start is None:
        return PartStartEvent(
            index=index, part=part if field is None else replace(part, **{field: _text(part, field)[:end]})
        )
    if field is None:
        raise PinResultError(f"a streamed pin keeps a delta for part {index}, which arrives whole")
    return PartDeltaEvent(index=index, delta=_delta(part, _text(part, field)[start:end], with_id=len(entry) == 3))


def _same(rebuilt: ModelResponseStreamEvent, event: ModelResponseStreamEvent) -> bool:
    # A start's `previous_part_kind` and `canonical_system` are filled in later, by the stream around the provider's.
    if isinstance(rebuilt, PartStartEvent) and isinstance(event, PartStartEvent):
        return rebuilt.index == event.index and rebuilt.part == event.part
    return type(rebuilt) is type(event) and rebuilt == event


def _offsets(response: ModelResponse, event: ModelResponseStreamEvent, reached: dict[int, int]) -> list[list[int]]:
    """The entries that could stand for `event` as offsets, the plainest first; none for an event only kept whole."""
    if isinstance(event, PartStartEvent) and event.index < len(response.parts) and event.index not in reached:
        field = _field(response.parts[event.index])
        if field is None or _field(event.part) == field:
            return [[event.index, 0 if field is None else len(_text(event.part, field))]]
    elif isinstance(event, PartDeltaEvent) and event.index in reached and (text := _delta_text(event)) is not None:
        entry = [event.index, reached[event.index] + len(text)]
        return [entry, [*entry, 1]] if isinstance(event.delta, ToolCallPartDelta) else [entry]
    return []


def _compact(
    response: ModelResponse, event: ModelResponseStreamEvent, reached: dict[int, int]
) -> tuple[JSONValue, dict[int, int]] | None:
    """The first offset entry that rebuilds `event` exactly, with the offsets after it; None if none does."""
    for entry in _offsets(response, event, reached):
        after = dict(reached)
        try:
            if _same(_rebuilt(response, cast(JSONValue, entry), after), event):
                return cast(JSONValue, entry), after
        except PinResultError:
            continue  # a delta of a part the response holds whole (arguments that ended as a dict): kept whole
    return None


def chunks_of(
    response: ModelResponse, events: Sequence[ModelResponseStreamEvent], *, ended: bool
) -> list[JSONValue] | None:
    """The boundaries of `events`, the provider's events that built `response`, or None if they cannot rebuild it.

    Each event is kept as an offset where that rebuilds it exactly, else whole; the entries are checked to rebuild
    every event and, together, the response's every part, so a stream whose events say less than its parts
    (read before it was watched, or changed after its provider yielded them) keeps no boundaries at all.
    """
    reached: dict[int, int] = {}
    entries: list[JSONValue] = []
    for event in events:
        compact = _compact(response, event, reached)
        if compact is not None:
            entry, reached = compact
            entries.append(entry)
            continue
        whole: JSONValue = {"event": cast(JSONValue, _events.dump_python(event, mode="json"))}
        if not _same(_rebuilt(response, whole, reached), event):
            return None
        entries.append(whole)
    for index, part in enumerate(response.parts):
        field = _field(part)
        if index not in reached or (field is not None and reached[index] != len(_text(part, field))):
            return None
    return [*entries, ENDED] if ended else entries


def replayed_events(response: ModelResponse, chunks: Sequence[JSONValue]) -> Iterator[ModelResponseStreamEvent]:
    """The provider's events a stream's boundaries stand for, one at a time, as the live stream yielded them."""
    reached: dict[int, int] = {}
    for entry in chunks:
        if entry != ENDED:
            yield _rebuilt(response, entry, reached)


class PinnedStreamedResponse(CompletedStreamedResponse):
    """A stream that replays a pinned `ModelResponse`, with its recorded chunk boundaries where it has them.

    With boundaries, it yields the deltas the live stream yielded, in their order (timing is not
    reproduced: each arrives as fast as the consumer reads); without (a pin drawn by a plain request,
    or before they were kept), each part arrives whole. Everything built from the events (`run_stream()`,
    `run_stream_events()`, `iter()`, event stream handlers) follows. A pinned response whose stream stopped
    before completing replays up to where it stopped, then raises `PartialPin` if the consumer reads on
    (after `READ_ON_GRACE`, so a debouncing consumer first hands on what it has), rather than pretending the
    stream ended there; one that failed raises its pinned failure there instead, as the live stream did.
    """

    def __init__(
        self,
        response: ModelResponse,
        *,
        key: str,
        model_request_parameters: ModelRequestParameters,
        failure: BaseException | None = None,
        chunks: list[JSONValue] | None = None,
        attempt_times: list[tuple[datetime, timedelta]] | None = None,
    ) -> None:
        # Stamped as the live stream's parts manager stamps a tool call as it arrives (an output call's kind).
        response = stamped_call_parts(response, model_request_parameters)
        super().__init__(response, model_request_parameters=model_request_parameters, replay_events=True)
        self.key = key
        """The key of the pin this stream replays."""
        self.failure = failure
        """The exception the recorded stream failed with after what it streamed, raised again at that point."""
        self.chunks = chunks
        """The recorded chunk boundaries, or None: each part then arrives whole."""
        self.attempt_times = attempt_times
        """The recorded times of a fallback's failed attempts before this stream, or None."""
        self._closed = anyio.Event()
        self._yielded = 0
        self._events = None if chunks is None else len(chunks) - chunks[-1:].count(ENDED)

    @override
    async def close_stream(self) -> None:
        """Close the replay (its request ended, or the consumer cancelled it): nothing reads past this point."""
        self._closed.set()

    @property
    def pinned(self) -> ModelResponse:
        """The pinned response this stream replays."""
        return self.response

    @override
    def get(self) -> ModelResponse:
        """The response so far: the pinned one once every recorded event was read, as live."""
        response = self.response
        if self._events is not None and self._yielded < self._events:
            # Part way through the recorded events: what they built so far, as a live stream's `get()` reports it.
            response = replace(response, parts=self._parts_manager.get_parts(), state="incomplete")
        # A `FallbackModel` that fell back to this stream's model says so on the stream; a pin drawn before #45
        # already holds those attempts (the stream carried them when it was pinned), and they are not added twice.
        # The fallback timed them by this run's wall clock: they carry the recorded stream's times.
        outer, own = timed_attempts(self.failed_attempts or [], self.attempt_times), response.failed_attempts or []
        if outer and own[: len(outer)] != outer:
            response = replace(response, failed_attempts=[*outer, *own])
        return response

    @override
    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        if self.chunks is None:
            async for event in super()._get_event_iterator():
                yield event
        else:
            for event in replayed_events(self.response, self.chunks):
                self._parts_manager.apply_event(event)
                self._yielded += 1
                yield event
        if self.failure is not None:
            # The recorded stream failed here: the consumer meets the same exception at the same point.
            raise self.failure
        if self.chunks is not None and self.chunks[-1:] == [ENDED]:
            # The provider's events ended here when recorded; a consumer that stopped did so after them (at the part
            # end pydantic-ai adds), and one reading on meets the end, as live.
            return
        if self.response.state in PARTIAL_STATES:
            # The recorded stream never reached its end: a consumer that got this far did not read on. One that
            # debounces has only asked ahead; the wait lets it hand on what it has, and stop as the live one did.
            with anyio.move_on_after(READ_ON_GRACE):
                await self._closed.wait()
            if self._closed.is_set():
                # The request is over: what asked ahead was a debouncer whose consumer stopped, and nobody reads on.
                return
            raise PartialPin(self.key, state=self.response.state)


def stream_answer(
    answer: JSONValue, chunks: list[JSONValue] | None, attempts: Sequence[ModelRequestAttempt] = ()
) -> JSONValue:
    """A response's pin (`response_answer`) with the boundaries of the stream that drew it beside its text.

    `attempts` are those a fallback around the stream's model handed it over with: their times are kept beside.
    """
    if not isinstance(answer, dict):  # pragma: no cover - a response's answer is an object
        return answer
    kept = dict(answer)
    if chunks is not None:
        kept[CHUNKS] = chunks
    if attempts:
        kept[ATTEMPTS_TIMED] = attempt_times_raw(attempts)
    return kept


def chunks_in(raw: JSONValue) -> list[JSONValue] | None:
    """The chunk boundaries a pin keeps, or None; refused if they are not a list."""
    chunks: Any = raw.get(CHUNKS) if isinstance(raw, dict) else None
    if chunks is not None and not isinstance(chunks, list):
        raise PinResultError(f"a streamed pin keeps {chunks!r:.200} as its chunks, not a list")
    return cast("list[JSONValue] | None", chunks)
