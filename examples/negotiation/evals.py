"""The negotiation as an evaluation, and a fork of its second round onto another model.

The committed recording holds each run's inputs, so it is a dataset as it stands: one case per run
(the EU's and the UK's statement in each of four rounds), asked again of a candidate pair of
negotiators with the survey and the market answered from the recording's pins. Two candidates are
scored with pydantic-evals' own evaluators and one of the talks' own:

- `recorded`: the negotiators as recorded; every statement is the recorded one;
- `house style`: the same negotiators with a pass that spells percentages out in words; every pin
  still answers (the requests are unchanged), but no quota statement states its share as a percentage.

`fork_round_two` replays the UK's turn of round 2 up to its first model answer (the market price it
looked up) and goes on live on another model, a harder-line UK negotiator, into a new unit.

Run both with `python -m examples.negotiation --evals` (pydantic-evals is installed beside anagrapheus:
see docs/how-to/evaluate-on-the-pinned-world.md).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.evals import dataset_from_recording, passed_shares, pinned_task
from anagrapheus.provider import Forked, fork_run
from anagrapheus.provider.inputs import RecordedRun
from anagrapheus.testing.rerun import read_events
from examples.negotiation.candidates import SHARE
from examples.negotiation.candidates import negotiators as candidate_pair
from examples.negotiation.talks import EU, ROUNDS, UK, Party, unit_id

__all__ = ["CANDIDATES", "StatesAShare", "evaluate", "fork_round_two", "negotiators"]

_UNIT_ROUND = re.compile(r"-round-(\d+)$")


def negotiators(*, house_style: bool = False) -> dict[str, Agent[None, str]]:
    """The scripted pair as agents; under evaluation their model and their world are answered from the pins."""
    return candidate_pair({EU.code: EU, UK.code: UK}, house_style=house_style)


CANDIDATES: dict[str, Callable[[], dict[str, Agent[None, str]]]] = {
    "recorded": negotiators,
    "house style": lambda: negotiators(house_style=True),
}
"""Two candidate pairs of negotiators, by name."""


def _party(run: RecordedRun) -> Party:
    """Who spoke in a recorded run: the party whose instructions it was sent with."""
    return EU if run.instructions == EU.instructions else UK


def _task(
    path: Path, pair: Mapping[str, Agent[None, str]], *, live_model: bool
) -> Callable[[RecordedRun], Coroutine[Any, Any, Any]]:
    tasks = {code: pinned_task(path, agent, live_model=live_model) for code, agent in pair.items()}

    async def ask(run: RecordedRun) -> Any:
        return await tasks[_party(run).code](run)

    return ask


def _evaluators() -> list[Any]:
    from pydantic_evals.evaluators import EqualsExpected

    return [EqualsExpected(), StatesAShare()]


try:
    from pydantic_evals.evaluators import Evaluator, EvaluatorContext
except ImportError:  # pragma: no cover - pydantic-evals is installed beside anagrapheus, where evals run
    Evaluator = object  # type: ignore[assignment,misc]
    EvaluatorContext = Any  # type: ignore[assignment,misc]


@dataclass
class StatesAShare(Evaluator):  # type: ignore[misc]
    """The talks' invariant as an evaluator: a statement in a quota round states the EU share as a percentage."""

    def evaluate(self, ctx: EvaluatorContext) -> bool:  # type: ignore[override]
        """True where the case's round has no quota (the final package) or its output states a share."""
        found = _UNIT_ROUND.search(ctx.inputs.unit_id)
        round_no = int(found[1]) if found else len(ROUNDS)
        return ROUNDS[round_no - 1].species is None or bool(SHARE.search(str(ctx.output)))


@dataclass(frozen=True)
class Scored:
    """One candidate's evaluation: its pydantic-evals report, and the share of each evaluator's passes."""

    report: Any
    """The `pydantic_evals.reporting.EvaluationReport`."""
    passed: dict[str, float]
    """Each evaluator's name, with the share of cases it passed."""


def evaluate(path: Path, *, live_model: bool = False) -> dict[str, Scored]:
    """Score each candidate over the recording's cases, the world answered from its pins."""
    dataset = dataset_from_recording(path, name="negotiation")
    for evaluator in _evaluators():
        dataset.add_evaluator(evaluator)
    scored: dict[str, Scored] = {}
    for name, build in CANDIDATES.items():
        report = dataset.evaluate_sync(_task(path, build(), live_model=live_model), name=name, progress=False)
        scored[name] = Scored(report=report, passed=passed_shares(report))
    return scored


def hardliner() -> FunctionModel:
    """Another UK model: it counters ten points below whatever the EU proposed, and says so."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offers = [int(share) for share in re.findall(r"EU proposes a (\d+)% EU share", str(messages[0]))]
        counter = (offers[-1] if offers else 55) - 10
        return ModelResponse(parts=[TextPart(f"The UK counters with a {counter}% EU share, and not a point more.")])

    return FunctionModel(reply, model_name="scripted-uk-hardliner")


def fork_round_two(path: Path, database: Path | None = None) -> Forked:
    """Fork the UK's turn of round 2 after its first model answer, onto the hard-line model, into a new unit."""
    events = read_events(path)
    with tempfile.TemporaryDirectory() as tmp, SQLiteEventStore(database or Path(tmp) / "fork.db") as store:
        into = PinLedger(store, EventTypeRegistry(), unit_id=f"{unit_id(2)}-hardliner")
        return fork_run(
            events, negotiators()[UK.code], into, origin=unit_id(2), run=1, after_turns=1, model=hardliner()
        )
