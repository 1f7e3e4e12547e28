"""Ask a recording's runs again, from their recorded inputs, of an agent (the same or a changed one).

Strictly replayed, every pin answers and nothing reaches the world; with the model live, the world
(tools, MCP servers, output functions) is still answered from pins and only model requests are drawn.
Each run ends `same` (no miss, the recorded output), `diverged` (what moved) or `failed`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic_ai import Agent
from typing_extensions import override

from anagrapheus.errors import PinMiss, UsageError
from anagrapheus.provider import Pinning, every_agent_run, refuse_model_requests
from anagrapheus.provider.discovery import TOOLSET_INSTRUCTIONS, TOOLSET_TOOLS
from anagrapheus.provider.inputs import RecordedRun, output_json, recorded_runs
from anagrapheus.provider.outputs import OUTPUT_CALL
from anagrapheus.provider.tools import TOOL_CALL
from anagrapheus.testing.network import loopback_only
from anagrapheus.timeline import (
    EventTypeRegistry,
    JSONValue,
    PinLedger,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    canonical_json,
)
from anagrapheus.timeline.opening import read_events
from anagrapheus.timeline.resolver import DelegatingResolver, Resolver

__all__ = [
    "WORLD_KINDS",
    "RerunOutcome",
    "RerunStatus",
    "WorldPinned",
    "ask_recorded_runs",
    "read_events",
    "rerun",
    "rerun_events",
]

RerunStatus = Literal["same", "diverged", "failed"]
"""How a re-run run ended against its recording."""

WORLD_KINDS = frozenset((TOOL_CALL, TOOLSET_TOOLS, TOOLSET_INSTRUCTIONS, OUTPUT_CALL))
"""The pin kinds that read the world (tools, MCP servers, output functions): answered only from pins."""


@dataclass(frozen=True)
class RerunOutcome:
    """One recorded run asked again: how it ended, what moved, and the outputs side by side."""

    unit_id: str
    """The unit the run was recorded in."""
    run_id: str
    """The recorded run's id."""
    status: RerunStatus
    """`same`, `diverged` or `failed`."""
    moved: tuple[str, ...] = ()
    """What moved: the fields of the first call the recording could not answer, or `output`."""
    detail: str = ""
    """One paragraph saying what happened."""
    expected: JSONValue = None
    """The recorded output."""
    output: JSONValue = None
    """The output this run gave, when it completed."""
    prompt: object = field(default=None, repr=False)
    """The recorded prompt the run was asked."""

    def describe(self) -> str:
        """One line (or a paragraph, when it diverged) naming the run and how it ended."""
        head = f"run {self.run_id} of unit {self.unit_id}: {self.status}"
        return head if not self.detail else f"{head}: {self.detail}"


class WorldPinned(DelegatingResolver):
    """A resolver that answers the world's calls only from pins and draws whatever else the recording lacks live.

    A model request the recording has answers from its pin; one it lacks (a changed prompt, a live model's
    new answer) is drawn through `live`. A tool call, MCP discovery or output function it lacks is a miss,
    raised as strict replay raises it: the world is never reached.
    """

    def __init__(self, pins: ReplayPins, live: Resolver, *, world_kinds: frozenset[str] = WORLD_KINDS) -> None:
        self.pins = pins
        """The recording's pins."""
        self.live = live
        """Draws what the recording lacks and the world does not answer (the model)."""
        self.world_kinds = world_kinds
        """The kinds answered only from pins."""

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        """The recording's pins for a key they hold or a kind of the world's; `live` for the rest."""
        return (self.pins if key in self.pins or kind in self.world_kinds else self.live), key


def rerun(
    path: str | Path,
    agent: Agent[Any, Any],
    *,
    unit: str | None = None,
    live_model: bool = False,
    deps: Callable[[RecordedRun], object] | None = None,
) -> list[RerunOutcome]:
    """Ask each recorded run of `unit` (or of every unit) in the recording or database at `path` again of `agent`."""
    return rerun_events(read_events(path), agent, unit=unit, live_model=live_model, deps=deps)


def rerun_events(
    events: Iterable[StoredEvent],
    agent: Agent[Any, Any],
    *,
    unit: str | None = None,
    live_model: bool = False,
    deps: Callable[[RecordedRun], object] | None = None,
) -> list[RerunOutcome]:
    """Like `rerun`, over events already read; the runs of a unit are asked in the order they were recorded."""
    events = list(events)
    runs = [run for run in recorded_runs(events, unit_id=unit) if not run.nested]
    if not runs:
        where = f"unit {unit}" if unit is not None else "the recording"
        raise UsageError(f"{where} holds no recorded run inputs: record it with Pinning(record_inputs=True)")
    units = list(dict.fromkeys(run.unit_id for run in runs))
    registry = EventTypeRegistry()
    outcomes: list[RerunOutcome] = []
    with tempfile.TemporaryDirectory(prefix="anagrapheus-rerun-") as scratch:
        for unit_id in units:
            pins = ReplayPins.from_events(events, registry, unit_id=unit_id)
            with ExitStack() as stack:
                resolver: Resolver = pins
                if live_model:
                    store = stack.enter_context(SQLiteEventStore(Path(scratch) / f"{len(outcomes)}.db"))
                    live = PinLedger(store, registry)
                    stack.callback(live.abandon, reason="a re-run with the model live: nothing is kept")
                    resolver = WorldPinned(pins, live)
                else:
                    stack.enter_context(refuse_model_requests())
                    stack.enter_context(loopback_only())
                stack.enter_context(every_agent_run(Pinning(resolver, record_inputs=False)))
                outcomes.extend(_asked(agent, run, deps) for run in runs if run.unit_id == unit_id)
    return outcomes


def _asked(agent: Agent[Any, Any], run: RecordedRun, deps: Callable[[RecordedRun], object] | None) -> RerunOutcome:
    """Ask one recorded run again and judge how it ended."""

    def ends(
        status: RerunStatus, detail: str = "", moved: tuple[str, ...] = (), output: JSONValue = None
    ) -> RerunOutcome:
        return RerunOutcome(
            unit_id=run.unit_id,
            run_id=run.run_id,
            status=status,
            moved=moved,
            detail=detail,
            expected=run.output,
            output=output,
            prompt=run.prompt,
        )

    if run.left_out:
        return ends(
            "failed",
            detail=f"its {' and '.join(run.left_out)} {'was' if len(run.left_out) == 1 else 'were'} left out of the"
            " recording for size",
        )
    kwargs = run.run_kwargs()
    if deps is not None:
        kwargs["deps"] = deps(run)
    try:
        with run.as_its_caller():
            result = agent.run_sync(**kwargs)
    except PinMiss as e:
        moved = e.divergence.moved or (e.divergence.kind,)
        return ends("diverged", moved=moved, detail=str(e))
    except Exception as e:
        if run.outcome == "failed" and run.error is not None and run.error.startswith(f"{type(e).__name__}:"):
            return ends("same", detail=f"failed as recorded: {run.error}")
        return ends("failed", detail=f"{type(e).__name__}: {e}")
    output = output_json(result.output)
    if run.outcome == "failed":
        return ends("diverged", moved=("outcome",), detail=f"completed; it failed: {run.error}")
    if canonical_json(output) != canonical_json(run.output):
        detail = f"the output moved: recorded {canonical_json(run.output)[:200]}, now {canonical_json(output)[:200]}"
        return ends("diverged", moved=("output",), detail=detail, output=output)
    return ends("same", output=output)


def ask_recorded_runs(
    path: str | Path, agent: Agent[Any, Any], *, deps: Callable[[RecordedRun], object] | None = None
) -> int:
    """Ask each recorded run in the recording at `path` again of `agent`, under whatever pins the caller set up.

    For a test marked for the pytest plugin: its session answers (and judges) every call, so a call the
    recording lacks fails the test naming what moved. An output other than the recorded one raises
    `AssertionError`. Returns how many runs were asked.
    """
    runs = [run for run in recorded_runs(read_events(path)) if not run.nested]
    if not runs:
        raise UsageError(
            f"{path} holds no recorded run inputs: export the unit again with"
            " `anagrapheus export DB --unit ID --agent MODULE:ATTR --as-test PATH`"
        )
    for run in runs:
        kwargs = run.run_kwargs()
        if deps is not None:
            kwargs["deps"] = deps(run)
        with run.as_its_caller():
            output = output_json(agent.run_sync(**kwargs).output)
        if canonical_json(output) != canonical_json(run.output):
            raise AssertionError(
                f"run {run.run_id} of unit {run.unit_id}: the output moved:\n"
                f"  recorded {canonical_json(run.output)[:500]}\n  now      {canonical_json(output)[:500]}"
            )
    return len(runs)
