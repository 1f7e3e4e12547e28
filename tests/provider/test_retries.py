"""The retry rule (#40): a run that tries a failed run again resumes it; a run after a finished one is new.

Each test runs both ways a unit is pinned: `PinnedModel` and `pinned_tool` over one ledger, and `Pinning`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore, read_recording
from tests.retry_turn import PROMPT, WAYS, Harbour, try_until_done

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.parametrize("way", WAYS)
def test_a_retry_after_a_failure_is_answered_from_the_failed_runs_pins(
    way: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour()
    ledger = PinLedger(store, types)
    failures, output = try_until_done(harbour.agent(way, ledger))
    ledger.commit()

    assert (failures, output) == (1, "berth 4 at high tide, pilot told")
    # Before the rule: the model 3 times and the tide twice (the retry drew its first request again).
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 2}

    # The same turn and its retry replay from the log, reaching nothing.
    replayed = Harbour(refusing=True, drops=0)
    replay = ReplayPins.from_store(store, types)
    assert try_until_done(replayed.agent(way, replay)) == (1, output)
    assert replay.unused() == {}


@pytest.mark.parametrize("way", WAYS)
def test_a_second_retry_of_the_same_failure_resumes_the_first_retrys_place(
    way: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour(drops=2)
    ledger = PinLedger(store, types)
    assert try_until_done(harbour.agent(way, ledger))[0] == 2
    ledger.commit()
    # The first request once, the radio three times, the closing request once.
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 3}

    replay = ReplayPins.from_store(store, types)
    assert try_until_done(Harbour(refusing=True, drops=0).agent(way, replay))[0] == 2
    assert replay.unused() == {}


@pytest.mark.parametrize("way", WAYS)
def test_a_run_after_a_finished_run_is_new_and_each_failure_is_taken_up_once(way: str, ledger: PinLedger) -> None:
    harbour = Harbour()
    agent = harbour.agent(way, ledger)
    try_until_done(agent)
    # The failed run was taken up by its retry, which finished: the next run is a run of its own (#34).
    agent.run_sync(PROMPT)
    assert harbour.reached == {"model": 4, "tide": 2, "radio": 3}


@pytest.mark.parametrize("way", WAYS)
def test_identical_runs_at_once_that_did_not_fail_each_draw(way: str, ledger: PinLedger) -> None:
    harbour = Harbour(drops=0)
    agent = harbour.agent(way, ledger)

    async def both() -> list[str]:
        return [r.output for r in await asyncio.gather(agent.run(PROMPT), agent.run(PROMPT))]

    assert asyncio.run(both()) == ["berth 4 at high tide, pilot told"] * 2
    assert harbour.reached == {"model": 4, "tide": 2, "radio": 2}


@pytest.mark.parametrize("way", WAYS)
def test_a_retry_recorded_before_the_rule_replays_as_the_new_run_it_was(way: str, types: EventTypeRegistry) -> None:
    # Recorded by the code before #40 (tests/retry_turn.py): its retry drew everything again, under keys of its own.
    recording = read_recording(DATA / f"retry-before-the-rule-{way}.jsonl")
    replay = ReplayPins.from_events(recording.events, types)
    assert try_until_done(Harbour(refusing=True, drops=0).agent(way, replay)) == (
        1,
        "berth 4 at high tide, pilot told",
    )
    assert replay.unused() == {}


def test_a_named_run_is_not_taken_up_by_a_retry_it_did_not_name(ledger: PinLedger) -> None:
    harbour = Harbour()
    agent = harbour.agent("pinning", ledger)
    with pytest.raises(ConnectionError):
        agent.run_sync(PROMPT, run_id="019b8d62-0000-7000-8000-00000000b0a7")
    # A run its caller named is its name's: an unnamed run asked the same is a run of its own.
    agent.run_sync(PROMPT)
    assert harbour.reached == {"model": 3, "tide": 2, "radio": 2}
