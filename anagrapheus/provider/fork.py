"""Fork a recorded run: replay its first pins (a count, or its first turns), then go on live into a new unit."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.models import Model
from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.provider.capability import Pinning
from anagrapheus.provider.every_run import every_agent_run
from anagrapheus.provider.inputs import RecordedRun, recorded_runs
from anagrapheus.provider.policy import MODEL_CALL
from anagrapheus.provider.run_clock import RUN_CLOCK, RUN_ID, RUN_PLACE, RUN_POSITIONS, place_key, placed_as
from anagrapheus.timeline.canonical import pin_key
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, EventTypeRegistry, PinPromoted, StoredEvent, UnitForked
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.resolving.replay import ReplayPins
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver

__all__ = ["ForkPins", "Forked", "fork_run"]


class ForkPins(DelegatingResolver):
    """Answers from a recorded unit until the fork point, then draws everything live into `into` (a new unit).

    Every pin answered before the fork is taken into the new unit, so its first pins are the origin's.
    The fork point is `after_pins` answered pins, or the model's `after_turns`-th answer: the next
    model request (and all that follows) is drawn live, on whatever model the agent now has.
    """

    def __init__(
        self,
        events: Iterable[StoredEvent],
        *,
        origin: str,
        into: PinLedger,
        after_pins: int | None = None,
        after_turns: int | None = None,
    ) -> None:
        if (after_pins is None) == (after_turns is None):
            raise UsageError("fork at one point: give after_pins or after_turns, not both nor neither")
        if (after_pins or 0) < 0 or (after_turns or 0) < 0:
            raise UsageError("a fork point counts pins or turns from 0")
        self.origin = origin
        """The unit forked from."""
        self.into = into
        """The new unit."""
        events = list(events)
        registry = EventTypeRegistry()
        self._pins = ReplayPins.from_events(events, registry, unit_id=origin, on_miss="record", into=into)
        origin_pins = [
            pin
            for stored in events
            if stored.type == PinPromoted.event_type and stored.namespace == BUILTIN_NAMESPACE
            for pin in (PinPromoted.read(stored, registry),)
            if pin.unit_id == origin
        ]
        # The origin's model requests in the order asked: before the fork, the nth request is answered by the
        # nth one even when its key moved (another model, a changed prompt), so the prefix is the origin's.
        self._turn_keys = [pin.key for pin in origin_pins if pin.kind == MODEL_CALL]
        self._positions = _position_keys(
            origin, runs=len(recorded_runs(events, unit_id=origin)), turns=len(self._turn_keys)
        )
        # Each place the origin's runs were pinned at under their inputs, keyed as this resolver's runs ask it.
        self._places = {
            place_key(None, *placed): pin.key
            for pin in origin_pins
            if pin.kind == RUN_PLACE and (placed := placed_as(pin.raw)) is not None
        }
        self._after_pins = after_pins
        self._after_turns = after_turns
        self.replayed = 0
        """How many pins were answered from the origin."""
        self._turns = 0
        self.live = False
        """Whether the run has passed the fork point."""

    @property
    @override
    def draws_into(self) -> PinLedger:
        """The new unit: each run's inputs are noted there, so the fork can be asked again like any unit."""
        return self.into

    @property
    def at(self) -> str:
        """The fork point as said."""
        return f"after {self._after_pins} pin(s)" if self._after_turns is None else f"after turn {self._after_turns}"

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        if kind == RUN_PLACE and key not in self._places:
            # A place the origin never pinned (it was recorded before runs were placed by their inputs): drawn into
            # the new unit, and not counted, so a fork point counts the pins it always counted.
            return self.into, key
        by_pins = self._after_pins is not None and self.replayed >= self._after_pins
        by_turns = kind == MODEL_CALL and self._after_turns is not None and self._turns >= self._after_turns
        if by_pins or by_turns:
            self.live = True
        if self.live:
            return self.into, key
        self.replayed += 1
        if kind == RUN_PLACE:
            key = self._places[key]
        elif kind in RUN_POSITIONS:
            # Keyed on a position in the unit: this resolver's runs are keyed with no unit, the origin's with its id.
            key = self._positions.get(key, key)
        if kind == MODEL_CALL:
            if key not in self._pins and self._turns < len(self._turn_keys):
                key = self._turn_keys[self._turns]
            self._turns += 1
        return self._pins, key


def _position_keys(origin: str, *, runs: int, turns: int) -> dict[str, str]:
    """Each run id and clock key a fork's runs ask (keyed with no unit) to the origin's key at the same position."""
    keys: dict[str, str] = {}
    for run in range(runs + 1):
        keys[pin_key(RUN_ID, {"unit": None, "run": run})] = pin_key(RUN_ID, {"unit": origin, "run": run})
        for stamp in range(2 * turns + 4):
            for slots in range(_MAX_SLOTS):
                ours = {"unit": None, "run": run, "stamp": stamp, "slots": slots}
                keys[pin_key(RUN_CLOCK, ours)] = pin_key(RUN_CLOCK, {**ours, "unit": origin})
    return keys


_MAX_SLOTS = 48
"""How many timestamped slots one clock stamp may cover before the fork point (more are drawn live)."""


@dataclass(frozen=True)
class Forked:
    """A forked run: its result, the new unit's id and committed events, and where it left its origin."""

    result: AgentRunResult[Any]
    """The run as it went on live."""
    unit_id: str
    """The new unit."""
    origin: str
    """The unit forked from."""
    replayed: int
    """How many pins were answered from the origin."""
    events: list[StoredEvent]
    """What the new unit committed: its pins, its run's inputs, and the `unit_forked` event naming its origin."""


def fork_run(
    events: Iterable[StoredEvent],
    agent: Agent[Any, Any],
    into: PinLedger,
    *,
    origin: str,
    run: int = 0,
    after_pins: int | None = None,
    after_turns: int | None = None,
    model: Model | str | None = None,
    deps: Callable[[RecordedRun], object] | None = None,
) -> Forked:
    """Ask recorded run `run` of unit `origin` again of `agent`, replayed up to the fork point, live after it.

    The runs before it are replayed whole first (they are the ones it continued). The continuation is
    drawn into `into` (on `model` when given, else the agent's) and committed there, with a `unit_forked`
    event naming its origin and fork point.
    """
    events = list(events)
    runs = [recorded for recorded in recorded_runs(events, unit_id=origin) if not recorded.nested]
    if not 0 <= run < len(runs):
        raise UsageError(f"unit {origin} has {len(runs)} recorded run(s) with inputs; there is no run {run}")
    forking = ForkPins(events, origin=origin, into=into, after_pins=after_pins, after_turns=after_turns)
    with every_agent_run(Pinning(forking)):
        for earlier in runs[:run]:
            asked = earlier.run_kwargs()
            if deps is not None:
                asked["deps"] = deps(earlier)
            with earlier.as_its_caller():
                agent.run_sync(**asked)
        chosen = runs[run]
        kwargs = chosen.run_kwargs()
        if deps is not None:
            kwargs["deps"] = deps(chosen)
        with chosen.as_its_caller():
            result = agent.run_sync(**kwargs, model=model)
    registry = EventTypeRegistry()
    into.note_event(
        registry.encode(
            UnitForked(unit_id=into.unit_id, origin_unit_id=origin, replayed=forking.replayed, at=forking.at),
            correlation_id=into.unit_id,
        )
    )
    return Forked(result=result, unit_id=into.unit_id, origin=origin, replayed=forking.replayed, events=into.commit())
