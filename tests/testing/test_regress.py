"""regress: a candidate replayed against a recorded conversation is passed, failed or diverged."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel
from anagrapheus.testing import AgentBuilder, Conversation, Turn, Verdict, regress
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinResolver,
    RecordingHeader,
    SQLiteEventStore,
    read_recording,
    write_recording,
)

INSTRUCTIONS = "You are the support desk of a shop. Never ask twice for an order id you were given."
TURNS = ["Hello, my parcel is late.", "The order id is 7.", "When will it arrive?"]


class Desk:
    """A scripted support model: asks for the order id until it has one, unless `forgetful`."""

    def __init__(self, *, forgetful: bool = False) -> None:
        self.forgetful = forgetful
        self.calls = 0

    def reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        said = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        ]
        if any("order id is" in text for text in said) and not (self.forgetful and len(said) == 3):
            return ModelResponse(parts=[TextPart("Order 7 arrives on Friday.")])
        return ModelResponse(parts=[TextPart("Which order id is it?")])


def builder(desk: Desk, *, instructions: str = INSTRUCTIONS, regressed: bool = False) -> AgentBuilder:
    def build(resolver: PinResolver) -> Agent[None, str]:
        agent = Agent(PinnedModel(FunctionModel(desk.reply, model_name="desk"), resolver), instructions=instructions)
        if regressed:

            @agent.output_validator
            def house_style(text: str) -> str:
                # A post-processing step after the draw: the pins still answer, the customer sees a re-ask.
                return "Which order id is it?" if "Friday" in text else text

        return agent

    return build


def order_id_never_reasked(conversation: Conversation) -> str | None:
    given = [e.turn for e in conversation.exchanges if "order id is" in e.prompt]
    for exchange in conversation.exchanges:
        if given and exchange.turn > given[0] and "Which order id" in str(exchange.output):
            return f"asked again for the order id given on turn {given[0]}"
    return None


def replies_are_short(conversation: Conversation) -> str | None:
    long = [e.turn for e in conversation.exchanges if len(str(e.output)) > 200]
    return f"turn {long[0]} replied at length" if long else None


INVARIANTS = [order_id_never_reasked, replies_are_short]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One recorded support conversation: three turns, one unit."""
    types = EventTypeRegistry()
    path = tmp_path_factory.mktemp("support") / "support.jsonl"
    with SQLiteEventStore(path.with_suffix(".db")) as store:
        ledger = PinLedger(store, types, unit_id="support-conversation")
        agent = builder(Desk())(ledger)
        history: list[ModelMessage] = []
        for prompt in TURNS:
            history = agent.run_sync(prompt, message_history=history).all_messages()
        ledger.commit()
        header = RecordingHeader(description="A support chat", recorded_with="scripted", rerecord="pytest")
        write_recording(path, store.read(namespace="anagrapheus", type="pin_promoted"), header=header)
    return path


def test_the_recorded_agent_passes_without_reaching_its_model(recording: Path) -> None:
    desk = Desk(forgetful=True)  # would fail if it were reached

    verdict = regress(recording, builder(desk), TURNS, INVARIANTS)

    assert verdict.passed and verdict.exit_code == 0
    assert desk.calls == 0
    assert verdict.conversation.outputs == [
        "Which order id is it?",
        "Order 7 arrives on Friday.",
        "Order 7 arrives on Friday.",
    ]
    assert verdict.describe() == snapshot("""\
PASSED (3 of 3 turn(s) played, on_miss strict)
  [PASS] order_id_never_reasked
  [PASS] replies_are_short\
""")


def test_a_reworded_prompt_diverges_at_the_first_turn_and_leaves_the_invariants_unevaluated(recording: Path) -> None:
    desk = Desk()

    verdict = regress(recording, builder(desk, instructions=INSTRUCTIONS + " Be brief."), TURNS, INVARIANTS)

    assert verdict.diverged and verdict.exit_code == 3
    assert desk.calls == 0
    assert verdict.diverged_at == 1
    assert verdict.divergence is not None and verdict.divergence.moved == ("instructions[0]", "messages[0]")
    assert [r.status for r in verdict.invariants] == ["not evaluated", "not evaluated"]
    assert verdict.describe() == snapshot("""\
DIVERGED at turn 1 (0 of 3 turn(s) played, on_miss strict)
  no pin for model_call p1:model_call:2ca6c1f8fcbf3b309a96080d97c7eae933140dcb85c176f8b71679dec35af1c4 after 0 hit(s)
  what moved against the nearest recorded call: instructions[0], messages[0]
  [----] order_id_never_reasked: not evaluated (no turn finished)
  [----] replies_are_short: not evaluated (no turn finished)\
""")


def test_a_candidate_that_reasks_fails_the_invariant_at_its_turn(recording: Path) -> None:
    verdict = regress(recording, builder(Desk(), regressed=True), TURNS, INVARIANTS)

    assert verdict.failed and verdict.exit_code == 1
    assert [(r.name, r.status, r.turn, r.why) for r in verdict.violations] == [
        ("order_id_never_reasked", "violated", 3, "asked again for the order id given on turn 2")
    ]
    assert verdict.to_json()["invariants"] == snapshot(
        [
            {
                "name": "order_id_never_reasked",
                "status": "violated",
                "turn": 3,
                "why": "asked again for the order id given on turn 2",
            },
            {"name": "replies_are_short", "status": "held", "turn": 3, "why": None},
        ]
    )


def test_under_live_a_reworded_candidate_draws_its_misses_and_is_judged_on_its_real_trajectory(
    recording: Path, tmp_path: Path, types: EventTypeRegistry
) -> None:
    desk = Desk()

    with SQLiteEventStore(tmp_path / "live.db") as store:
        verdict = regress(
            recording,
            builder(desk, instructions=INSTRUCTIONS + " Be brief."),
            TURNS,
            INVARIANTS,
            on_miss="record",
            store=store,
        )
        promoted = [e for e in store.read(namespace="anagrapheus", type="pin_promoted")]

    assert verdict.passed
    assert (verdict.diverged_at, verdict.drawn, desk.calls) == (1, 3, 3)
    assert len(promoted) == 3  # the new unit holds the fresh draws, and replays strictly


def test_turns_can_build_their_prompt_from_the_conversation_so_far(recording: Path) -> None:
    turns = [
        Turn(TURNS[0]),
        Turn(lambda conversation: TURNS[1] if "order id" in conversation.last.output else "?"),
        TURNS[2],
    ]

    verdict = regress(recording, builder(Desk()), turns, INVARIANTS)

    assert verdict.passed
    assert [e.prompt for e in verdict.conversation.exchanges] == TURNS


def test_a_recording_that_cannot_be_read_raises_the_recording_error(tmp_path: Path) -> None:
    from anagrapheus.errors import RecordingError

    broken = tmp_path / "broken.jsonl"
    broken.write_text("{}\n")
    with pytest.raises(RecordingError, match=r"broken\.jsonl:1"):
        regress(broken, builder(Desk()), TURNS, INVARIANTS)


def test_verdict_json_names_the_pin_and_what_moved(recording: Path) -> None:
    verdict: Verdict = regress(recording, builder(Desk(), instructions="Be curt."), TURNS, INVARIANTS)

    data = verdict.to_json()
    assert data["status"] == "diverged"
    assert data["divergence"]["kind"] == "model_call"
    assert data["divergence"]["moved"] == ["instructions[0]", "messages[0]"]
    assert read_recording(recording).events[0].payload_json()["key"] == data["divergence"]["nearest_key"]
