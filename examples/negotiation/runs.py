"""Recording the negotiation to a file, and replaying a recording into a fresh database."""

from __future__ import annotations

import importlib.util
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai.models import Model, infer_model

from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.recording import Recording, RecordingHeader, read_recording, write_recording
from examples.negotiation.scripts import AbsentModel, ScriptedNegotiator, scripted_pair
from examples.negotiation.seeded import START, SeededRun
from examples.negotiation.talks import (
    EU,
    ROUNDS,
    UK,
    Diverged,
    LiveSitting,
    ReplaySitting,
    RoundConcluded,
    negotiate,
    negotiation_types,
    unit_id,
)
from examples.negotiation.world import World

ROOT = Path(__file__).resolve().parents[2]
"""The repository root, where `python -m examples.negotiation` runs from."""

RECORDING = ROOT / "recordings" / "negotiation.jsonl"
"""The committed recording of the scripted negotiation."""

DEFAULT_SEED = 2022
"""The seed of the committed recording."""

PROVIDERS = {
    # provider: (the module its extra installs, the environment variable holding its key, default EU and UK models)
    "openai": ("openai", "OPENAI_API_KEY", ("gpt-4.1-mini", "gpt-4o-mini")),
    "anthropic": ("anthropic", "ANTHROPIC_API_KEY", ("claude-3-5-haiku-latest", "claude-3-7-sonnet-latest")),
}

DESCRIPTION = (
    f"A {len(ROUNDS)}-round EU-UK fisheries negotiation: two negotiators on distinct models, pinned"
    " stock-survey and market-price tools, treaty and position ids minted through each round's ledger,"
    " one unit of work per round."
)


def _from_root(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


class ProviderUnavailable(Exception):
    """A real provider was asked for, but its extra or key is missing."""


@dataclass
class ReplayReport:
    """What a replay did: the transcript, and how often anything outside the recording was reached."""

    recording: Recording
    rounds: list[RoundConcluded]
    model_calls: dict[str, int]
    world_readings: int
    hits: int
    diverged: Diverged | None = None


def _scripted_header(seed: int) -> RecordingHeader:
    negotiators = scripted_pair(lambda: START)
    return RecordingHeader(
        description=DESCRIPTION,
        recorded_with=(
            "Offline; no provider was reached. Both negotiators are scripted pydantic-ai FunctionModels"
            " (scripted-eu, scripted-uk, in examples/negotiation/scripts.py) that compute their offers from"
            " the prompt and the tool results by fixed rules. The survey and market readings, the clock and"
            f" the ids are drawn from seed {seed}, so recording again writes the same bytes."
        ),
        rerecord=f"python -m examples.negotiation --record --seed {seed}",
        models={code: f"function:{negotiator.model_name}" for code, negotiator in negotiators.items()},
        details={
            "seed": seed,
            "units": [unit_id(n) for n in range(1, len(ROUNDS) + 1)],
            "tools": ["stock_survey", "market_price"],
        },
    )


def _provider_models(provider: str, eu_model: str | None, uk_model: str | None) -> dict[str, Model]:
    if provider not in PROVIDERS:
        raise ProviderUnavailable(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
    module, key, (eu_default, uk_default) = PROVIDERS[provider]
    missing: list[str] = []
    if importlib.util.find_spec(module) is None:
        missing.append(f"the {provider} extra (pip install -e '.[{provider}]')")
    if not os.environ.get(key):
        missing.append(f"{key} in the environment")
    if missing:
        raise ProviderUnavailable(
            f"--provider {provider} needs {' and '.join(missing)}. Nothing was recorded; the scripted"
            " models record offline with: python -m examples.negotiation --record"
        )
    return {
        EU.code: infer_model(f"{provider}:{eu_model or eu_default}"),
        UK.code: infer_model(f"{provider}:{uk_model or uk_default}"),
    }


async def record_negotiation(
    path: Path,
    *,
    seed: int = DEFAULT_SEED,
    provider: str | None = None,
    eu_model: str | None = None,
    uk_model: str | None = None,
    on_round: Callable[[RoundConcluded], None] | None = None,
    database: Path | None = None,
) -> list[RoundConcluded]:
    """Hold the negotiation live and write its pins to `path` as a recording.

    The log is a temporary database unless `database` names one, which must not exist yet and is kept.
    """
    types = negotiation_types()
    if database is not None and database.exists():
        raise FileExistsError(f"{database} exists; a recording is made in a fresh database")
    with tempfile.TemporaryDirectory() as tmp:
        log = database or Path(tmp) / "negotiation.db"
        if provider is None:
            run = SeededRun(seed)
            models: dict[str, Model] = {code: n.model() for code, n in scripted_pair(run.now).items()}
            world = World(random.Random(f"anagrapheus-negotiation-world:{seed}"))
            store = SQLiteEventStore(log, clock=run.now, new_event_id=run.new_id)
            new_id, clock = run.new_id, run.now
            header = _scripted_header(seed)
        else:
            models = _provider_models(provider, eu_model, uk_model)
            world = World()
            store = SQLiteEventStore(log)
            new_id, clock = None, None  # ids and clock as a live run reads them
            rerecord = f"python -m examples.negotiation --record --provider {provider}"
            rerecord += f" --eu-model {models[EU.code].model_name} --uk-model {models[UK.code].model_name}"
            header = RecordingHeader(
                description=DESCRIPTION,
                recorded_with=(
                    f"Live, through the {provider} API with the provider's own sampling; the survey and market"
                    " readings were drawn live too. Recording again draws new answers."
                ),
                rerecord=rerecord + f" --recording {_from_root(path)}",
                models={code: model.model_id for code, model in models.items()},
                details={"units": [unit_id(n) for n in range(1, len(ROUNDS) + 1)]},
            )
        with store:
            sitting = LiveSitting(store, types)
            if new_id is None:
                rounds = await negotiate(sitting, models, world, on_round=on_round)
            else:
                rounds = await negotiate(sitting, models, world, new_id=new_id, clock=clock, on_round=on_round)
            # The pins, and each run's inputs so the recording can be asked again (evals, reruns, forks).
            kept = ("pin_promoted", "run_inputs")
            write_recording(path, (e for e in store.read(namespace="anagrapheus") if e.type in kept), header=header)
    return rounds


def _replay_models(recording: Recording) -> tuple[dict[str, Model], Callable[[], dict[str, int]]]:
    """Models with the recorded ids: the scripted negotiators where it was scripted, stand-ins otherwise."""
    scripted = scripted_pair(lambda: START)
    models: dict[str, Model] = {}
    counters: dict[str, ScriptedNegotiator | AbsentModel] = {}
    for code in (EU.code, UK.code):
        model_id = recording.header.models.get(code, f"function:{scripted[code].model_name}")
        if model_id == f"function:{scripted[code].model_name}":
            models[code] = scripted[code].model()
            counters[model_id] = scripted[code]
        else:
            stand_in = AbsentModel(model_id)
            models[code] = stand_in
            counters[model_id] = stand_in
    return models, lambda: {model_id: counter.calls for model_id, counter in counters.items()}


async def replay_negotiation(
    path: Path,
    *,
    diverge: bool = False,
    database: Path | None = None,
    on_round: Callable[[RoundConcluded], None] | None = None,
) -> ReplayReport:
    """Replay a recording strictly into a fresh database; a changed prompt is reported, not redrawn.

    The database is a temporary file unless `database` names one, which must not exist yet.
    """
    types = negotiation_types()
    recording = read_recording(path, registry=types)
    models, calls = _replay_models(recording)
    world = World()
    if database is not None and database.exists():
        raise FileExistsError(f"{database} exists; a replay goes into a fresh database")
    with tempfile.TemporaryDirectory() as tmp, SQLiteEventStore(database or Path(tmp) / "replay.db") as store:
        sitting = ReplaySitting(store, types, recording.events)
        diverged: Diverged | None = None
        try:
            rounds = await negotiate(sitting, models, world, diverge=diverge, on_round=on_round)
        except Diverged as e:
            diverged, rounds = e, e.concluded
        # What the fresh log holds is what the report shows: the outcomes the replay appended.
        logged = [types.decode(event) for event in store.read()]
        assert [r for r in logged if isinstance(r, RoundConcluded)] == rounds
    return ReplayReport(
        recording=recording,
        rounds=rounds,
        model_calls=calls(),
        world_readings=world.readings,
        hits=sitting.hits,
        diverged=diverged,
    )
