"""Agents that `anagrapheus rerun` and `export --as-test` load by name in the tests: the recorded one and changes."""

from __future__ import annotations

from pydantic_ai import Agent

from tests.conftest import Scripted

WORLD: list[str] = []
"""Every tool body that ran: a re-run answered from pins adds nothing."""


def build(
    *, instructions: str = "Answer in one line.", text: str = "The UK holds firm on fisheries."
) -> Agent[str, str]:
    """A support agent with one world-reading tool; its model is scripted."""
    agent = Agent(Scripted("support", text=text).model, deps_type=str, instructions=instructions, name="support")

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
