"""A run that stops reading a stream early is pinned as far as it got, and replays to that point, debounced or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import PartialPin
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

pytestmark = pytest.mark.anyio

DEFAULT = "default"  # stream_text()'s own debounce: pydantic-ai groups deltas for 0.1 s


class Slow:
    """A provider that streams a word every 0.3 s, slower than a debounce groups them; counts its streams."""

    calls = 0

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self._stream, model_name="slow-uk")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        for word in ("The ", "UK ", "holds ", "firm."):
            yield word
            await anyio.sleep(0.3)


async def first_delta(agent: Agent[None, str], debounce: float | str | None) -> tuple[str, bytes]:
    """Read one delta of `stream_text(delta=True)` and stop, holding the iterator as application code does."""
    options: dict[str, Any] = {} if debounce == DEFAULT else {"debounce_by": debounce}
    async with agent.run_stream("Round 1: the UK position?") as streamed:
        deltas = streamed.stream_text(delta=True, **options)
        delta = await anext(deltas)
    return delta, ModelMessagesTypeAdapter.dump_json(streamed.all_messages())


async def test_an_early_stop_under_the_default_debounce_is_pinned_every_time(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The consumer's stop cancels the run; the stream is pinned on the way out, and that write is not cancelled.
    for _ in range(3):
        ledger = PinLedger(store, types)
        await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), DEFAULT)
        assert "model_call" in [pin.kind for pin in ledger.pins()]
        ledger.abandon(reason="checked")


@pytest.mark.parametrize("recorded_with", [DEFAULT, None])
async def test_an_early_stop_replays_to_the_same_point_whatever_the_debounce(
    recorded_with: float | str | None, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), recorded_with)
    ledger.commit()
    assert live[0].startswith("The ")

    for debounce in (DEFAULT, None, 0.3):
        slow = Slow()
        replay = ReplayPins.from_events(store.read(), types)
        assert await first_delta(Agent(slow.model, capabilities=[Pinning(replay)]), debounce) == live
        assert slow.calls == 0


async def test_reading_on_past_an_early_stop_still_says_where_the_recording_stopped(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), None)
    ledger.commit()

    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PartialPin):
        async with Agent(Slow().model, capabilities=[Pinning(replay)]).run_stream("Round 1: the UK position?") as run:
            await run.get_output()
