"""The private pydantic-ai names anagrapheus relies on: each check says what moved, so an upgrade fails clearly."""

from __future__ import annotations

import importlib
from dataclasses import fields, replace
from typing import Any, cast

import anyio
import pytest
from pydantic_ai import RunContext
from pydantic_ai.models.fallback import FallbackModel
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


class Door(TestModel):
    """A model that logs being entered and exited; entering waits for `opened` when one is given."""

    def __init__(self, name: str, log: list[str], opened: anyio.Event | None = None) -> None:
        super().__init__()
        self.name, self.log, self.opened = name, log, opened

    async def __aenter__(self) -> Door:
        if self.opened is not None:
            await self.opened.wait()
        self.log.append(f"enter {self.name}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.log.append(f"exit {self.name}")


def test_a_fallback_copy_of_an_entered_fallback_enters_and_exits_its_own_models() -> None:
    log: list[str] = []

    async def main() -> list[str]:
        original = FallbackModel(Door("original", log))
        async with original:
            copied = compat.fallback_with_models(original, [Door("a", log), Door("b", log)])
            async with copied:
                inside = list(log)
        return inside

    assert anyio.run(main) == ["enter original", "enter a", "enter b"]
    assert log[3:] == ["exit b", "exit a", "exit original"]


def test_a_fallback_copy_is_entered_while_its_original_waits_on_a_slow_model() -> None:
    # The copy has a lock of its own: the original's entry, stuck on a slow provider, must not hold the copy up.
    log: list[str] = []

    async def main() -> None:
        opened = anyio.Event()
        original = FallbackModel(Door("original", log, opened))
        async with anyio.create_task_group() as tasks:

            async def enter(model: FallbackModel) -> None:
                async with model:
                    pass

            tasks.start_soon(enter, original)
            await anyio.wait_all_tasks_blocked()
            tasks.start_soon(enter, compat.fallback_with_models(original, [Door("a", log)]))
            await anyio.wait_all_tasks_blocked()
            entered_first = list(log)
            opened.set()
            assert entered_first == ["enter a", "exit a"]

    anyio.run(main)
    assert log[2:] == ["enter original", "exit original"]


def _plain(**kwargs: object) -> object:
    return kwargs


class _Schema:
    function = "not a function"

    def call(self, **kwargs: object) -> object:
        return kwargs


class _Unnamed:
    def call(self, **kwargs: object) -> object:
        return kwargs


@pytest.mark.parametrize(
    "call_func",
    [_plain, _Unnamed().call, _Schema().call],
    ids=["a-plain-function", "a-method-of-no-schema", "a-schema-whose-function-is-not-callable"],
)
def test_a_function_tool_whose_call_keeps_no_function_has_none(call_func: Any) -> None:
    tool = anyio.run(combined_tool)
    source = replace(cast("FunctionToolsetTool[None]", tool.source_tool), call_func=call_func)  # type: ignore[attr-defined]
    assert compat.tool_function(source) is None


def test_the_run_time_flag_durable_engines_read_is_where_the_compat_module_sets_it() -> None:
    from pydantic_ai.capabilities import AbstractCapability, Instrumentation

    from anagrapheus import Pinning

    flag = AbstractCapability.__dict__.get("_safe_at_runtime")
    assert flag is False, "pydantic-ai moved AbstractCapability._safe_at_runtime; update allow_at_run_time"
    assert Instrumentation.__dict__.get("_safe_at_runtime") is True, "pydantic-ai changed what the flag means"
    assert Pinning.__dict__.get("_safe_at_runtime") is True


def test_allow_at_run_time_fails_loudly_when_the_flag_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai.capabilities import AbstractCapability

    monkeypatch.delattr(AbstractCapability, "_safe_at_runtime")

    class Mine(AbstractCapability[Any]):
        pass

    with pytest.raises(RuntimeError, match="no longer has"):
        compat.allow_at_run_time(Mine)


def test_the_run_id_hook_hands_a_capability_the_runs_inputs_where_the_compat_module_says() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability

    seen: list[dict[str, Any]] = []

    class Listening(AbstractCapability[Any]):
        async def _get_default_run_id_for_inputs(self, get_inputs: Any) -> str | None:
            seen.append(dict(get_inputs()))
            return None

    Agent(TestModel(), deps_type=str, capabilities=[Listening()]).run_sync("Brest?", deps="alice")
    if compat.says_run_inputs_before_its_id():
        assert [(s["prompt"], s["messages"], s["deps"]) for s in seen] == [("Brest?", [], "alice")], (
            f"pydantic-ai changed what {compat.RUN_INPUTS_HOOK} hands a capability; update Pinning's override"
        )
    else:
        assert seen == []  # before 2.78: runs are placed where they start, and their places pinned at the start


def test_the_executor_an_app_sets_for_sync_callbacks_is_where_the_compat_module_reads_it() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from pydantic_ai import Agent

    assert compat.sync_callback_threads() == compat.SyncCallbackThreads(None), (
        "pydantic-ai moved pydantic_ai._utils._thread_executor; update sync_callback_threads"
    )
    with ThreadPoolExecutor(max_workers=1) as executor, Agent.using_thread_executor(executor):
        assert compat.sync_callback_threads() == compat.SyncCallbackThreads(executor)


def test_pydantic_ai_hands_a_sync_callback_to_the_executor_set_for_it() -> None:
    # What `Pinning` relies on to keep a cancelled sync tool body's result (sync_bodies.py): one submit per callback.
    from pydantic_ai import Agent
    from pydantic_ai._utils import run_in_executor  # pyright: ignore[reportPrivateUsage]

    from anagrapheus.provider.sync_bodies import BodyThreads

    def tide() -> str:
        return "high tide at Brest 14:05"

    async def handed() -> tuple[str, int]:
        threads = BodyThreads(None)
        with Agent.using_thread_executor(threads):
            return await run_in_executor(tide), len(threads.submitted)

    assert anyio.run(handed) == ("high tide at Brest 14:05", 1), "pydantic-ai no longer runs sync callbacks there"


def test_a_pydantic_ai_that_does_not_say_where_its_threads_run_is_read_as_saying_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic_ai.agent import AbstractAgent

    monkeypatch.delattr(AbstractAgent, "using_thread_executor")
    assert compat.sync_callback_threads() is None
