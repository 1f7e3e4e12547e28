"""A run's ids and clock as pins: its `run_id`, and the timestamps pydantic-ai stamps on the run's requests.

pydantic-ai asks capabilities for a run's default id before the run starts, and stamps message
and part timestamps from the wall clock at some sixty places no hook covers. So the id is drawn
through the resolver, and the timestamps are pinned after the fact: at each stamp point (before a
model request, at the end of the run) every timestamp the run's requests gained since the last
point is pinned, and written back into those messages, which are the run's own history objects.

Runs are numbered in the order they start through one resolver, and a stamp point by its order within
its run: these keys are positions in a unit of work, as a durable engine's step ids are positions in a
workflow. Where pydantic-ai says what a run was asked before its id is drawn (2.78 on), the run takes the
position the recording's run asked the same took (`RUN_PLACE`, pinned under a digest of its inputs), so
runs started at once from threads keep their ids and times whatever order they start in. A
position the recording does not answer (it predates pinned clocks, or the replay spans several
units and cannot tell whose position it is) is drawn fresh instead of missing: ids and times never
make a replay leave its recording. Under `on_miss="record"` such a draw goes to the new unit.

The numbering is kept by the resolver (its `attachments`), so it lives and goes with it. A resolver
that carries none (one written to the old protocol, adapted) has its runs' ids and times drawn fresh and
left unpinned. They are never numbered per capability: two capabilities over one resolver would then both
take run 0, and the second run would be answered with the first one's id and times.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from anagrapheus.errors import PinResultError
from anagrapheus.provider.retries import take_up
from anagrapheus.timeline.canonical import JSONValue, canonical_value, pin_key
from anagrapheus.timeline.resolving.resolver import (
    Attachment,
    Attachments,
    Resolver,
)

__all__ = [
    "RUN_CLOCK",
    "RUN_ID",
    "RUN_PLACE",
    "RUN_POSITIONS",
    "RunClocks",
    "place_key",
    "place_raw",
    "placed_as",
    "run_position",
]


RUN_ID = "run_id"
"""The pin kind of a run's `run_id`, keyed on the run's position among the runs through its resolver."""
RUN_CLOCK = "run_clock"
"""The pin kind of the timestamps a run's requests were stamped with between two stamp points."""
RUN_PLACE = "run_place"
"""The pin kind of where a run was placed among its unit's runs, keyed on what it was asked (its inputs' digest)."""
RUN_POSITIONS = frozenset({RUN_ID, RUN_CLOCK, RUN_PLACE})
"""The pin kinds keyed on a position in the unit of work rather than on what was asked."""


@dataclass
class _Run:
    """One run through the resolver: its position, and which requests and parts its stamp points have seen."""

    position: int | str
    """Where the run is among the unit's runs: its start index, or, for a run its caller named, its id."""
    number: int = 0
    """The run's start index among the runs through the resolver, which a recording made before named runs were
    told by their id keyed a named run's times on."""
    started: bool = False
    placed: bool = False
    """Whether the run's position is settled without a pin under its inputs to note: placed by them, or named."""
    stamps: int = 0
    # Every request and part seen at a stamp point, by identity (held, so an id is never reused while the run
    # lasts). Not an index into the messages: a history processor drops messages, a capability such as
    # `ReinjectSystemPrompt` inserts parts into earlier requests or replaces them, and each stamp gained since
    # the last point is found wherever it sits.
    seen: dict[int, object] | None = None
    messages: Sequence[ModelMessage] | None = None
    """The run's own history, as its last stamp point saw it: the list a failed run appended its last request to."""
    asked_as: str | None = None
    """The digest of the run's inputs (`place_of`), once known: a retry asked the same takes up its place."""
    drawn: bool = True
    """Whether the run's id was drawn here (not named by its caller): only such a run takes up a failed run's place."""


@dataclass
class RunClocks:
    """The runs drawn through one resolver, shared by every `Pinning` over it: their positions and stamp points."""

    unit: str | None
    """The unit of work the runs are positions in: the ledger's, or the one unit a strict replay answers from."""
    pinned: bool = True
    """Whether positions are pinned through the resolver; False for a resolver that keeps no clocks (see `of`)."""
    runs: int = 0
    by_id: dict[str, _Run] = field(default_factory=dict[str, _Run])
    positions: dict[str, int | str] = field(default_factory=dict[str, int | str])
    """Every run id numbered through the resolver, to its position: a run started again under the same id
    (`agent.run(..., run_id=...)`) resumes that position and is answered from its pins."""
    places: dict[str, int] = field(default_factory=dict[str, int])
    """Per digest of a run's inputs, how many runs asked with those inputs were placed: the next one's occurrence."""
    taken: set[int | str] = field(default_factory=set[int | str])
    """Every position a run drawn here holds: no two runs ever share one, so never each other's id, times or calls."""
    failed: dict[str, list[int | str]] = field(default_factory=dict[str, list[int | str]])
    """Per digest of the inputs, the positions of failed runs asked so that no retry took up yet, oldest first."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, resolver: Resolver) -> RunClocks | None:
        """The clocks of `resolver`'s runs, kept in its `attachments`; None for a resolver that carries none.

        The numbering belongs to the resolver, not to a capability: every `Pinning` over one ledger (one per
        agent, say), and `PinnedModel` and `pinned_tool` with no capability, read the one sequence of its runs.
        """
        held = resolver.attachments
        return None if held is None else _kept(held, resolver)

    @classmethod
    def unpinned(cls) -> RunClocks:
        """Clocks that pin no position: a `Pinning`'s own, for a resolver that keeps none (see `Pinning`)."""
        return cls(None, pinned=False)

    def draw_run_id(self, resolver: Resolver, new_id: Callable[[], str], *, place: str | None = None) -> str:
        """The id of the run about to start, pinned at its position: where it starts, or where its inputs place it.

        `place` is the digest of what the run was asked (`place_of`), when pydantic-ai says it before the run
        starts: the run then takes the position the recording's run asked the same took, whatever order runs
        started from threads start in (issue #34).
        """
        with self.lock:
            number = self.runs
            self.runs += 1
            occurrence = 0 if place is None else self._occurrence(place)
        if place is None:
            position = self._take(number, apart=f"{number}:started")
        else:
            position = self._take(self._placed(resolver, place, occurrence, number), apart=_apart(place, occurrence))
        key = _run_id_key(self.unit, position)
        answering = resolver.answering_position(key) if self.pinned else None
        if answering is None:
            run_id = _run_id(new_id())
        else:
            run_id = answering.resolve_held(key, kind=RUN_ID, effect=new_id, interpret=_run_id)
        with self.lock:
            self.by_id[run_id] = _Run(position, number=number, placed=place is not None, asked_as=place)
            self.positions.setdefault(run_id, position)
        if place is not None:
            # Pinned after the run's id, as a run placed where it starts pins its place (`note_place`): a unit
            # recorded under either pydantic-ai holds the same pins in the same order. Read before it, unanswered.
            self._pin_place(resolver, place, occurrence, position)
        return run_id

    def _placed(self, resolver: Resolver, place: str, occurrence: int, number: int) -> int | str:
        """Where the `occurrence`th run whose inputs digest to `place`, started `number`th, goes among the runs.

        Where the recording placed the run asked the same; else where it starts, as every run was placed before
        runs were placed by their inputs (a recording made before, or a run whose inputs moved).
        """
        held = resolver.recorded(place_key(self.unit, place, occurrence)) if self.pinned else None
        return number if held is None else _position(held)

    def note_place(self, resolver: Resolver, run_id: str | None, place: Callable[[], str | None]) -> None:
        """Pin where a run whose id was drawn before its inputs were known was placed, under its inputs.

        pydantic-ai before 2.78 says nothing of a run's inputs when its id is drawn, so its runs are placed where
        they start; pinning that place under the run's inputs lets a replay under a later pydantic-ai place them
        by their inputs, and takes the pin a recording made under one holds.
        """
        run = None if run_id is None else self.by_id.get(run_id)
        if run is None or run.placed or not self.pinned:
            return
        run.placed = True
        digest = place()
        if digest is None:
            return
        with self.lock:
            occurrence = self._occurrence(digest)
        self._pin_place(resolver, digest, occurrence, run.position)

    def _occurrence(self, place: str) -> int:
        """How many runs whose inputs digest to `place` were placed before this one (called holding the lock)."""
        occurrence = self.places.get(place, 0)
        self.places[place] = occurrence + 1
        return occurrence

    def _take(self, position: int | str, *, apart: str) -> int | str:
        """Hold `position`, or `apart` when a run drawn here holds it already: no two runs ever share one."""
        with self.lock:  # checked and held at once: two runs started together never both take one place
            taken = apart if position in self.taken else position
            self.taken.add(taken)
            return taken

    def _pin_place(self, resolver: Resolver, place: str, occurrence: int, position: int | str) -> None:
        """Pin `position` under the run's inputs, so a replay places the run asked the same there."""
        if not self.pinned:
            return
        key = place_key(self.unit, place, occurrence)
        answering = resolver.answering_position(key)
        if answering is not None:
            raw = place_raw(position, place, occurrence)
            answering.resolve_held(key, kind=RUN_PLACE, effect=lambda: raw, interpret=_position)

    def start(self, run_id: str | None, *, named: bool = True) -> None:
        """Place a run that starts: one whose id was drawn keeps its position; one its caller named is told by its id.

        A run its caller named (`agent.run(..., run_id=...)`) is placed by that id, whenever it starts: runs
        started at once from threads, each named, keep their own times and calls on replay whatever order they
        start in. A run given the id of a run that started through the resolver before, and ended, resumes that
        run: it takes its place, so what it asks again is answered from that run's pins (its id, times and calls).
        With `named=False` (a run whose id no one chose to name it by) a run not drawn here is numbered where it starts.
        """
        if run_id is None:
            return
        with self.lock:
            run = self.by_id.get(run_id)
            if run is None and run_id in self.positions:
                known = self.positions[run_id]
                run = self.by_id[run_id] = _Run(
                    known, number=known if isinstance(known, int) else self.runs, placed=True, drawn=False
                )
                # Resumed by its id: a failure it met is no longer there for a retry to take up.
                for positions in self.failed.values():
                    if known in positions:
                        positions.remove(known)
            elif run is None or run.started:
                # The caller named the run (or named it again while it runs): it is placed by its id, numbered here.
                run = self.by_id[run_id] = _Run(
                    run_id if named else self.runs, number=self.runs, placed=True, drawn=not named
                )
                self.positions.setdefault(run_id, run.position)
                self.runs += 1
            run.started = True

    def take_up(self, resolver: Resolver, run_id: str | None, place: Callable[[], str | None]) -> None:
        """Put a run that retries a failed run asked the same (its inputs' digest) in that run's place (issue #40).

        Its model requests, tool calls and times are then keyed as the failed run's, and answered from its pins;
        what failed is drawn again. Only a run whose id was drawn here takes a place up: a named run is its name's.
        """
        run = None if run_id is None else self.by_id.get(run_id)
        if run is None or run_id is None or not run.drawn:
            return
        if run.asked_as is None:
            # Known when its id was drawn from pydantic-ai 2.78 on; before, read now (its failure is offered by it).
            run.asked_as = place()
        asked_as = run.asked_as
        with self.lock:  # taken off at once: two retries started together never take up one place
            waiting = None if asked_as is None else self.failed.get(asked_as)
            position = waiting.pop(0) if waiting else None
        if asked_as is None or position is None:
            return
        if not take_up(resolver, run_id, asked_as):
            with self.lock:
                self.failed[asked_as].insert(0, position)
            return
        with self.lock:
            run.position = position
            self.positions[run_id] = position

    def ended(self, run_id: str | None, *, failed: bool) -> None:
        """Forget a run that ended; a failed one's place waits for the retry asked the same to take it up."""
        with self.lock:
            run = None if run_id is None else self.by_id.pop(run_id, None)
            if failed and run is not None and run.asked_as is not None:
                self.failed.setdefault(run.asked_as, []).append(run.position)

    async def finish(
        self,
        resolver: Resolver,
        run_id: str,
        messages: Sequence[ModelMessage],
        *,
        clock: Callable[[], datetime] | None,
    ) -> None:
        """Pin the times of the requests made after the run's last model request."""
        await self.stamp(resolver, run_id, messages, clock=clock)
        appended = _appended_after_the_run(run_id, messages)
        if appended is not None:
            await self.stamp(resolver, run_id, appended, clock=clock)
        await _written_held(resolver)

    async def fail(
        self,
        resolver: Resolver,
        run_id: str,
        messages: Sequence[ModelMessage],
        *,
        clock: Callable[[], datetime] | None,
    ) -> None:
        """Pin the times a failed run's requests gained after its last stamp point.

        pydantic-ai hands a failed run's hook a context without the run's history (`messages` is then empty): the
        history the run's last stamp point saw is the list the run went on appending to.
        """
        # The run is forgotten where it is said to have ended (`ended`), which the retry rule reads.
        run = self.by_id.get(run_id)
        history = run.messages if run and run.messages is not None else messages
        await self.stamp(resolver, run_id, history, clock=clock)
        refused = _extended_by_the_run(run_id, history)
        if refused is not None:
            await self.stamp(resolver, run_id, refused, clock=clock)
        await _written_held(resolver)

    async def stamp(
        self,
        resolver: Resolver,
        run_id: str | None,
        messages: Sequence[ModelMessage],
        *,
        clock: Callable[[], datetime] | None,
    ) -> None:
        """Pin the timestamps the run's requests gained since its last stamp point, and write the pinned ones back."""
        run = None if run_id is None else self.by_id.get(run_id)
        if run is None or run_id is None:
            return
        run.messages = messages
        slots = _new_slots(run, run_id, messages)
        if not slots:
            return
        # The count is keyed: a run whose requests gained other stamps than the recorded one's has moved.
        key = self._clock_key(resolver, run, len(slots))
        run.stamps += 1

        def stamped() -> JSONValue:
            return [(clock() if clock is not None else slot.timestamp).isoformat() for slot in slots]

        answering = resolver.answering_position(key) if self.pinned else None
        if answering is None:
            times = _times(canonical_value(stamped()))
        else:
            # A ledger holds a fresh draw, written by the unit's next store write: the next draw's, in its own synced
            # transaction before its pin, or the flush as the run ends (`finish`, `fail`). No hop, no write of its own.
            times = await answering.aresolve_held(key, kind=RUN_CLOCK, effect=stamped, interpret=_times)
        if len(times) != len(slots):
            raise PinResultError(f"a {RUN_CLOCK} pin holds {len(times)} timestamps for {len(slots)} stamps ({key})")
        for slot, at in zip(slots, times, strict=True):
            slot.timestamp = at

    def _clock_key(self, resolver: Resolver, run: _Run, slots: int) -> str:
        """The key of the run's next stamp point; a named run's, as a recording made before named runs kept it."""

        def at(place: int | str) -> str:
            return _clock_key_of(self.unit, place, run.stamps, slots)

        key = at(run.position)
        if isinstance(run.position, str) and not resolver.asked(key):
            # Recorded before named runs were placed by their id: its times were keyed on its start index.
            numbered = at(run.number)
            if resolver.asked(numbered):
                return numbered
        return key


async def _written_held(resolver: Resolver) -> None:
    """Write what the run's ledger holds (its last times), in a worker thread, before the run's end is handed on."""
    ledger = resolver.draws_into
    if ledger is not None and ledger.holding:
        await asyncio.to_thread(ledger.flush_held)


def _appended_after_the_run(run_id: str, messages: Sequence[ModelMessage]) -> Sequence[ModelMessage] | None:
    """The history `run_stream` hands its caller, when it appended a request after the run's last hook; else None.

    `run_stream` ends a run whose streamed response made tool calls (an output tool, or text and then a tool)
    by appending a request with their returns to a copy of the run's history, stamped from the wall clock
    where no capability hook reaches. That copy is the only list holding the run's last request and one
    more request of the run after it; `gc` finds it, so its stamps are pinned like every other.
    """
    last = messages[-1] if messages else None
    if not (isinstance(last, ModelResponse) and last.tool_calls):
        return None  # the run answered every tool call in its own history: nothing was appended outside it
    at = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], ModelRequest)), 0)
    return _one_request_more(run_id, messages, at)


def _extended_by_the_run(run_id: str, messages: Sequence[ModelMessage]) -> Sequence[ModelMessage] | None:
    """The history a run was refused with, when it holds one request of the run more than `messages`; else None.

    A run continuing a `conversation=` whose carried usage already spends a limit is refused before any hook sees
    its first request: pydantic-ai appends that request, stamped from the wall clock, to a list of its own (the one
    `capture_run_messages` hands out), never to the history the hooks saw. `gc` finds it, as it finds the request
    `run_stream` appends (`_appended_after_the_run`), so its times are pinned like every other.
    """
    return _one_request_more(run_id, messages, len(messages) - 1) if messages else None


def _one_request_more(run_id: str, messages: Sequence[ModelMessage], at: int) -> Sequence[ModelMessage] | None:
    """The other list holding `messages[at]` at `at` and one request of the run more than `messages`; else None."""
    anchor = messages[at]
    for holder in gc.get_referrers(anchor):
        found = cast("list[ModelMessage]", holder)
        if (
            type(holder) is list
            and found is not messages
            and len(found) == len(messages) + 1
            and found[at] is anchor
            and isinstance(more := found[-1], ModelRequest)
            and more.run_id == run_id
        ):
            return found
    return None


def _new_slots(run: _Run, run_id: str, messages: Sequence[ModelMessage]) -> list[Any]:
    """The requests and timestamped parts of the run's messages not seen at an earlier stamp point, in order."""
    seen = run.seen
    if seen is None:
        seen = run.seen = {}
        # The run's own messages are the ones at the end that carry its id; the history before is another run's,
        # stamped by that run: seen already, as what it holds now. A part added to it later is this run's.
        start = len(messages)
        while start > 0 and messages[start - 1].run_id == run_id:
            start -= 1
        for message in messages[:start]:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    seen[id(part)] = part
    # The request itself, if it is the run's, and each of its parts that carries a timestamp (prompts, tool returns,
    # retries, a system prompt put back into an earlier request).
    slots: list[Any] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        if message.run_id == run_id and id(message) not in seen:
            seen[id(message)] = message
            slots.append(message)
        for part in message.parts:
            if id(part) not in seen and isinstance(getattr(part, "timestamp", None), datetime):
                seen[id(part)] = part
                slots.append(part)
    return slots


_CLOCKS: Attachment[RunClocks] = Attachment("the run clocks")
"""Where a resolver keeps its runs' clocks in its `attachments`: they live and go with it."""


def run_position(resolver: Resolver, run_id: str, *, held: Attachments | None = None) -> int | str | None:
    """The position of the running run `run_id` among the runs a `Pinning` numbered through `resolver`, if it did.

    `held` is `resolver.attachments`, where the caller looked them up already (asked on every request).
    """
    clocks = RunClocks.of(resolver) if held is None else _kept(held, resolver)
    run = None if clocks is None else clocks.by_id.get(run_id)
    return None if run is None else run.position


def _kept(held: Attachments, resolver: Resolver) -> RunClocks:
    """The run clocks kept in `held` (`resolver`'s attachments), made for its unit on the first ask."""
    return held.get(_CLOCKS, lambda: RunClocks(resolver.unit))


def _run_id(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise PinResultError(f"a {RUN_ID} pin holds {raw!r}, not a run id")
    return raw


def _times(raw: JSONValue) -> list[datetime]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise PinResultError(f"a {RUN_CLOCK} pin holds {type(raw).__name__}, not a list of timestamps")
    try:
        return [datetime.fromisoformat(item) for item in raw]  # pyright: ignore[reportArgumentType]
    except ValueError as e:
        raise PinResultError(f"a {RUN_CLOCK} pin holds {raw!r}, not a list of timestamps ({e})") from e


def _run_id_key(unit: str | None, position: int | str) -> str:
    """The key of the id of the run at `position` among `unit`'s runs."""
    return _position_key(RUN_ID, {"unit": unit, "run": position})


def _clock_key_of(unit: str | None, position: int | str, stamp: int, slots: int) -> str:
    """The key of the `stamp`th stamp point of the run at `position` among `unit`'s runs, which stamped `slots`."""
    return _position_key(RUN_CLOCK, {"unit": unit, "run": position, "stamp": stamp, "slots": slots})


def _position_key(kind: str, material: dict[str, int | str | None]) -> str:
    """`pin_key` of a position's material, written as it is when the walk would leave it unchanged (the usual case).

    Asked several times a run, each time for a new position: a unit id, a run's id and a small integer are
    canonical as they are unless a string is not ASCII (NFC then decides) or an integer is past what is exact.
    """
    for value in material.values():
        plain = (type(value) is int and value.bit_length() <= 53) or (type(value) is str and value.isascii())
        if not (plain or value is None):
            return pin_key(kind, material)
    return pin_key(kind, material, normalised=True)


@functools.lru_cache(maxsize=256)  # asked twice per run: where it was placed is read, then pinned
def place_key(unit: str | None, place: str, occurrence: int) -> str:
    """The key of where the `occurrence`th run whose inputs digest to `place` was placed among `unit`'s runs."""
    return pin_key(RUN_PLACE, {"unit": unit, "inputs": place, "n": occurrence})


def placed_as(raw: JSONValue) -> tuple[str, int] | None:
    """What a `RUN_PLACE` pin's value says its key holds besides the unit: the inputs' digest and occurrence."""
    if isinstance(raw, dict) and isinstance(place := raw.get("inputs"), str) and type(n := raw.get("n")) is int:
        return place, n
    return None


def _apart(place: str, occurrence: int) -> str:
    """The position of a run the recording did not place: keyed on its inputs, so no recorded run holds it."""
    return f"{place}:{occurrence}"


def place_raw(position: int | str, place: str, occurrence: int) -> JSONValue:
    """A `RUN_PLACE` pin's value: the position, with what it is keyed on besides the unit (to key it in another)."""
    return {"run": position, "inputs": place, "n": occurrence}


def _position(raw: JSONValue) -> int | str:
    position = raw.get("run") if isinstance(raw, dict) else None
    if isinstance(position, bool) or not isinstance(position, (int, str)):
        raise PinResultError(f"a {RUN_PLACE} pin holds {raw!r}, not a run's position")
    return position
