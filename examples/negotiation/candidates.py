"""Three candidate negotiators judged against one recording: one passes, one fails an invariant, one diverges.

The committed recording holds the four rounds as the scripted negotiators held them. Each
candidate is replayed against it, turn by turn (EU then UK, each round), and the talks'
invariants are checked after every turn:

- `control` is the recorded pair itself: every call is answered from the recording and every
  invariant holds (passed, exit 0);
- `reworded` gives the UK negotiator reworded instructions: its first request asks something the
  recording has no pin for (diverged, exit 3); under `on_miss="record"` the scripted model answers
  the miss, and the invariants hold on what it really said;
- `regressed` keeps every request as recorded but adds a house-style pass that spells
  percentages out in words: every call still hits the recording, and the invariant that each
  quota statement states a share as a percentage fails at turn 1 (failed, exit 1).

From the command line: `anagrapheus regress examples.negotiation.candidates:reworded --recording
recordings/negotiation.jsonl`, or all three with `python -m examples.negotiation --regress`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart

from anagrapheus import Pinning
from anagrapheus.testing import Conversation, Exchange, Turn, Verdict, regress
from anagrapheus.timeline import PinResolver
from examples.negotiation.scripts import scripted_pair
from examples.negotiation.seeded import START
from examples.negotiation.talks import EU, ROUNDS, UK, Party, RoundConcluded, eu_prompt, uk_prompt
from examples.negotiation.world import World

OnMiss = Literal["strict", "record"]

SHARE = re.compile(r"(\d+)% EU share")
"""An EU share stated as a percentage, as the talks' invariants read it."""


def _round_of(exchange: Exchange) -> int:
    return (exchange.turn + 1) // 2


def _concluded(conversation: Conversation) -> list[RoundConcluded]:
    """The rounds finished so far, as the prompts recount them (they name no ids, so none are needed)."""
    rounds: list[RoundConcluded] = []
    for eu, uk in zip(conversation.by(EU.code), conversation.by(UK.code), strict=False):
        topic = ROUNDS[_round_of(eu) - 1]
        rounds.append(
            RoundConcluded(
                round=_round_of(eu),
                topic=topic.title,
                treaty_id="",
                eu_position_id="",
                uk_position_id="",
                eu=str(eu.output),
                uk=str(uk.output),
            )
        )
    return rounds


def _eu_turn(round_no: int) -> Callable[[Conversation], str]:
    return lambda conversation: eu_prompt(round_no, ROUNDS[round_no - 1], _concluded(conversation))


def _uk_turn(round_no: int) -> Callable[[Conversation], str]:
    return lambda conversation: uk_prompt(
        round_no, ROUNDS[round_no - 1], _concluded(conversation), str(conversation.last.output)
    )


TURNS = [
    turn
    for round_no in range(1, len(ROUNDS) + 1)
    for turn in (
        Turn(_eu_turn(round_no), agent=EU.code, history=False),
        Turn(_uk_turn(round_no), agent=UK.code, history=False),
    )
]
"""The talks as a conversation: in each round the EU speaks, then the UK answers; each run starts afresh."""


def _quota_rounds(conversation: Conversation) -> list[Exchange]:
    return [e for e in conversation.exchanges if ROUNDS[_round_of(e) - 1].species is not None]


def quota_statements_state_a_share(conversation: Conversation) -> str | None:
    """In every quota round, each side states the EU share it offers as a percentage."""
    for exchange in _quota_rounds(conversation):
        if not SHARE.search(str(exchange.output)):
            said = f"{exchange.output!r}"
            return f"round {_round_of(exchange)}: the {exchange.agent} stated no share as a percentage: {said}"
    return None


def uk_counters_below_the_eu_offer(conversation: Conversation) -> str | None:
    """The UK never counters at or above the share the EU just proposed."""
    for eu, uk in zip(conversation.by(EU.code), conversation.by(UK.code), strict=False):
        offered, countered = SHARE.search(str(eu.output)), SHARE.search(str(uk.output))
        if offered and countered and int(countered[1]) >= int(offered[1]):
            return f"round {_round_of(uk)}: the UK countered at {countered[1]}%, not below the EU's {offered[1]}%"
    return None


def uk_reads_the_market_before_countering(conversation: Conversation) -> str | None:
    """In every quota round the UK checks the market price before it answers."""
    for exchange in _quota_rounds(conversation):
        if exchange.agent != UK.code:
            continue
        called = [part.tool_name for m in exchange.messages for part in m.parts if isinstance(part, ToolCallPart)]
        if "market_price" not in called:
            return f"round {_round_of(exchange)}: the UK answered without checking the market price"
    return None


INVARIANTS = [quota_statements_state_a_share, uk_counters_below_the_eu_offer, uk_reads_the_market_before_countering]
"""The talks' contract, judged over the recorded trajectory whichever candidate is replayed."""


def spelled_out(text: str) -> str:
    """The house style: each percentage spelled out in words."""
    return re.sub(r"(\d+)%", r"\1 per cent", text)


def negotiators(
    parties: dict[str, Party], *, house_style: bool = False, capabilities: Sequence[AbstractCapability[None]] = ()
) -> dict[str, Agent[None, str]]:
    """The scripted negotiators of `parties` as agents, on a world never read: pinned, its readings are the pins'."""
    world = World()
    models = {code: negotiator.model() for code, negotiator in scripted_pair(lambda: START).items()}
    agents: dict[str, Agent[None, str]] = {}
    for code, party in parties.items():
        agent = Agent(
            models[code],
            instructions=party.instructions,
            tools=[world.stock_survey, world.market_price],
            capabilities=list(capabilities),
            name=f"{party.code} negotiator",
        )
        if house_style:
            # After the draw: the requests are unchanged, so every pin still answers; the statements are not.
            agent.output_validator(spelled_out)
        agents[code] = agent
    return agents


def _builder(
    parties: dict[str, Party], *, house_style: bool = False
) -> Callable[[PinResolver], dict[str, Agent[None, str]]]:
    def build(resolver: PinResolver) -> dict[str, Agent[None, str]]:
        return negotiators(parties, house_style=house_style, capabilities=[Pinning(resolver)])

    return build


def _recording(path: str | os.PathLike[str] | None) -> Any:
    from examples.negotiation.runs import RECORDING

    return RECORDING if path is None else path


def control(recording: str | os.PathLike[str] | None = None, *, on_miss: OnMiss = "strict") -> Verdict:
    """The recorded negotiators themselves: passed."""
    return regress(_recording(recording), _builder({EU.code: EU, UK.code: UK}), TURNS, INVARIANTS, on_miss=on_miss)


REWORDED_UK = Party(
    UK.code,
    UK.name,
    "You negotiate fishing quotas for the United Kingdom. Look up the market price first, then counter with"
    " the EU share the UK can accept, as a percentage of the quota.",
)
"""The UK negotiator with its instructions reworded, meaning the same."""


def reworded(recording: str | os.PathLike[str] | None = None, *, on_miss: OnMiss = "strict") -> Verdict:
    """The UK's instructions reworded: diverged under `strict`, passed under `record`."""
    parties = {EU.code: EU, UK.code: REWORDED_UK}
    return regress(_recording(recording), _builder(parties), TURNS, INVARIANTS, on_miss=on_miss)


def regressed(recording: str | os.PathLike[str] | None = None, *, on_miss: OnMiss = "strict") -> Verdict:
    """A house-style pass spelling percentages out: every pin answers, and an invariant fails."""
    builder = _builder({EU.code: EU, UK.code: UK}, house_style=True)
    return regress(_recording(recording), builder, TURNS, INVARIANTS, on_miss=on_miss)


CANDIDATES = {"control": control, "reworded": reworded, "regressed": regressed}
"""The three candidates, by name."""
