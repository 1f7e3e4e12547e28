"""The harbour agent of the DBOS recipe, without DBOS: three plain tools asked for one by one, then an answer.

The DBOS worker (tests/dbos_harbour.py) builds it with `DBOSDurability` and `UnitPerRun`; a plain test builds
the same agent (same model name, same tools) to replay a recovered workflow's unit with no DBOS at all.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
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
    pin_model: Callable[[Model], Model] = lambda model: model,
    pin_tool: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda tool: tool,
) -> Agent[None, str]:
    """The agent; every model request and tool body logs `model <whose> <n>` / `tool <whose> <name>` to `log`.

    With `hang="<whose>:<tool>"` (`*` for any `<whose>`), that tool call logs its line and then hangs, for the
    parent to kill; `hang="<whose>:model <n>"` hangs the model's nth request the same way, and
    `hang="<whose>:<tool> returned"` hangs after the tool returned (through `pin_tool`, which wraps each tool
    body: its pin is written), logging `returned <whose> <tool>`. `pin_model` wraps the model, as the Temporal
    recipe pins it.
    """

    def hangs(what: str) -> bool:
        # `*` stands for any run: a Prefect flow run's id is known only once it runs.
        return hang is not None and hang in (f"{whose()}:{what}", f"*:{what}")

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        note(log, f"model {whose()} {len(returns)}")
        if hangs(f"model {len(returns)}"):
            time.sleep(600)  # killed here by the parent
        prompt = str(messages[0].parts[0].content)  # pyright: ignore[reportAttributeAccessIssue]
        if len(returns) < len(TOOLS):
            return ModelResponse(parts=[ToolCallPart(TOOLS[len(returns)], {"where": prompt})])
        return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])

    def tool(name: str) -> Callable[[str], str]:
        def body(where: str) -> str:
            note(log, f"tool {whose()} {name}")
            if hangs(name):
                time.sleep(600)  # killed here by the parent
            return f"{name} at {where}"

        body.__name__ = name
        body.__doc__ = f"Read the {name} at a place."
        pinned = pin_tool(body)
        if hang is None or not hang.endswith(" returned"):
            return pinned

        @functools.wraps(pinned)
        async def returned(where: str) -> str:
            result = pinned(where)
            result = await result if inspect.isawaitable(result) else result
            if hangs(f"{name} returned"):
                note(log, f"returned {whose()} {name}")
                time.sleep(600)  # killed here by the parent, the tool's result not yet reported
            return result

        return returned

    return Agent(
        pin_model(FunctionModel(answer, model_name="harbour")),
        name="harbour",
        tools=[tool(name) for name in TOOLS],
        capabilities=list(capabilities),
    )
