"""Divergence from the provider side: a miss names what moved, and record mode redraws exactly what changed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent

from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
)
from tests.conftest import Scripted

ROUNDS = 2


async def say(agent: Agent[None, str], prompt: str, *, streamed: bool) -> str:
    if not streamed:
        return (await agent.run(prompt)).output
    async with agent.run_stream(prompt) as result:
        return await result.get_output()


async def talks(uk: Scripted, eu: Scripted, resolver: Any, *, streamed: bool = False) -> list[str]:
    """Two roles, each its own model, answering each other for a few rounds through one resolver."""
    uk_agent = Agent(PinnedModel(uk.model, resolver), instructions="You negotiate for the UK.")
    eu_agent = Agent(PinnedModel(eu.model, resolver), instructions="You negotiate for the EU.")
    said = "The talks open."
    transcript: list[str] = []
    for round_ in range(1, ROUNDS + 1):
        for agent in (uk_agent, eu_agent):
            said = await say(agent, f"Round {round_}. The other side said: {said}", streamed=streamed)
            transcript.append(said)
    return transcript


def parties(eu_model: str = "scripted-eu") -> tuple[Scripted, Scripted]:
    return Scripted("scripted-uk"), Scripted(eu_model, text="The EU wants access to UK waters.")


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_swapping_one_roles_model_redraws_exactly_that_roles_calls(
    streamed: bool, store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    uk, eu = parties()
    recorded = await talks(uk, eu, ledger, streamed=streamed)
    ledger.commit()
    assert (uk.calls, eu.calls) == (ROUNDS, ROUNDS)

    rerun = PinLedger(store, types)
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=rerun)
    uk, eu = parties(eu_model="scripted-eu-v2")
    assert await talks(uk, eu, replay, streamed=streamed) == recorded
    assert (uk.calls, eu.calls) == (0, ROUNDS)

    divergence = replay.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.after_hits, divergence.moved) == ("model_call", 1, ("model",))
    committed = rerun.commit()
    assert [e.type for e in committed].count(ReplayDiverged.event_type) == 1

    # The new log replays strictly, the swapped model included.
    uk, eu = parties(eu_model="scripted-eu-v2")
    strict = ReplayPins.from_events(store.read(), types, unit_id=rerun.unit_id)
    assert await talks(uk, eu, strict, streamed=streamed) == recorded
    assert (uk.calls, eu.calls) == (0, 0)


@pytest.mark.anyio
async def test_a_strict_miss_names_the_model_that_moved(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    uk, eu = parties()
    await talks(uk, eu, ledger)
    ledger.commit()
    uk, eu = parties(eu_model="scripted-eu-v2")
    with pytest.raises(PinMiss) as miss:
        await talks(uk, eu, ReplayPins.from_events(store.read(), types))
    assert miss.value.divergence.moved == ("model",)
    assert "what moved: model" in str(miss.value)
    assert (uk.calls, eu.calls) == (0, 0)


@pytest.mark.anyio
async def test_a_strict_miss_names_the_message_that_moved(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    uk = Scripted("scripted-uk")
    await Agent(PinnedModel(uk.model, ledger)).run("Round 1: state the UK position on fisheries.")
    ledger.commit()
    agent = Agent(PinnedModel(uk.model, ReplayPins.from_events(store.read(), types)))
    with pytest.raises(PinMiss) as miss:
        await agent.run("Round 1: state the EU position on fisheries.")
    assert miss.value.divergence.after_hits == 0
    assert miss.value.divergence.moved == ("messages[0]",)
    assert uk.calls == 1


@pytest.mark.anyio
async def test_a_model_miss_names_a_tool_whose_schema_changed(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    def harbours(city: str) -> str:
        """Count a city's harbours."""
        return f"{city} has 3 harbours"

    def harbours_v2(city: str, country: str = "UK") -> str:
        """Count a city's harbours."""
        return f"{city} has 3 harbours"

    uk = Scripted("scripted-uk")
    await Agent(PinnedModel(uk.model, ledger), tools=[pinned_tool(ledger, harbours)]).run("How many harbours?")
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    changed = pinned_tool(replay, harbours_v2, name="harbours")
    with pytest.raises(PinMiss) as miss:
        await Agent(PinnedModel(uk.model, replay), tools=[changed]).run("How many harbours?")
    assert miss.value.divergence.moved == ("tools.harbours",)
