"""The registry argument is optional wherever it is taken: the built-in events are the default, the old form works."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from anagrapheus import EventTypeRegistry, PinLedger, Pinning, ReplayPins, SQLiteEventStore, aresume, resume
from anagrapheus.provider import UnitPerRun
from anagrapheus.timeline import PinPromoted, write_recording
from anagrapheus.timeline.recording import read_recording, stream_pins

PROMPT = "Round 1: state the UK position on fisheries."
HEADER = {"description": "one round", "recorded_with": "TestModel", "rerecord": "pytest"}


def _record(store: SQLiteEventStore, *registry: EventTypeRegistry) -> str:
    ledger = PinLedger(store, *registry, unit_id="round-1")
    output = Agent(TestModel(), capabilities=[Pinning(ledger)]).run_sync(PROMPT).output
    ledger.commit()
    return output


@pytest.mark.parametrize("registry", [(), (EventTypeRegistry(),)], ids=["default", "given"])
def test_a_run_records_and_replays_with_or_without_a_registry(tmp_path: Path, registry: tuple[Any, ...]) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        output = _record(store, *registry)
        path = write_recording(
            tmp_path / "run.jsonl", store.read(namespace="anagrapheus", type="pin_promoted"), header=HEADER
        )
        for replay in (
            ReplayPins.from_events(store.read(), *registry),
            ReplayPins.from_store(store, *registry),
            ReplayPins.from_recording(path, *registry),
        ):
            assert Agent(TestModel(), capabilities=[Pinning(replay)]).run_sync(PROMPT).output == output
    _, pins = stream_pins(path, *registry)
    assert {pin.unit_id for pin in pins} == {"round-1"}
    assert all(isinstance(event, PinPromoted) for event in read_recording(path).decode(*registry))


def test_a_unit_per_run_defaults_to_the_built_in_events(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        units = UnitPerRun(store, unit_of=lambda ctx: "u")
        assert (PinPromoted.namespace, PinPromoted.event_type) in units.registry


@pytest.mark.parametrize("registry", [{}, {"registry": EventTypeRegistry()}], ids=["default", "given"])
def test_resume_defaults_to_the_built_in_events(tmp_path: Path, registry: dict[str, Any]) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        assert resume(Agent(TestModel()), PROMPT, store=store, unit_id="a", **registry).output
        assert asyncio.run(aresume(Agent(TestModel()), PROMPT, store=store, unit_id="b", **registry)).output
        assert [unit for unit in ("a", "b") if PinLedger(store, unit_id=unit).state == "committed"] == ["a", "b"]
