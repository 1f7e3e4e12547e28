"""Replaying a recorded conversation against a candidate agent, and judging it: passed, failed or diverged."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage

from anagrapheus.errors import UsageError
from anagrapheus.provider.run_clock import RUN_POSITIONS
from anagrapheus.testing.verdict import Conversation, Exchange, Invariant, InvariantResult, Verdict
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    Recording,
    ReplayPins,
    Resolver,
    SQLiteEventStore,
    TimelineStore,
    UpcastRegistry,
    read_recording,
)

__all__ = ["AgentBuilder", "OnMiss", "Turn", "aregress", "miss_rule", "regress"]

AgentBuilder = Callable[[Resolver], "Agent[Any, Any] | Mapping[str, Agent[Any, Any]]"]
"""Builds the candidate: given the resolver to pin through, one agent, or several by name."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a conversation: what to ask, and of which agent."""

    prompt: str | Callable[[Conversation], str]
    """The user prompt, or a function building it from the turns played so far."""
    agent: str | None = None
    """Which agent answers, when `build_agent` returns several by name."""
    history: bool = True
    """Whether the turn continues that agent's message history; False runs it afresh."""
    deps: Any = None
    """The run's dependencies, if the agent takes any."""


def _name_of(invariant: Invariant) -> str:
    return str(getattr(invariant, "__name__", None) or repr(invariant))


def _pick(agents: Agent[Any, Any] | Mapping[str, Agent[Any, Any]], turn: Turn, number: int) -> Agent[Any, Any]:
    if isinstance(agents, Agent):
        return agents
    if turn.agent is None or turn.agent not in agents:
        named = ", ".join(sorted(agents))
        raise UsageError(f"turn {number} names agent {turn.agent!r}, but build_agent returned agents {named}")
    return agents[turn.agent]


def _outcome(
    names: Sequence[str], violations: Mapping[str, str], *, checked_through: int | None, complete: bool, at: int
) -> tuple[InvariantResult, ...]:
    """Each invariant's result once play stopped: violated ones at `at`, others held or not evaluated."""
    results: list[InvariantResult] = []
    for name in names:
        if name in violations:
            results.append(InvariantResult(name=name, status="violated", turn=at, why=violations[name]))
        elif complete:
            results.append(InvariantResult(name=name, status="held", turn=checked_through))
        else:
            results.append(InvariantResult(name=name, status="not evaluated", turn=checked_through))
    return tuple(results)


OnMiss = Literal["strict", "record"]
"""What a regression run does on a miss, as `ReplayPins(on_miss=...)` spells it: end the run, or draw it live."""

_GATE_POLICIES: dict[str, OnMiss] = {"pinned": "strict", "live": "record"}
"""`policy=`'s values, the replay gate's spelling (../shared/reference/peers/replaygate.md), and their `on_miss`."""


def miss_rule(on_miss: str, policy: str | None) -> OnMiss:
    """The `on_miss` asked for, checked; from the replay gate's `policy=` if that was given instead."""
    if policy is not None:
        if policy not in _GATE_POLICIES:
            raise UsageError(f"policy must be 'pinned' or 'live' (or on_miss='strict' or 'record'), not {policy!r}")
        if on_miss != "strict":
            raise UsageError("give on_miss= or policy=, not both: policy= is the replay gate's spelling of on_miss")
        # The reference pages' spelling keeps working without a warning (the contract), so no deprecation here.
        return _GATE_POLICIES[policy]
    if on_miss not in ("strict", "record"):
        raise UsageError(f"on_miss must be 'strict' or 'record', not {on_miss!r}")
    return on_miss


async def aregress(
    recording: str | os.PathLike[str] | Recording,
    build_agent: AgentBuilder,
    turns: Sequence[Turn | str],
    invariants: Sequence[Invariant],
    *,
    on_miss: OnMiss = "strict",
    unit: str | None = None,
    types: EventTypeRegistry | None = None,
    upcasts: UpcastRegistry | None = None,
    store: TimelineStore | None = None,
    policy: Literal["pinned", "live"] | None = None,
) -> Verdict:
    """Play `turns` against the candidate `build_agent` builds, answering from `recording`, and judge it.

    After each turn every invariant is asked about the conversation so far; the first turn at
    which one returns a message fails the run there. Under `on_miss="strict"` the first call the
    recording has no pin for ends the run as `diverged`, and the invariants are not evaluated past
    it. Under `on_miss="record"` that call and every later miss are drawn from the real model into a
    new unit of work in `store` (a temporary database by default), committed when the run ends.
    `policy="pinned"` and `policy="live"` are the replay gate's spellings of the two, kept without a warning.
    """
    on_miss = miss_rule(on_miss, policy)
    if types is None:
        types = EventTypeRegistry()
    if not isinstance(recording, Recording):
        recording = read_recording(recording, registry=types, upcasts=upcasts)
    plays = [turn if isinstance(turn, Turn) else Turn(turn) for turn in turns]
    names = [_name_of(invariant) for invariant in invariants]
    with ExitStack() as stack:
        ledger: PinLedger | None = None
        if on_miss == "record":
            if store is None:
                scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="anagrapheus-regress-")))
                store = stack.enter_context(SQLiteEventStore(scratch / "live.db"))
            ledger = PinLedger(store, types)
        replay = ReplayPins.from_events(
            recording.events, types, unit_id=unit, upcasts=upcasts, on_miss=on_miss, into=ledger
        )
        try:
            verdict = await _play(replay, build_agent, plays, invariants, names, on_miss=on_miss)
        except BaseException:
            if ledger is not None and ledger.state == "open":
                ledger.abandon(reason="the regression run raised before it finished")
            raise
        if ledger is not None:
            # Calls drawn anew; the runs' ids and times drawn with them are positions, not calls.
            drawn = sum(1 for pin in ledger.pins() if pin.key not in replay and pin.kind not in RUN_POSITIONS)
            ledger.commit()
            verdict = dataclasses.replace(verdict, drawn=drawn)
        return verdict


async def _play(
    replay: ReplayPins,
    build_agent: AgentBuilder,
    plays: Sequence[Turn],
    invariants: Sequence[Invariant],
    names: Sequence[str],
    *,
    on_miss: OnMiss,
) -> Verdict:
    agents = build_agent(replay)
    conversation = Conversation()
    histories: dict[str | None, list[ModelMessage]] = {}
    diverged_at: int | None = None
    checked: int | None = None

    def verdict(status: Literal["passed", "failed", "diverged"], results: tuple[InvariantResult, ...]) -> Verdict:
        return Verdict(
            status=status,
            on_miss=on_miss,
            turns=len(plays),
            conversation=conversation,
            invariants=results,
            diverged_at=diverged_at,
            divergence=replay.divergence,
        )

    for number, turn in enumerate(plays, start=1):
        agent = _pick(agents, turn, number)
        prompt = turn.prompt if isinstance(turn.prompt, str) else turn.prompt(conversation)
        history = histories.get(turn.agent) if turn.history else None
        try:
            result = await agent.run(prompt, message_history=history, deps=turn.deps)
        except Exception:
            # Whatever shape the miss surfaced in, the replay knows whether the run left the recording.
            if on_miss == "strict" and replay.divergence is not None:
                diverged_at = number
                return verdict("diverged", _outcome(names, {}, checked_through=checked, complete=False, at=number))
            raise
        if diverged_at is None and replay.divergence is not None:
            diverged_at = number
        histories[turn.agent] = result.all_messages()
        exchange = Exchange(
            turn=number, agent=turn.agent, prompt=prompt, output=result.output, messages=tuple(result.new_messages())
        )
        conversation = Conversation((*conversation.exchanges, exchange))
        violations = {
            name: why for name, invariant in zip(names, invariants, strict=True) if (why := invariant(conversation))
        }
        if violations:
            last = number == len(plays)
            return verdict("failed", _outcome(names, violations, checked_through=number, complete=last, at=number))
        checked = number
    return verdict("passed", _outcome(names, {}, checked_through=checked, complete=True, at=len(plays)))


def regress(
    recording: str | os.PathLike[str] | Recording,
    build_agent: AgentBuilder,
    turns: Sequence[Turn | str],
    invariants: Sequence[Invariant],
    *,
    on_miss: OnMiss = "strict",
    unit: str | None = None,
    types: EventTypeRegistry | None = None,
    upcasts: UpcastRegistry | None = None,
    store: TimelineStore | None = None,
    policy: Literal["pinned", "live"] | None = None,
) -> Verdict:
    """Run `aregress` to completion in a new event loop (from synchronous code and tests)."""
    on_miss = miss_rule(on_miss, policy)
    return asyncio.run(
        aregress(
            recording,
            build_agent,
            turns,
            invariants,
            on_miss=on_miss,
            unit=unit,
            types=types,
            upcasts=upcasts,
            store=store,
        )
    )
