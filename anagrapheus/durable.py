"""Crash-resume without an engine: list the units a crash left open, and run one again, reusing its pins.

A unit of work whose process died before it committed keeps its pins in the store's scratch. Running
the same agent on the same prompt through a `PinLedger` on that unit answers every call that had
finished from its pin and draws only the rest: the run resumes where it stopped. The call that was in
flight at the crash had no pin yet, so it runs again: resuming is at-least-once for that call, and a
tool with side effects must be idempotent.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from anagrapheus.errors import UnitClosed, UsageError
from anagrapheus.provider.capability import Pinning
from anagrapheus.provider.run_clock import RUN_CLOCK
from anagrapheus.timeline.events import EventTypeRegistry
from anagrapheus.timeline.resolving.failures import stored_kind
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.stores.ports import ScratchPin, TimelineStore

if TYPE_CHECKING:
    # Types only: the provider layer is the one that imports pydantic-ai.
    from pydantic_ai import Agent
    from pydantic_ai.agent import AgentRunResult

__all__ = ["OpenRun", "aresume", "open_runs", "resume"]


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A unit of work left open (by a crash, or an interruption): what it drew, ready to be resumed."""

    unit_id: str
    """The unit's id: give it to `resume`."""
    pins: int
    """How many pins it drew."""
    kinds: Mapping[str, int]
    """How many pins of each kind (`model_call`, `tool_call`, ...), failed draws under `<kind>!failed`."""
    retried: int
    """How many of its keys were asked for more than once (a retry, or a resume already tried)."""
    failed: int
    """How many of its draws failed (pinned failures, raised again on reuse)."""
    last_activity: datetime | None
    """The latest timestamp the unit pinned for its requests, or None if it pinned none."""


def open_runs(store: TimelineStore) -> list[OpenRun]:
    """List the units in `store` never committed or abandoned, with what each drew, oldest first."""
    return [_open_run(unit.unit_id, store.scratch_list(unit.unit_id)) for unit in store.open_units()]


def _open_run(unit_id: str, pins: list[ScratchPin]) -> OpenRun:
    """Summarise one open unit's scratch."""
    times: list[datetime] = []
    for pin in pins:
        if pin.kind == RUN_CLOCK:
            raw = json.loads(pin.raw_text)
            times.extend(datetime.fromisoformat(at) for at in raw if isinstance(at, str))
    return OpenRun(
        unit_id=unit_id,
        pins=len(pins),
        kinds=dict(Counter(pin.kind for pin in pins)),
        retried=sum(1 for pin in pins if pin.attempts > 1),
        failed=sum(1 for pin in pins if stored_kind(pin.kind)[1]),
        last_activity=max(times, default=None),
    )


def resume(
    agent: Agent[Any, Any],
    prompt: str,
    *,
    store: TimelineStore,
    registry: EventTypeRegistry | None = None,
    unit_id: str,
    pinning: Callable[[PinLedger], Pinning] = Pinning,
    **run: Any,
) -> AgentRunResult[Any]:
    """Run `agent` on `prompt` again in the open unit `unit_id`, reusing its pins; commit the unit if it succeeds.

    Give the agent and prompt the crashed run had (and its `deps=` and other run arguments in `run`):
    the calls that finished are answered from their pins, the rest drawn. If the run fails, the unit
    stays open, to resume again. The agent must not carry a `Pinning` of its own (`pinning` builds the
    one the run gets, from the unit's ledger: pass `lambda ledger: Pinning(ledger, policy=...)` for options).
    """
    ledger = _ledger(agent, store, registry, unit_id)
    result = agent.run_sync(prompt, capabilities=[pinning(ledger)], **run)
    ledger.commit()
    return result


async def aresume(
    agent: Agent[Any, Any],
    prompt: str,
    *,
    store: TimelineStore,
    registry: EventTypeRegistry | None = None,
    unit_id: str,
    pinning: Callable[[PinLedger], Pinning] = Pinning,
    **run: Any,
) -> AgentRunResult[Any]:
    """Like `resume`, from async code."""
    ledger = _ledger(agent, store, registry, unit_id)
    result = await agent.run(prompt, capabilities=[pinning(ledger)], **run)
    await ledger.acommit()
    return result


def _ledger(
    agent: Agent[Any, Any], store: TimelineStore, registry: EventTypeRegistry | None, unit_id: str
) -> PinLedger:
    """The open unit's ledger, after checking the unit can be resumed by this agent."""
    found: list[bool] = []
    agent.root_capability.apply(lambda leaf: found.append(isinstance(leaf, Pinning)))
    if any(found):
        raise UsageError(
            "resume: the agent carries a Pinning of its own, which would pin every call twice;"
            " give resume the agent built without it"
        )
    ledger = PinLedger(store, registry, unit_id=unit_id)
    state = ledger.state
    if state != "open":
        raise UnitClosed(unit_id, state=state)
    return ledger
