"""The harbour agent of the DBOS recipe, without DBOS: three plain tools asked for one by one, then an answer.

The DBOS worker (tests/dbos_harbour.py) builds it with `DBOSDurability` and `UnitPerRun`; a plain test builds
the same agent (same model name, same tools) to replay a recovered workflow's unit with no DBOS at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

TOOLS = ("weather", "tide", "berths")


def note(log: Path, line: str) -> None:
    """Append one line to the shared log (several workers append to it concurrently)."""
    with log.open("a") as f:
        f.write(line + "\n")


def harbour_agent(
    log: Path,
    *,
    capabilities: Sequence[AbstractCapability[Any]],
    whose: Callable[[], str | None] = lambda: None,
    hang: str | None = None,
) -> Agent[None, str]:
    """The agent; every model request and tool body logs `model <whose> <n>` / `tool <whose> <name>` to `log`.

    With `hang="<whose>:<tool>"`, that tool call logs its line and then hangs, for the parent to kill.
    """

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        note(log, f"model {whose()} {len(returns)}")
        prompt = str(messages[0].parts[0].content)  # pyright: ignore[reportAttributeAccessIssue]
        if len(returns) < len(TOOLS):
            return ModelResponse(parts=[ToolCallPart(TOOLS[len(returns)], {"where": prompt})])
        return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])

    def tool(name: str) -> Callable[[str], str]:
        def body(where: str) -> str:
            note(log, f"tool {whose()} {name}")
            if hang is not None and hang == f"{whose()}:{name}":
                time.sleep(600)  # killed here by the parent
            return f"{name} at {where}"

        body.__name__ = name
        body.__doc__ = f"Read the {name} at a place."
        return body

    return Agent(
        FunctionModel(answer, model_name="harbour"),
        name="harbour",
        tools=[tool(name) for name in TOOLS],
        capabilities=list(capabilities),
    )
