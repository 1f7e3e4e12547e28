"""The peer page "Pass, fail, or diverged" (../shared/reference/peers/replaygate.md): the claims made our own.

`anagrapheus.testing.regress` is the project's gate: a candidate replayed against a recorded conversation is
passed, failed or diverged. The conversation and agents are tests/testing/test_regress.py's, reused.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from anagrapheus.testing import regress
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore
from tests.testing.test_regress import INSTRUCTIONS, INVARIANTS, TURNS, Desk, builder
from tests.testing.test_regress import recording as recording  # the fixture: one recorded support conversation


def test_a_candidate_that_reproduces_every_key_passes_without_reaching_the_network(recording: Path) -> None:
    """§ Three candidates, three verdicts: the recorded agent itself replays every call and its invariants hold."""
    desk = Desk(forgetful=True)
    verdict = regress(recording, builder(desk), TURNS, INVARIANTS)
    assert (verdict.status, verdict.exit_code, desk.calls) == ("passed", 0, 0)


def test_a_miss_is_a_third_verdict_diverged_with_its_own_exit_code_not_a_crash(recording: Path) -> None:
    """§ Divergence is a third verdict: a reworded candidate leaves the trajectory; exit 3, invariants unevaluated."""
    verdict = regress(recording, builder(Desk(), instructions=INSTRUCTIONS + " Be brief."), TURNS, INVARIANTS)
    assert (verdict.status, verdict.exit_code, verdict.diverged_at) == ("diverged", 3, 1)
    assert {result.status for result in verdict.invariants} == {"not evaluated"}


def test_a_candidate_that_keeps_the_keys_but_breaks_an_invariant_fails_with_exit_1(recording: Path) -> None:
    """§ Three candidates, three verdicts: calls still key into the recording; the violated invariant fails it."""
    verdict = regress(recording, builder(Desk(), regressed=True), TURNS, INVARIANTS)
    assert (verdict.status, verdict.exit_code) == ("failed", 1)
    assert [result.turn for result in verdict.violations] == [3]


def test_under_live_a_miss_is_drawn_and_the_invariants_judge_the_real_trajectory(
    recording: Path, tmp_path: Path
) -> None:
    """§ Divergence is a third verdict (the page's `policy="live"`, also spelt on_miss="record"): misses are drawn."""
    desk = Desk()
    with SQLiteEventStore(tmp_path / "live.db") as store, warnings.catch_warnings():
        warnings.simplefilter("error")  # the page's spelling is the contract: no deprecation
        verdict = regress(
            recording,
            builder(desk, instructions=INSTRUCTIONS + " Be brief."),
            TURNS,
            INVARIANTS,
            policy="live",
            store=store,
        )
    assert (verdict.status, verdict.diverged_at, desk.calls, verdict.policy) == ("passed", 1, 3, "live")


def test_a_live_replay_never_changes_the_recording_it_read(recording: Path, tmp_path: Path) -> None:
    """§ The bug the live fallback smuggled in: a fixture read is never changed by a live replay of it."""
    before = recording.read_bytes()
    with SQLiteEventStore(tmp_path / "live.db") as store:
        for _ in range(2):
            regress(
                recording,
                builder(Desk(), instructions=INSTRUCTIONS + " Be brief."),
                TURNS,
                INVARIANTS,
                on_miss="record",
                store=store,
            )
    assert recording.read_bytes() == before
    # And a second pinned replay in the same process still diverges: the first live run's draws did not join it.
    again = regress(recording, builder(Desk(), instructions=INSTRUCTIONS + " Be brief."), TURNS, INVARIANTS)
    assert again.diverged


def test_recording_is_content_keyed_a_tool_call_matches_on_its_exact_name_and_arguments(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Why a different agent breaks the replay: keys are digests of what was asked; other arguments miss."""
    import asyncio

    from anagrapheus.provider import pinned_tool

    ledger = PinLedger(store, types)
    asyncio.run(pinned_tool(ledger, lambda order: f"order {order} ships Friday", name="track")(order=7))
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    tracked = pinned_tool(replay, lambda order: "never reached", name="track")
    assert asyncio.run(tracked(order=7)) == "order 7 ships Friday"
    with pytest.raises(PinMiss):
        asyncio.run(tracked(order=8))
