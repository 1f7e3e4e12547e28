"""Recordings made under the pydantic-ai floor replay under the installed release (issue #33's survival table).

Each scenario of tests/survival.py was recorded under pydantic-ai-slim 2.68.0 (the floor) into tests/data/survival/.
Here it is replayed strictly under whatever pydantic-ai is installed: `.ci/run` runs this file under the floor and
under the newest release the registry serves, so a release that stops an old recording replaying fails CI.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from importlib import metadata
from typing import Any

import pytest
from pydantic import TypeAdapter

from anagrapheus.provider.timing import TIMED
from tests.survival import DATA, SCENARIOS, live, messages_json, old_shape, replay

FLOOR = "2.68.0"
"""The release the scenarios were recorded under (each recording's provenance says so too)."""

NEW_FIELDS = {"request_timestamp", "duration", "ui_visibility"}
"""Fields a later release writes into the messages that the floor had not: the only ones a replay may add."""

DURATION = TypeAdapter(timedelta)

UPSTREAM_VALUES = {"tool_kind": "output"}
"""Values a later release writes itself where the floor wrote none (2.78 marks an output tool's parts "output")."""


def _without_upstream_values(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            name: None if UPSTREAM_VALUES.get(name) == item else _without_upstream_values(item)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [_without_upstream_values(item) for item in value]
    return value


def test_the_scenarios_were_recorded_under_the_floor() -> None:
    for name in SCENARIOS:
        header = json.loads((DATA / f"{name}.jsonl").read_text(encoding="utf-8").split("\n", 1)[0])
        assert header["provenance"]["pydantic_ai"] == FLOOR


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_recording_made_under_the_floor_replays_strictly_as_the_installed_release_runs_live(name: str) -> None:
    replayed = json.loads(messages_json(replay(name)))  # strict: a key that moved raises PinMiss here
    ran = json.loads(messages_json(live(name)))
    if SCENARIOS[name].streamed:
        # A FunctionModel stream stamps and times its response from the wall clock, live: only a replay repeats them.
        for response in (replayed[-1], ran[-1]):
            for instant in ("timestamp", *(NEW_FIELDS & response.keys())):
                response[instant] = None
    assert replayed == ran


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_replay_holds_the_recorded_messages_on_every_field_the_floor_wrote(name: str) -> None:
    replayed = json.loads(messages_json(replay(name)))
    recorded = json.loads((DATA / f"{name}.messages.json").read_text(encoding="utf-8"))
    added: list[str] = []
    shaped = old_shape(replayed, recorded, added)
    assert _without_upstream_values(shaped) == _without_upstream_values(recorded)
    assert {path.rsplit(".", 1)[-1] for path in added} <= NEW_FIELDS
    if metadata.version("pydantic-ai-slim") == FLOOR:
        assert shaped == recorded and not added


@pytest.mark.skipif(not TIMED, reason="this pydantic-ai does not time responses (request_timestamp is 2.78's)")
@pytest.mark.parametrize("name", SCENARIOS)
def test_a_replayed_response_is_timed_from_the_recorded_times_never_the_wall_clock(name: str) -> None:
    messages = json.loads(messages_json(replay(name)))
    sent = None
    timed = 0
    for message in messages:
        if message["kind"] == "request":
            sent = datetime.fromisoformat(message["timestamp"])
            continue
        assert sent is not None
        assert datetime.fromisoformat(message["request_timestamp"]) == sent
        took = datetime.fromisoformat(message["timestamp"]) - sent
        assert DURATION.validate_python(message["duration"]) == max(took, timedelta(0))
        assert datetime.fromisoformat(message["request_timestamp"]).year == 2026  # the seeded day, not today
        timed += 1
    assert timed >= 1
