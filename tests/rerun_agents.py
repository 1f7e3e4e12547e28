"""Agents that `anagrapheus rerun` and `export --as-test` load by name in the tests: the recorded one and changes."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import Scripted

WORLD: list[str] = []
"""Every tool body that ran: a re-run answered from pins adds nothing."""


def build(
    *,
    instructions: str = "Answer in one line.",
    text: str = "The UK holds firm on fisheries.",
    model: Model | None = None,
) -> Agent[str, str]:
    """A support agent with one world-reading tool; its model is scripted (or `model`)."""
    agent = Agent(
        model or Scripted("support", text=text).model, deps_type=str, instructions=instructions, name="support"
    )

    @agent.tool_plain
    def weather(city: str) -> str:
        """Read the weather in a city."""
        WORLD.append(city)
        return f"sunny in {city}"

    return agent


support = build()
"""The agent as recorded."""
reworded = build(instructions="Answer in two lines.")
"""Its prompt changed: a strict re-run diverges on the model request's instructions."""
chattier = build(text="The EU and the UK hold firm.")
"""Its model answers otherwise: a re-run with the model live ends with another output."""
not_an_agent = "support"


def recorded_deps(run: object) -> object:
    """The deps of a re-run: the snapshot the recording kept."""
    return getattr(run, "deps", None)


class Wavering:
    """A `support` model that calls the weather tool, then answers as recorded in every other trial only."""

    def __init__(self) -> None:
        self.answers = 0

    def reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if not returns:
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})])
        self.answers += 1
        # A trial asks both recorded runs: the recorded answer for both, then another for both, in turn.
        text = "The UK holds firm on fisheries." if (self.answers - 1) // 2 % 2 == 0 else "The EU and the UK hold firm."
        return ModelResponse(parts=[TextPart(f"{text} {returns[0].content}")])


wavering = build(model=FunctionModel(Wavering().reply, model_name="support"))
"""The recorded support agent, its provider now wavering: the recorded answer one time in two."""
