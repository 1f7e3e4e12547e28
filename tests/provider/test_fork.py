"""Fork a recorded run: its first pins replayed, then live from a chosen point into a new unit naming its origin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anagrapheus.errors import UsageError
from anagrapheus.provider.fork import ForkPins, fork_run
from anagrapheus.testing.rerun import read_events
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from tests import rerun_agents
from tests.conftest import Scripted


def test_a_fork_after_the_first_turn_keeps_the_origins_first_pins_and_goes_on_on_another_model(
    production: Path,
) -> None:
    events = read_events(production)
    other = Scripted("other", text="A fresh answer.")
    reached = len(rerun_agents.WORLD)
    with SQLiteEventStore(production) as store:
        forked = fork_run(
            events,
            rerun_agents.support,
            PinLedger(store, EventTypeRegistry(), unit_id="support-7-fork"),
            origin="support-7",
            after_turns=1,
            model=other.model,
        )
        log = list(store.read())

    assert forked.result.output == "A fresh answer. sunny in Paris"
    assert other.calls == 1  # only the turn after the fork reached the (other) model
    assert len(rerun_agents.WORLD) == reached  # the weather was read before the fork: from its pin
    origin = [json.loads(e.payload)["key"] for e in log if e.type == "pin_promoted"][: forked.replayed]
    fork = [json.loads(e.payload)["key"] for e in forked.events if e.type == "pin_promoted"]
    assert fork[: forked.replayed] == origin
    assert len(fork) > forked.replayed
    (marker,) = [json.loads(e.payload) for e in forked.events if e.type == "unit_forked"]
    assert marker == {
        "unit_id": "support-7-fork",
        "origin_unit_id": "support-7",
        "replayed": forked.replayed,
        "at": "after turn 1",
    }


def test_a_fork_of_the_second_run_replays_the_first_and_counts_pins(production: Path) -> None:
    events = read_events(production)
    with SQLiteEventStore(production) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="second-fork")
        forked = fork_run(
            events,
            rerun_agents.support,
            ledger,
            origin="support-7",
            run=1,
            after_pins=1000,
            deps=lambda run: "ann",
        )
    # Past the recording's end, nothing was live: the fork is the recording again.
    assert forked.result.output == "The UK holds firm on fisheries. sunny in Paris"
    origin = {json.loads(e.payload)["key"] for e in events if e.type == "pin_promoted"}
    assert {json.loads(e.payload)["key"] for e in forked.events if e.type == "pin_promoted"} == origin


def test_a_fork_point_is_one_point(production: Path) -> None:
    events = read_events(production)
    with SQLiteEventStore(production) as store:
        ledger = PinLedger(store, EventTypeRegistry())
        with pytest.raises(UsageError, match="give after_pins or after_turns"):
            ForkPins(events, origin="support-7", into=ledger)
        with pytest.raises(UsageError, match="counts pins or turns from 0"):
            ForkPins(events, origin="support-7", into=ledger, after_pins=-1)
        with pytest.raises(UsageError, match="there is no run 5"):
            fork_run(events, rerun_agents.support, ledger, origin="support-7", run=5, after_pins=0)
        forking = ForkPins(events, origin="support-7", into=ledger, after_pins=0)
        assert forking.at == "after 0 pin(s)"
        ledger.abandon(reason="test")


def test_a_streamed_run_forks_too(production: Path) -> None:
    import asyncio

    from anagrapheus import Pinning
    from anagrapheus.provider import every_agent_run

    events = read_events(production)
    with SQLiteEventStore(production) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="streamed-fork")
        forking = ForkPins(events, origin="support-7", into=ledger, after_turns=1)

        async def streamed() -> str:
            async with rerun_agents.support.run_stream("Where is my parcel?", deps="ann") as stream:
                return await stream.get_output()

        with every_agent_run(Pinning(forking)):
            assert asyncio.run(streamed()).strip() == "The UK holds firm on fisheries. sunny in Paris"
        assert forking.live
        ledger.commit()
