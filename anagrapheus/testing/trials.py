"""Trials: ask each recorded run N times with the model live and report how often its outcome holds.

A run's outcome is its output and the tool calls it made (names and arguments, in order). The recorded
outcome is what a strict replay of the run gives; each trial asks the run again from its recorded inputs
with every model request drawn live (the world, its ids and its clock answered from the recording, as a
drift does), in a unit of its own, so no trial is answered from another's draw. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent

from anagrapheus.errors import UsageError
from anagrapheus.provider.inputs import RecordedRun
from anagrapheus.testing.rerun import RerunOutcome, read_events, rerun_events
from anagrapheus.timeline import StoredEvent, canonical_json

__all__ = ["TrialOutcome", "trial_events", "trials"]


@dataclass(frozen=True)
class TrialOutcome:
    """One recorded run asked `trials` times live: how many of them ended as it was recorded."""

    unit_id: str
    """The unit the run was recorded in."""
    run_id: str
    """The recorded run's id."""
    trials: int
    """How many times it was asked."""
    matched: int
    """How many of those gave the recorded output and made the recorded tool calls."""
    other: str = ""
    """The first trial that did not match, said as `output: ...` or `tool calls: ...`; empty when all did."""

    @property
    def share(self) -> float:
        """`matched / trials`, from 0 to 1."""
        return self.matched / self.trials

    def describe(self) -> str:
        """`run X of unit U: 3 of 5 (60%) held; first other: ...`."""
        text = f"run {self.run_id} of unit {self.unit_id}: {self.matched} of {self.trials} ({self.share:.0%}) held"
        return text if not self.other else f"{text}; first other: {self.other}"


def trials(
    path: str | Path,
    agent: Agent[Any, Any],
    *,
    times: int,
    unit: str | None = None,
    deps: Callable[[RecordedRun], object] | None = None,
) -> list[TrialOutcome]:
    """Ask each recorded run of `unit` (or of every unit) at `path` `times` times live; see the module."""
    return trial_events(read_events(path), agent, times=times, unit=unit, deps=deps)


def trial_events(
    events: Iterable[StoredEvent],
    agent: Agent[Any, Any],
    *,
    times: int,
    unit: str | None = None,
    deps: Callable[[RecordedRun], object] | None = None,
) -> list[TrialOutcome]:
    """Like `trials`, over events already read."""
    if times < 1:
        raise UsageError(f"trials must be asked at least once, not {times} times")
    events = list(events)
    recorded = rerun_events(events, agent, unit=unit, deps=deps)
    for outcome in recorded:
        if outcome.status != "same":
            raise UsageError(
                f"run {outcome.run_id} of unit {outcome.unit_id} does not replay as recorded ({outcome.status}:"
                f" {outcome.detail}): trials compare against the recorded outcome, so the agent must replay it"
            )
    asked = [rerun_events(events, agent, unit=unit, deps=deps, drift=True) for _ in range(times)]
    results: list[TrialOutcome] = []
    for index, expected in enumerate(recorded):
        others = [other for trial in asked if (other := _other(expected, trial[index])) is not None]
        results.append(
            TrialOutcome(
                unit_id=expected.unit_id,
                run_id=expected.run_id,
                trials=times,
                matched=times - len(others),
                other=others[0] if others else "",
            )
        )
    return results


def _other(expected: RerunOutcome, trial: RerunOutcome) -> str | None:
    """How a trial's outcome differs from the recorded one; None when it held."""
    if trial.status == "failed" or (trial.status == "drifted" and trial.output is None):
        return f"it did not complete: {trial.detail[:200]}"
    if canonical_json(trial.output) != canonical_json(expected.output):
        return f"output: recorded {canonical_json(expected.output)[:120]}, now {canonical_json(trial.output)[:120]}"
    if trial.tool_calls != expected.tool_calls:
        made = ", ".join(map(str, trial.tool_calls)) or "none"
        return f"tool calls: recorded {', '.join(map(str, expected.tool_calls)) or 'none'}, now {made}"
    return None
