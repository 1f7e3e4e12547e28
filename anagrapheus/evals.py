"""Evaluate a changed agent against a recording's pinned world: one case per recorded run, a task that asks it.

`recorded_cases(path)` reads the cases (each recorded run's inputs, its recorded output as the expected
one); `pinned_task(path, agent)` returns the task an evaluation framework calls per case: it asks the
candidate agent the case's run with every tool call, MCP server and output function answered from
the recording's pins, and the model pinned too or, with `live_model=True`, drawn live. A pin the
candidate needs but the recording lacks raises `PinMiss` for that case (saying what moved), and is
never answered live. `dataset_from_recording` builds a `pydantic_evals.Dataset` of the cases, and
`passed_shares` / `below` turn its report into each evaluator's share of passed cases and a gate.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent

from anagrapheus.errors import UsageError
from anagrapheus.provider import Pinning
from anagrapheus.provider.inputs import RecordedRun, recorded_runs
from anagrapheus.provider.run_clock import RUN_ID, RunClocks
from anagrapheus.testing.rerun import WorldPinned, read_events
from anagrapheus.timeline import (
    EventTypeRegistry,
    JSONValue,
    PinLedger,
    PinPromoted,
    ReplayPins,
    Resolver,
    SQLiteEventStore,
    StoredEvent,
    pin_key,
)
from anagrapheus.timeline.events import BUILTIN_NAMESPACE

__all__ = ["RecordedCase", "below", "dataset_from_recording", "passed_shares", "pinned_task", "recorded_cases"]


@dataclass(frozen=True)
class RecordedCase:
    """One recorded run as an evaluation case: its name, its inputs, and the output it gave."""

    name: str
    """`<unit>/<position>`: the unit and the run's place among the unit's runs."""
    inputs: RecordedRun
    """What the run was asked."""
    expected_output: JSONValue
    """The output the recorded run gave, as JSON."""


def recorded_cases(path: str | Path, *, unit: str | None = None) -> list[RecordedCase]:
    """One case per completed, top-level recorded run of `unit` (or of every unit), in recorded order."""
    runs = [run for run in recorded_runs(read_events(path), unit_id=unit) if not run.nested]
    if not runs:
        raise UsageError(f"{path} holds no recorded run inputs: record it under Pinning(record_inputs=True)")
    cases: list[RecordedCase] = []
    positions: dict[str, int] = {}
    for run in runs:
        position = positions[run.unit_id] = positions.get(run.unit_id, -1) + 1
        if run.outcome == "completed":
            cases.append(RecordedCase(f"{run.unit_id}/{position}", run, run.output))
    return cases


def pinned_task(
    path: str | Path,
    agent: Agent[Any, Any],
    *,
    live_model: bool = False,
    deps: Callable[[RecordedRun], object] | None = None,
) -> Callable[[RecordedRun], Coroutine[Any, Any, Any]]:
    """The task that asks `agent` a case's recorded run against the recording's pins (the model live if asked).

    Each case gets a resolver of its own over its unit's pins, given to its run alone, so cases can run
    concurrently. Returns the run's output; raises `PinMiss` (what moved) where the recording has no pin.
    """
    events = read_events(path)
    registry = EventTypeRegistry()

    async def task(run: RecordedRun) -> Any:
        pins = ReplayPins.from_events(events, registry, unit_id=run.unit_id)
        clocks = RunClocks.of(pins)
        if clocks is not None:  # a replay keeps its runs' clocks
            with clocks.lock:
                # The case's run is asked alone: it takes its recorded place among the unit's runs (its id, its clock).
                clocks.runs = _position_of(events, run)
        kwargs = run.run_kwargs()
        if deps is not None:
            kwargs["deps"] = deps(run)
        with (
            tempfile.TemporaryDirectory(prefix="anagrapheus-eval-") as scratch,
            SQLiteEventStore(Path(scratch) / "live.db") as store,
        ):
            resolver: Resolver = pins
            live = PinLedger(store, registry)
            if live_model:
                resolver = WorldPinned(pins, live)
            try:
                with run.as_its_caller():
                    result = await agent.run(**kwargs, capabilities=[Pinning(resolver, record_inputs=False)])
            finally:
                live.abandon(reason="an evaluation case: nothing is kept")
        return result.output

    return task


def _position_of(events: list[StoredEvent], run: RecordedRun) -> int:
    """The run's place among its unit's runs: the position whose run id pin holds its id."""
    keys = {
        pin.key
        for stored in events
        if stored.namespace == BUILTIN_NAMESPACE and stored.type == PinPromoted.event_type
        for pin in (PinPromoted.read(stored, _REGISTRY),)
        if pin.kind == RUN_ID and pin.unit_id == run.unit_id and pin.raw == run.run_id
    }
    return next(
        (position for position in range(_MAX_RUNS) if pin_key(RUN_ID, {"unit": run.unit_id, "run": position}) in keys),
        0,
    )


_REGISTRY = EventTypeRegistry()
_MAX_RUNS = 10_000


def dataset_from_recording(path: str | Path, *, unit: str | None = None, name: str | None = None) -> Any:
    """A `pydantic_evals.Dataset` with one case per recorded run (needs pydantic-evals installed)."""
    try:
        evals: Any = importlib.import_module("pydantic_evals")
    except ImportError as e:
        raise UsageError(
            "dataset_from_recording needs pydantic-evals: its newest release pins an older pydantic-ai, so install"
            " it beside with `pip install -e '.[evals]' && pip install --no-deps pydantic-evals==2.62.0`;"
            " recorded_cases and pinned_task work with any evaluation framework"
        ) from e
    cases: list[Any] = [
        evals.Case(name=case.name, inputs=case.inputs, expected_output=case.expected_output)
        for case in recorded_cases(path, unit=unit)
    ]
    return evals.Dataset(name=name or Path(path).stem, cases=cases)


def passed_shares(report: Any) -> dict[str, float]:
    """Each evaluator's share of the cases it passed in a pydantic-evals `EvaluationReport`, from 0 to 1.

    A case that failed to run (`report.failures`: a `PinMiss`, say) counts as failed by every evaluator, so
    a candidate that leaves the recording cannot score well by scoring few cases.
    """
    totals: dict[str, int] = {}
    for case in report.cases:
        for evaluator, result in case.assertions.items():
            totals[evaluator] = totals.get(evaluator, 0) + bool(result.value)
    scored = len(report.cases) + len(report.failures)
    return {evaluator: passed / scored for evaluator, passed in totals.items()}


def below(report: Any, min_share: float) -> dict[str, float]:
    """The evaluators whose share of passed cases (`passed_shares`) is below `min_share`: empty when the gate passes.

    A report with no case scored at all is below any threshold above 0 (as `"cases"`, with share 0).
    """
    if not 0 <= min_share <= 1:
        raise UsageError(f"a threshold is a share from 0 to 1, not {min_share}")
    shares = passed_shares(report)
    if not shares and min_share > 0:
        return {"cases": 0.0}
    return {evaluator: share for evaluator, share in shares.items() if share < min_share}
