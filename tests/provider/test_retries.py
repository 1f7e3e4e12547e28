"""The retry rule (#40): a run that tries a failed run again resumes it; a run after a finished one is new.

Each test runs both ways a unit is pinned: `PinnedModel` and `pinned_tool` over one ledger, and `Pinning`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic_ai import Agent, ModelRetry, RunContext, capture_run_messages
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.provider.retries import take_up
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore, read_recording
from anagrapheus.timeline.resolving.resolver import as_resolver
from tests.conftest import SaysNothing
from tests.retry_turn import PROMPT, WAYS, Harbour, try_until_done

DATA = Path(__file__).resolve().parent.parent / "data"


def returns(messages: list[ModelMessage]) -> list[ModelRequestPart]:
    """The parts of the requests among `messages` (a failed run's, as `capture_run_messages` caught them)."""
    return [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]


def tool_returns(messages: list[ModelMessage]) -> list[str]:
    """The names of the tools whose returns the requests among `messages` hold, in order."""
    return [part.tool_name for part in returns(messages) if isinstance(part, ToolReturnPart)]


def tide_reads_pinned(ledger: PinLedger) -> int:
    """How many reads of the tide the unit pinned (its scratch, before a commit)."""
    return sum(1 for pin in ledger.pins() if pin.kind == "tool_call" and "high tide at" in pin.raw_text)


@pytest.mark.parametrize("way", WAYS)
def test_a_retry_after_a_failure_is_answered_from_the_failed_runs_pins(
    way: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour()
    ledger = PinLedger(store, types)
    with capture_run_messages() as failed_run:
        failures, output = try_until_done(harbour.agent(way, ledger))
    ledger.commit()

    assert (failures, output) == (1, "berth 4 at high tide, pilot told")
    # Before the rule: the model 3 times and the tide twice (the retry drew its first request again). The radio's
    # failure may cancel the sync tide call beside it while its body runs: what it returned is pinned all the same.
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 2}

    # The same turn and its retry replay from the log, reaching nothing.
    replayed = Harbour(refusing=True, drops=0)
    replay = ReplayPins.from_store(store, types)
    with capture_run_messages() as replayed_run:
        assert try_until_done(replayed.agent(way, replay)) == (1, output)
    # The replayed failed run holds the tool returns the live one held: a tide call cancelled live is cancelled again.
    assert tool_returns(replayed_run) == tool_returns(failed_run)
    # Every pin is used. Where the radio's failure cancelled the tide call, that failed run's last request holds no
    # tide return; replayed, the tide's pin answers that asking as cancelled too, so that request's times (under
    # `Pinning`) are asked under the key they were recorded under.
    assert replay.unused() == {}


@pytest.mark.parametrize("way", WAYS)
def test_a_second_retry_of_the_same_failure_resumes_the_first_retrys_place(
    way: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    harbour = Harbour(drops=2)
    ledger = PinLedger(store, types)
    assert try_until_done(harbour.agent(way, ledger))[0] == 2
    ledger.commit()
    # The first request once, the tide once, the radio three times, the closing request once.
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 3}

    replay = ReplayPins.from_store(store, types)
    assert try_until_done(Harbour(refusing=True, drops=0).agent(way, replay))[0] == 2
    # Every pin is used, the clocks too: a tide call the radio's failure cancelled is cancelled again on replay.
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
    # The radio's failure may cancel the tide call beside it before it runs: the model is what tells.
    assert harbour.reached["model"] == 3 and harbour.reached["radio"] == 2


def test_a_resolver_that_keeps_no_attachments_tells_no_runs_apart_and_takes_no_place_up(ledger: PinLedger) -> None:
    # One with the protocol's three methods only: no run rule (every run shares the unit's keys), so no retry rule.
    with pytest.warns(DeprecationWarning, match="does not subclass"):  # adapted once, where it enters
        says_nothing = as_resolver(SaysNothing(ledger))
    assert not take_up(says_nothing, "019b8d62-0000-7000-8000-00000000b0a7", "p1:run_place:x")
    harbour = Harbour()
    try_until_done(harbour.agent("pinned", says_nothing))
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 2}


@pytest.mark.parametrize("way", WAYS)
def test_a_run_whose_calls_all_failed_at_once_is_taken_up_once(way: str, ledger: PinLedger) -> None:
    harbour = Harbour()
    tide = harbour.tide
    dropped = {"tide": True}

    def tide_or_drop(port: str) -> str:
        """Read the tide table."""
        if dropped.pop("tide", False):
            raise ConnectionError("the tide service dropped")
        return tide(port)

    tide_or_drop.__name__ = "tide"
    harbour.tide = tide_or_drop  # type: ignore[method-assign]
    # The tide fails; the radio call beside it drops, or is cancelled with it before it is made (as the event loop
    # has it), and a second retry draws it. The first request is drawn once through it all, the tide read once.
    failures, output = try_until_done(harbour.agent(way, ledger))
    assert failures in (1, 2) and output == "berth 4 at high tide, pilot told"
    # A sync tool cancelled while its body runs in a worker thread still reaches the world: both ways pin what it
    # returned (test_tools.py, test_capability_cancelled.py), so a retry in that race does not read the tide again.
    assert (harbour.reached["model"], harbour.reached["tide"]) == (2, 1)


def test_a_failed_run_resumed_by_its_id_is_no_longer_there_for_a_retry(ledger: PinLedger) -> None:
    harbour = Harbour()
    seen: list[str] = []
    radio = harbour.radio

    def radio_seen(ctx: RunContext[None], to: str) -> str:
        """Call someone on the radio."""
        seen.append(str(ctx.run_id))
        return radio(to)

    model = FunctionModel(_asking_radio_seen(harbour), model_name="scripted-harbour")
    agent = Agent(model, tools=[harbour.tide, radio_seen], capabilities=[Pinning(ledger)])
    with pytest.raises(ConnectionError):
        agent.run_sync(PROMPT)
    # Resumed by its id (it fails again: the failure it met is its answer, as #34 keeps it) ...
    with pytest.raises(ConnectionError):
        agent.run_sync(PROMPT, run_id=seen[0])
    # ... and being its caller's now, it is no retry's to take up: a later unnamed run asked the same is a new run.
    assert agent.run_sync(PROMPT).output == "berth 4 at high tide, pilot told"
    assert (harbour.reached["model"], harbour.reached["radio"]) == (3, 2)
    # The tide once for the new run, and at most once for the failed one: the radio's failure may cancel the tide call
    # beside it (its pinned failure, answered at once when the run is resumed, more so). Cancelled while its body
    # runs, what it returned is pinned and the resumed run is answered from it; cancelled before the body starts, the
    # tide is not read. Either way every read is pinned: none is made again.
    assert harbour.reached["tide"] == tide_reads_pinned(ledger)
    assert harbour.reached["tide"] in (1, 2)


def _asking_radio_seen(harbour: Harbour) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """The harbour's model, asking for `radio_seen` where it asks for `radio`."""
    answer = harbour.model().function
    assert answer is not None

    def renamed(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response = answer(messages, info)
        assert isinstance(response, ModelResponse)
        parts = [
            ToolCallPart("radio_seen", part.args)
            if isinstance(part, ToolCallPart) and part.tool_name == "radio"
            else part
            for part in response.parts
        ]
        return ModelResponse(parts=parts)

    return renamed


@pytest.mark.parametrize("way", WAYS)
def test_a_retry_that_meets_a_model_retry_and_finishes_leaves_no_failure_to_take_up(
    way: str, ledger: PinLedger
) -> None:
    harbour = Harbour()
    radio = harbour.radio
    calls = {"n": 0}

    def radio_or_retry(to: str) -> str:
        """Call someone on the radio."""
        calls["n"] += 1
        if calls["n"] == 2:
            raise ModelRetry("say who is calling")  # pydantic-ai asks the model again: the run goes on
        return radio(to)

    radio_or_retry.__name__ = "radio"
    harbour.radio = radio_or_retry  # type: ignore[method-assign]
    agent = harbour.agent(way, ledger)
    assert try_until_done(agent)[0] == 1
    reached = dict(harbour.reached)
    # The retry went on past its own failed call and finished: the next run asked the same is a run of its own.
    agent.run_sync(PROMPT)
    assert harbour.reached["model"] == reached["model"] + 2 and harbour.reached["tide"] == reached["tide"] + 1
