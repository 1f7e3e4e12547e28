import asyncio
from pathlib import Path
from tempfile import TemporaryDirectory

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import register_builtin_events
from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    ReplayPins,
    SQLiteEventStore,
)

calls = 0


def negotiator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    global calls
    calls += 1
    return ModelResponse(parts=[TextPart("The UK holds firm on fisheries.")])


async def main() -> None:
    types = EventTypeRegistry()
    register_builtin_events(types)
    model = FunctionModel(negotiator, model_name="scripted-uk")

    with TemporaryDirectory() as tmp:
        # Record: the draw happens once, then the pin is promoted into the log.
        store = SQLiteEventStore(Path(tmp) / "run.db")
        ledger = PinLedger(store, types)
        agent = Agent(PinnedModel(model, ledger))
        await agent.run("Round 1: state the UK position on fisheries.")
        ledger.commit()

        # Replay: answer from the log; the model function is never called.
        replay = ReplayPins.from_events(store.read(), types)
        agent = Agent(PinnedModel(model, replay))
        result = await agent.run("Round 1: state the UK position on fisheries.")
        print(result.output, "| model calls:", calls)

        # A different question is a different key, so strict replay refuses it.
        try:
            await agent.run("Round 1: state the EU position on fisheries.")
        except PinMiss as miss:
            print("diverged after", miss.divergence.after_hits, "hit(s)")
        store.close()


asyncio.run(main())
