"""Ask a recording's runs again, from their recorded inputs, of an agent (the same or a changed one).

Strictly replayed, every pin answers and nothing reaches the world; with the model live, the world
(tools, MCP servers, output functions) is still answered from pins and only model requests are drawn.
Each run ends `same` (no miss, the recorded output), `diverged` (what moved) or `failed`.
"""

from __future__ import annotations

import dataclasses
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
from anagrapheus.provider.inputs import RecordedRun, output_json, recorded_runs
from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.testing.calls import ToolCall, tool_calls
from anagrapheus.testing.drift import WORLD_KINDS, CallDrift, DriftPins, drifted_calls
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
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver
from anagrapheus.timeline.stores.opening import read_events

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

RerunStatus = Literal["same", "diverged", "failed", "drifted"]
"""How a re-run run ended against its recording (`drifted`: asked with `drift=True`, a live model call answered
otherwise than recorded)."""


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
    calls: tuple[CallDrift, ...] = ()
    """With `drift=True`: each model call the run asked live, against the recorded answer."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls the run made (its new messages'), when it completed."""

    def describe(self) -> str:
        """One line (or a paragraph, when it diverged) naming the run and how it ended."""
        head = f"run {self.run_id} of unit {self.unit_id}: {self.status}"
        text = head if not self.detail else f"{head}: {self.detail}"
        return "\n    ".join([text, *(call.describe() for call in self.calls)])


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
    drift: bool = False,
    provider_ids: bool = False,
) -> list[RerunOutcome]:
    """Ask each recorded run of `unit` (or of every unit) in the recording or database at `path` again of `agent`.

    With `drift`, every model call is drawn live (the world still answered from pins) and compared with its
    recorded answer (`RerunOutcome.calls`; `provider_ids` compares the provider's response ids too); a run
    with a call answered otherwise, or asking what the recording lacks, is `drifted`. Nothing is written.
    """
    return rerun_events(
        read_events(path), agent, unit=unit, live_model=live_model, deps=deps, drift=drift, provider_ids=provider_ids
    )


def rerun_events(
    events: Iterable[StoredEvent],
    agent: Agent[Any, Any],
    *,
    unit: str | None = None,
    live_model: bool = False,
    deps: Callable[[RecordedRun], object] | None = None,
    drift: bool = False,
    provider_ids: bool = False,
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
                live: PinLedger | None = None
                if live_model or drift:
                    store = stack.enter_context(SQLiteEventStore(Path(scratch) / f"{len(outcomes)}.db"))
                    live = PinLedger(store, registry)
                    stack.callback(live.abandon, reason="a re-run with the model live: nothing is kept")
                    resolver = DriftPins(pins, live) if drift else WorldPinned(pins, live)
                else:
                    stack.enter_context(refuse_model_requests())
                    stack.enter_context(loopback_only())
                stack.enter_context(every_agent_run(Pinning(resolver, record_inputs=False)))
                for run in runs:
                    if run.unit_id != unit_id:
                        continue
                    if live is None or not drift:
                        outcomes.append(_asked(agent, run, deps))
                        continue
                    asked_before = sum(1 for pin in live.pins() if pin.kind.split("!")[0] == MODEL_CALL)
                    outcome = _asked(agent, run, deps)
                    calls = drifted_calls(pins, live, provider_ids=provider_ids, since=asked_before)
                    outcomes.append(_drifted(outcome, tuple(calls)))
    return outcomes


def _asked(agent: Agent[Any, Any], run: RecordedRun, deps: Callable[[RecordedRun], object] | None) -> RerunOutcome:
    """Ask one recorded run again and judge how it ended."""
    made: tuple[ToolCall, ...] = ()

    def ends(
        status: RerunStatus, detail: str = "", moved: tuple[str, ...] = (), output: JSONValue = None
    ) -> RerunOutcome:
        return RerunOutcome(
            tool_calls=made,
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
    made = tuple(tool_calls(result.new_messages()))
    if run.outcome == "failed":
        return ends("diverged", moved=("outcome",), detail=f"completed; it failed: {run.error}")
    if canonical_json(output) != canonical_json(run.output):
        detail = f"the output moved: recorded {canonical_json(run.output)[:200]}, now {canonical_json(output)[:200]}"
        return ends("diverged", moved=("output",), detail=detail, output=output)
    return ends("same", output=output)


def _drifted(outcome: RerunOutcome, calls: tuple[CallDrift, ...]) -> RerunOutcome:
    """A run asked with its model live, judged by its calls: `same` only when every answer was the recorded one."""
    moved = [call for call in calls if call.status != "same"]
    if not moved and outcome.status in ("same", "failed"):
        # Every answer as recorded: a failure is the agent's own, not drift.
        return dataclasses.replace(outcome, calls=calls)
    detail = f"{len(moved)} of {len(calls)} model call(s) answered otherwise or asked anew"
    if outcome.status != "same":
        detail += f"; then {outcome.detail}"
    return dataclasses.replace(outcome, status="drifted", detail=detail, calls=calls)


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
