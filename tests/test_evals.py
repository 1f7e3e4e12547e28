"""Evaluation cases from a recording, and a task asking a candidate agent against the recording's pinned world."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from pydantic_ai import Agent

from anagrapheus.errors import PinMiss, UsageError
from anagrapheus.evals import dataset_from_recording, pinned_task, recorded_cases
from tests import rerun_agents
from tests.conftest import Scripted
from tests.testing.test_rerun import record


def test_one_case_per_recorded_run_with_its_output_expected(production: Path) -> None:
    cases = recorded_cases(production)
    assert [case.name for case in cases] == ["support-7/0", "support-7/1"]
    assert cases[1].inputs.prompt == "And tomorrow?"
    assert cases[0].expected_output == "The UK holds firm on fisheries. sunny in Paris"
    with pytest.raises(UsageError, match="holds no recorded run inputs"):
        recorded_cases(record(production.with_name("old.db"), record_inputs=False))


def test_two_candidates_scored_against_the_pinned_world(production: Path) -> None:
    cases = recorded_cases(production)
    reached = len(rerun_agents.WORLD)

    async def score(agent: Agent[str, str], *, live_model: bool) -> list[object]:
        task = pinned_task(production, agent, live_model=live_model, deps=lambda run: "ann")
        return list(await asyncio.gather(*(task(case.inputs) for case in cases), return_exceptions=True))

    # The recorded agent, strictly pinned: every case gives its expected output.
    assert asyncio.run(score(rerun_agents.support, live_model=False)) == [case.expected_output for case in cases]
    # A candidate with another prompt and a model that answers otherwise, the model live: scored on what it says.
    changed = rerun_agents.build(instructions="Answer in two lines.", text="The EU and the UK hold firm.")
    outputs = asyncio.run(score(changed, live_model=True))
    assert outputs == ["The EU and the UK hold firm. sunny in Paris"] * 2
    assert len(rerun_agents.WORLD) == reached  # the world was answered from pins for both


def test_a_pin_the_recording_lacks_is_reported_per_case(production: Path) -> None:
    candidate = Agent(Scripted("support").model, deps_type=str, instructions="Answer in one line.", name="support")

    @candidate.tool_plain
    def forecast(city: str) -> str:
        """Read tomorrow's weather in a city."""
        raise AssertionError("never reached: the world is pinned")

    task = pinned_task(production, candidate, live_model=True)
    (case, _) = recorded_cases(production)
    with pytest.raises(PinMiss, match="no pin for tool_call"):
        asyncio.run(task(case.inputs))

    strict = pinned_task(production, rerun_agents.reworded)
    with pytest.raises(PinMiss) as moved:
        asyncio.run(strict(case.inputs))
    assert "instructions[0]" in moved.value.divergence.moved


def test_a_dataset_needs_pydantic_evals(production: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As where it is not installed (None in sys.modules makes its import fail), whether or not it is here.
    monkeypatch.setitem(sys.modules, "pydantic_evals", None)
    with pytest.raises(UsageError, match="needs pydantic-evals"):
        dataset_from_recording(production)


def test_a_run_that_failed_is_no_case(tmp_path: Path) -> None:
    from anagrapheus import Pinning
    from anagrapheus.provider import every_agent_run
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore

    failing = Agent(Scripted("m").model)

    @failing.tool_plain
    def weather(city: str) -> str:
        """Read the weather in a city."""
        raise RuntimeError("the station is down")

    log = tmp_path / "prod.db"
    with SQLiteEventStore(log) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        with every_agent_run(Pinning(ledger)):
            with pytest.raises(RuntimeError):
                failing.run_sync("Where?")
            Agent(Scripted("m").model).run_sync("And now?")
        ledger.commit()
    assert [case.name for case in recorded_cases(log)] == ["u/1"]
