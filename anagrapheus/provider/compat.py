"""The one place anagrapheus reaches into pydantic-ai's private modules; tests/test_compat.py fails when they move."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from pydantic_ai._genai_prices import fill_response_cost  # pyright: ignore[reportPrivateUsage]
from pydantic_ai.toolsets import ToolsetTool
from pydantic_ai.toolsets.function import FunctionToolsetTool

__all__ = ["fill_response_cost", "tool_function"]


def tool_function(tool: ToolsetTool[Any]) -> Callable[..., Any] | None:
    """Return the Python function behind a function toolset's tool, or None for any other tool (MCP, say)."""
    # A combined toolset hands out its own private tool type, keeping the member's tool as `source_tool`.
    while isinstance(source := getattr(tool, "source_tool", None), ToolsetTool):
        tool = cast("ToolsetTool[Any]", source)
    if not isinstance(tool, FunctionToolsetTool):
        return None
    # `call_func` is the bound `call` of the tool's private `FunctionSchema`, which keeps the function it calls.
    schema = getattr(tool.call_func, "__self__", None)
    function = getattr(schema, "function", None)
    return function if callable(function) else None
