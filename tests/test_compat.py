"""The private pydantic-ai names anagrapheus relies on: each check says what moved, so an upgrade fails clearly."""

from __future__ import annotations

import importlib
from dataclasses import fields

import anyio
import pytest
from pydantic_ai import RunContext
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import CombinedToolset, FunctionToolset, ToolsetTool
from pydantic_ai.toolsets.function import FunctionToolsetTool
from pydantic_ai.usage import RunUsage

from anagrapheus.provider import compat

PRIVATE_NAMES = [
    ("pydantic_ai._genai_prices", "fill_response_cost"),
    ("pydantic_ai.exceptions", "_categorized_http_error"),
    ("pydantic_ai._durable_replay", "snapshot"),
]


@pytest.mark.parametrize(("module", "name"), PRIVATE_NAMES)
def test_each_private_import_is_where_the_compat_module_looks(module: str, name: str) -> None:
    found = getattr(importlib.import_module(module), name, None)
    assert callable(found), f"pydantic-ai moved {module}.{name}; update anagrapheus/provider/compat.py"


def harbours(city: str) -> str:
    """List harbours."""
    return city


async def combined_tool() -> ToolsetTool[None]:
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    return (await CombinedToolset([FunctionToolset([harbours])]).get_tools(ctx))["harbours"]


def test_a_function_tool_still_names_its_function_through_a_combined_toolset() -> None:
    assert "call_func" in {f.name for f in fields(FunctionToolsetTool)}, "FunctionToolsetTool lost call_func"
    assert compat.tool_function(anyio.run(combined_tool)) is harbours, (
        "pydantic-ai changed how a toolset's tool keeps its function (FunctionSchema.function, a combined tool's"
        " source_tool); update anagrapheus/provider/compat.py"
    )


def test_an_mcp_toolset_is_recognised_where_the_compat_module_looks() -> None:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    assert compat.is_mcp_toolset(MCPToolset(StdioTransport("python", ["server.py"]))), (
        "pydantic-ai moved MCPToolset out of pydantic_ai.mcp; update anagrapheus/provider/compat.py"
    )
    assert not compat.is_mcp_toolset(FunctionToolset([harbours]))
