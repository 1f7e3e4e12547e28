"""`dataset_from_recording` with pydantic-evals itself: its evaluators and report, the world answered from pins.

pydantic-evals' newest release (2.62.0) declares `pydantic-ai-slim==2.62.0`, below this project's floor, so it
is no dependency of anagrapheus: `.ci/run` installs it beside with `--no-deps` and runs these (a skip there is
a failure); the README's suite skips them when it is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pydantic_evals = pytest.importorskip(
    "pydantic_evals",
    reason="pydantic-evals is not installed: pip install -e '.[evals]' && pip install --no-deps pydantic-evals==2.62.0",
)

from pydantic_evals.evaluators import EqualsExpected  # noqa: E402

from anagrapheus.errors import UsageError  # noqa: E402
from anagrapheus.evals import below, dataset_from_recording, passed_shares, pinned_task  # noqa: E402
from tests import rerun_agents  # noqa: E402


def test_a_dataset_holds_one_case_per_recorded_run(production: Path) -> None:
    dataset = dataset_from_recording(production, name="support desk")
    assert isinstance(dataset, pydantic_evals.Dataset)
    assert dataset.name == "support desk"
    assert [case.name for case in dataset.cases] == ["support-7/0", "support-7/1"]
    assert [case.inputs.prompt for case in dataset.cases] == ["Where is my parcel?", "And tomorrow?"]
    assert dataset.cases[0].expected_output == "The UK holds firm on fisheries. sunny in Paris"
    assert dataset_from_recording(production).name == "prod"


def test_two_candidates_scored_by_pydantic_evals_with_the_world_pinned(production: Path) -> None:
    dataset = dataset_from_recording(production)
    dataset.add_evaluator(EqualsExpected())
    reached = len(rerun_agents.WORLD)

    recorded = dataset.evaluate_sync(pinned_task(production, rerun_agents.support, deps=lambda run: "ann"))
    assert [case.assertions["EqualsExpected"].value for case in recorded.cases] == [True, True]
    assert recorded.failures == []

    changed = rerun_agents.build(instructions="Answer in two lines.", text="The EU and the UK hold firm.")
    warmer = dataset.evaluate_sync(pinned_task(production, changed, live_model=True, deps=lambda run: "ann"))
    assert [case.output for case in warmer.cases] == ["The EU and the UK hold firm. sunny in Paris"] * 2
    assert [case.assertions["EqualsExpected"].value for case in warmer.cases] == [False, False]
    assert len(rerun_agents.WORLD) == reached  # every tool call was answered from the recording


def test_a_pin_the_candidate_lacks_is_that_cases_failure_naming_what_moved(production: Path) -> None:
    dataset = dataset_from_recording(production)
    report = dataset.evaluate_sync(pinned_task(production, rerun_agents.reworded))
    assert report.cases == []
    assert [failure.name for failure in report.failures] == ["support-7/0", "support-7/1"]
    assert all("PinMiss" in failure.error_message for failure in report.failures)
    assert all("instructions[0]" in failure.error_message for failure in report.failures)


def test_a_gate_over_a_report_counts_the_cases_that_failed_to_run_as_failed(production: Path) -> None:
    dataset = dataset_from_recording(production)
    dataset.add_evaluator(EqualsExpected())
    recorded = dataset.evaluate_sync(pinned_task(production, rerun_agents.support, deps=lambda run: "ann"))
    assert passed_shares(recorded) == {"EqualsExpected": 1.0}
    assert below(recorded, 1.0) == {}

    changed = rerun_agents.build(instructions="Answer in two lines.", text="The EU and the UK hold firm.")
    warmer = dataset.evaluate_sync(pinned_task(production, changed, live_model=True, deps=lambda run: "ann"))
    assert below(warmer, 0.5) == {"EqualsExpected": 0.0}
    assert below(warmer, 0.0) == {}

    # Every case left the recording: nothing was scored, which no threshold above 0 lets through.
    diverged = dataset.evaluate_sync(pinned_task(production, rerun_agents.reworded))
    assert passed_shares(diverged) == {}
    assert below(diverged, 0.5) == {"cases": 0.0}
    with pytest.raises(UsageError, match="a threshold is a share from 0 to 1, not 80"):
        below(recorded, 80)
