"""The negotiation itself: four rounds, two parties, each round one unit of work in the log.

Nothing here knows whether it runs live or under replay: a round asks its `Sitting` for a
resolver and hands it back with the round's outcome. Prompts name parties, stocks and earlier
statements in words, never by id, so a recording replays into a fresh, empty database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Protocol

import uuid_utils
from pydantic_ai import Agent
from pydantic_ai.models import Model

from anagrapheus import Pinning
from anagrapheus.identity import mint_entity_id
from anagrapheus.timeline import (
    Divergence,
    Event,
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    PinResolver,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    UpcastRegistry,
)
from examples.negotiation.world import World

TREATY = "EU-UK Fisheries Accord"
"""The treaty under negotiation, by name."""


@dataclass(frozen=True)
class Topic:
    """What one round is about."""

    title: str
    species: str | None


ROUNDS = (
    Topic("North Sea cod quota", "cod"),
    Topic("Western mackerel quota", "mackerel"),
    Topic("North Sea sandeel quota", "sandeel"),
    Topic("final package", None),
)
"""The four rounds, in order."""


@dataclass(frozen=True)
class Party:
    """One side of the table."""

    code: str
    name: str
    instructions: str


EU = Party(
    "EU",
    "the European Union",
    "You negotiate fishing quotas for the European Union. Read the stock survey before you propose,"
    " and state the EU share you propose as a percentage of the quota.",
)
UK = Party(
    "UK",
    "the United Kingdom",
    "You negotiate fishing quotas for the United Kingdom. Check the market price before you answer,"
    " and counter with the EU share the UK can accept, as a percentage of the quota.",
)


class RoundConcluded(Event):
    """One round's outcome, appended to the log in the same transaction that commits the round's pins."""

    namespace: ClassVar[str] = "negotiation"
    event_type: ClassVar[str] = "round_concluded"

    round: int
    topic: str
    treaty_id: str
    eu_position_id: str
    uk_position_id: str
    eu: str
    uk: str


def negotiation_types() -> EventTypeRegistry:
    """Return a registry with the built-in events and `RoundConcluded`."""
    types = EventTypeRegistry()
    types.register(RoundConcluded)
    return types


def unit_id(round_no: int) -> str:
    """The id of a round's unit of work: stable, so a recording's units can be found by round."""
    return f"eu-uk-talks-round-{round_no}"


def _history(concluded: list[RoundConcluded]) -> str:
    if not concluded:
        return "This is the opening round."
    lines = [f"- Round {r.round}, {r.topic}. EU: {r.eu} UK: {r.uk}" for r in concluded]
    return "So far:\n" + "\n".join(lines)


def eu_prompt(round_no: int, topic: Topic, concluded: list[RoundConcluded]) -> str:
    """What the EU negotiator is asked in a round."""
    return (
        f"Round {round_no} of {len(ROUNDS)} in the talks on the {TREATY}. Topic: the {topic.title}.\n"
        f"{_history(concluded)}\n"
        f"State the position of {EU.name} on the {topic.title}."
    )


def uk_prompt(round_no: int, topic: Topic, concluded: list[RoundConcluded], eu: str, *, variant: bool = False) -> str:
    """What the UK negotiator is asked in a round, after hearing the EU; `variant` is the `--diverge` rewording."""
    ask = f"Respond for {UK.name}."
    if variant and round_no == 3:
        ask = f"Respond for {UK.name}, and be brief."
    return (
        f"Round {round_no} of {len(ROUNDS)} in the talks on the {TREATY}. Topic: the {topic.title}.\n"
        f"{_history(concluded)}\n"
        f"{EU.name.capitalize()} has just said: {eu}\n"
        f"{ask}"
    )


class Sitting(Protocol):
    """How rounds are resolved and settled: live through ledgers, or from a recording."""

    def open(self, round_no: int) -> PinResolver:
        """Return the resolver for a round's unit of work."""
        ...

    def conclude(self, round_no: int, resolver: PinResolver, outcome: RoundConcluded) -> None:
        """Settle a round that ran to the end."""
        ...

    def fail(self, round_no: int, resolver: PinResolver, error: BaseException) -> None:
        """Settle a round that did not."""
        ...


@dataclass
class LiveSitting:
    """Each round a `PinLedger`, committed together with its `RoundConcluded` in one transaction."""

    store: SQLiteEventStore
    types: EventTypeRegistry

    def open(self, round_no: int) -> PinResolver:
        """Open the round's unit of work."""
        return PinLedger(self.store, self.types, unit_id=unit_id(round_no))

    def conclude(self, round_no: int, resolver: PinResolver, outcome: RoundConcluded) -> None:
        """Append the outcome and promote the round's pins, all or nothing."""
        assert isinstance(resolver, PinLedger)
        with self.store.transaction():
            self.store.append([self.types.encode(outcome, correlation_id=resolver.unit_id)])
            resolver.commit()

    def fail(self, round_no: int, resolver: PinResolver, error: BaseException) -> None:
        """Give the round up, leaving one audit line in the log."""
        assert isinstance(resolver, PinLedger)
        resolver.abandon(reason=f"round {round_no} failed: {type(error).__name__}: {error}")


@dataclass
class ReplaySitting:
    """Each round answered strictly from its own unit's pins in a recording; outcomes go to a fresh store."""

    store: SQLiteEventStore
    types: EventTypeRegistry
    events: Sequence[StoredEvent]
    upcasts: UpcastRegistry | None = None
    replays: list[ReplayPins] = field(default_factory=list[ReplayPins])

    def open(self, round_no: int) -> PinResolver:
        """Collect the round's pins from the recording."""
        replay = ReplayPins.from_events(self.events, self.types, unit_id=unit_id(round_no), upcasts=self.upcasts)
        self.replays.append(replay)
        return replay

    def conclude(self, round_no: int, resolver: PinResolver, outcome: RoundConcluded) -> None:
        """Append the replayed outcome to the new log; the recording itself is never written."""
        self.store.append([self.types.encode(outcome, correlation_id=unit_id(round_no))])

    def fail(self, round_no: int, resolver: PinResolver, error: BaseException) -> None:
        """Nothing to settle: a strict replay draws nothing."""

    @property
    def hits(self) -> int:
        """How many calls the recording answered, over every round."""
        return sum(replay.hits for replay in self.replays)


class Diverged(Exception):
    """A replayed round asked for something the recording has no pin for."""

    def __init__(self, round_no: int, party: Party, divergence: Divergence, concluded: list[RoundConcluded]) -> None:
        super().__init__(f"round {round_no} ({party.code}) left the recording: {divergence.describe()}")
        self.round_no = round_no
        self.party = party
        self.divergence = divergence
        self.concluded = concluded


def _agent(party: Party, model: Model, world: World, pinning: Pinning) -> Agent[None, str]:
    return Agent(
        model,
        instructions=party.instructions,
        tools=[world.stock_survey, world.market_price],
        name=f"{party.code} negotiator",
        capabilities=[pinning],  # every model request and tool call of the agent, and its ids and times, pinned
    )


async def negotiate(
    sitting: Sitting,
    models: Mapping[str, Model],
    world: World,
    *,
    new_id: Callable[[], str] = lambda: str(uuid_utils.uuid7()),
    clock: Callable[[], datetime] | None = None,
    diverge: bool = False,
    on_round: Callable[[RoundConcluded], None] | None = None,
) -> list[RoundConcluded]:
    """Hold the four rounds and return their outcomes; under replay a miss raises `Diverged`.

    `new_id` and `clock` are where a live run's ids and message times come from (seeded for a scripted recording).
    """
    concluded: list[RoundConcluded] = []
    treaty_id: str | None = None
    for round_no, topic in enumerate(ROUNDS, start=1):
        resolver = sitting.open(round_no)
        speaking = EU
        try:
            if treaty_id is None:
                # Minted through the first round's unit, so a replay re-establishes the same treaty.
                treaty_id = mint_entity_id({"entity": "treaty", "name": TREATY}, resolver=resolver, new_id=new_id)
            positions = {
                party.code: mint_entity_id(
                    {"entity": "position", "party": party.code, "topic": topic.title}, resolver=resolver, new_id=new_id
                )
                for party in (EU, UK)
            }
            # Each run's inputs are recorded too, so the recording can be asked again: evals, reruns, forks.
            pinning = Pinning(resolver, clock=clock, new_id=new_id)
            eu = await _agent(EU, models[EU.code], world, pinning).run(eu_prompt(round_no, topic, concluded))
            speaking = UK
            uk_asked = uk_prompt(round_no, topic, concluded, eu.output, variant=diverge)
            uk = await _agent(UK, models[UK.code], world, pinning).run(uk_asked)
        except PinMiss as miss:
            raise Diverged(round_no, speaking, miss.divergence, concluded) from miss
        except BaseException as error:
            sitting.fail(round_no, resolver, error)
            raise
        outcome = RoundConcluded(
            round=round_no,
            topic=topic.title,
            treaty_id=treaty_id,
            eu_position_id=positions[EU.code],
            uk_position_id=positions[UK.code],
            eu=eu.output,
            uk=uk.output,
        )
        sitting.conclude(round_no, resolver, outcome)
        concluded.append(outcome)
        if on_round is not None:
            on_round(outcome)
    return concluded
