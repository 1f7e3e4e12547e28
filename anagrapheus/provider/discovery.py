"""Toolset discovery as pins: an MCP server's tool list and instructions, so a replay never starts the server."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import RunContext
from pydantic_ai.messages import InstructionPart
from pydantic_ai.tools import AgentDepsT, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from typing_extensions import override

from anagrapheus.errors import PinResultError
from anagrapheus.provider.additions import known_dump
from anagrapheus.provider.failures import FAILURES
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.ordered import ordered, read_ordered
from anagrapheus.timeline.resolving.resolver import Resolver

__all__ = ["TOOLSET_INSTRUCTIONS", "TOOLSET_TOOLS", "PinnedDiscovery"]

TOOLSET_TOOLS = "toolset_tools"
"""The pin kind of the tool definitions a toolset listed (an MCP server's `list_tools`)."""
TOOLSET_INSTRUCTIONS = "toolset_instructions"
"""The pin kind of the instructions a toolset gave (an MCP server's, sent when it was connected)."""

Instructions = str | InstructionPart | Sequence[str | InstructionPart] | None

_definitions: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_instructions: TypeAdapter[str | InstructionPart | list[str | InstructionPart] | None] = TypeAdapter(
    str | InstructionPart | list[str | InstructionPart] | None
)


@dataclass
class PinnedDiscovery(WrapperToolset[AgentDepsT]):
    """A toolset that reaches a server to say what tools it has (MCP): its listing and instructions are pinned.

    Each tool is rebuilt from its pinned definition with the toolset's `get_tool_for_tool_def`, as
    pydantic-ai's durable execution rebuilds it. Under replay the wrapped toolset is never entered, so
    a stdio server is never started; a call the recording lacks (`on_miss="record"`) connects for itself.
    """

    resolver: Resolver
    """Answers the listing and the instructions: draws them from the server, or answers them from pins."""
    name: str
    """The toolset in keys: its `id`, or `#n`, its place among the run's discovering toolsets without one."""
    _entered: list[bool] = field(default_factory=list[bool], init=False, repr=False)

    @property
    @override
    def id(self) -> str | None:
        """The wrapped toolset's id: its instructions are keyed under it (`toolset:<id>`), pinned or not."""
        return self.wrapped.id

    @override
    async def __aenter__(self) -> PinnedDiscovery[AgentDepsT]:
        """Enter the wrapped toolset (start its server) only where calls may be drawn: never under replay."""
        live = self.resolver.draws_live
        if live:
            await self.wrapped.__aenter__()
        self._entered.append(live)
        return self

    @override
    async def __aexit__(self, *args: Any) -> bool | None:
        """Leave the wrapped toolset if this entry entered it."""
        if self._entered.pop():
            return await self.wrapped.__aexit__(*args)
        return None

    @override
    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        """The tools the pinned listing names, each rebuilt from its definition."""

        async def listed() -> JSONValue:
            tools = await self.wrapped.get_tools(ctx)
            # As ordered text: a schema reaches the model in its own key order, its descriptions as they were written.
            return ordered(known_dump(_definitions, [tool.tool_def for tool in tools.values()]))

        definitions = await self.resolver.aresolve(
            pin_key(TOOLSET_TOOLS, {"toolset": self.name}),
            kind=TOOLSET_TOOLS,
            effect=listed,
            interpret=_definitions_from_raw,
            failure=FAILURES,
        )
        return {d.name: await self.wrapped.get_tool_for_tool_def(d, ctx) for d in definitions}

    @override
    async def get_instructions(self, ctx: RunContext[AgentDepsT]) -> Instructions:
        """The instructions the toolset gave when recorded (an MCP server's, from when it was connected)."""

        async def given() -> JSONValue:
            found = await self.wrapped.get_instructions(ctx)
            # A text is a Sequence too: only several instructions are pinned as a list, never a text's characters.
            if isinstance(found, str) or not isinstance(found, Sequence):
                return ordered(known_dump(_instructions, found))
            return ordered(known_dump(_instructions, list(found)))

        return await self.resolver.aresolve(
            pin_key(TOOLSET_INSTRUCTIONS, {"toolset": self.name}),
            kind=TOOLSET_INSTRUCTIONS,
            effect=given,
            interpret=_instructions_from_raw,
            failure=FAILURES,
        )

    @override
    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[AgentDepsT]], AbstractToolset[AgentDepsT]]
    ) -> AbstractToolset[AgentDepsT]:
        """A leaf to visitors, so that wrapping the run's toolsets again never pins one discovery twice."""
        return visitor(self)


def _definitions_from_raw(raw: JSONValue) -> list[ToolDefinition]:
    try:
        return _definitions.validate_python(read_ordered(raw))
    except ValueError as e:
        raise PinResultError(f"a {TOOLSET_TOOLS} pin does not hold tool definitions ({e})") from e


def _instructions_from_raw(raw: JSONValue) -> Instructions:
    try:
        return _instructions.validate_python(read_ordered(raw))
    except ValueError as e:
        raise PinResultError(f"a {TOOLSET_INSTRUCTIONS} pin does not hold instructions ({e})") from e
