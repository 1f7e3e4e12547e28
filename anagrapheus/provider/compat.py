"""The one place anagrapheus reaches into pydantic-ai's private modules (checked by tests/provider/test_compat.py)."""

from __future__ import annotations

import copy
import sys
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic_ai import (
    Agent,
    _durable_replay,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai import _utils as _pydantic_ai_utils  # pyright: ignore[reportPrivateUsage]
from pydantic_ai import exceptions as _exceptions
from pydantic_ai._genai_prices import fill_response_cost  # pyright: ignore[reportPrivateUsage]
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, ModelResponseStreamEvent, ToolCallPart
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_ai.toolsets.function import FunctionToolsetTool

__all__ = [
    "CATEGORIZED_HTTP_ERROR",
    "RUN_INPUTS_HOOK",
    "ProviderEvents",
    "SyncCallbackThreads",
    "allow_at_run_time",
    "fallback_with_models",
    "fill_response_cost",
    "in_replay_scope",
    "is_mcp_toolset",
    "says_run_inputs_before_its_id",
    "stamped_call_parts",
    "sync_callback_threads",
    "tool_function",
    "watch_provider_events",
]

CATEGORIZED_HTTP_ERROR: Callable[..., Any] = _exceptions._categorized_http_error  # pyright: ignore[reportPrivateUsage]
"""What an HTTP error of a category (`ModelUnavailableError` with a status, say) pickles to: its rebuild recipe."""


RUN_INPUTS_HOOK = "_get_default_run_id_for_inputs"
"""The capability hook pydantic-ai 2.78 asks a run's default id through, handing it the run's inputs (`Pinning`
overrides it by this name); before 2.78, `get_default_run_id` is asked with nothing."""


def says_run_inputs_before_its_id() -> bool:
    """Whether this pydantic-ai hands a capability the run's inputs when it asks for the run's id (2.78 on)."""
    return callable(getattr(AbstractCapability, RUN_INPUTS_HOOK, None))


def allow_at_run_time(capability: type[AbstractCapability[Any]]) -> None:
    """Let pydantic-ai's durable engines accept `capability` given to one run inside a workflow.

    The engines refuse a capability added per run, because its toolsets and `@durable_operation`
    methods were never registered as durable units; one that contributes neither (it only wraps
    the model and the toolsets the agent already has) is safe. pydantic-ai says so with a private
    class flag, `_safe_at_runtime`, today set only by its `Instrumentation`.
    """
    if not isinstance(getattr(AbstractCapability, "_safe_at_runtime", None), bool):
        raise RuntimeError("pydantic-ai no longer has AbstractCapability._safe_at_runtime; update provider/compat.py")
    capability._safe_at_runtime = True  # pyright: ignore[reportPrivateUsage]


def fallback_with_models(fallback: FallbackModel, models: list[Model]) -> FallbackModel:
    """Return a copy of `fallback` (same fallback conditions) that tries `models` instead, not yet entered."""
    copied = copy.copy(fallback)
    # The copy starts unentered, with a lock of its own (a cached property, dropped so it is made anew). Its first
    # entry, at count 0, makes it an exit stack of its own, so the original's it copied is never used.
    vars(copied).pop("_enter_lock", None)
    copied._entered_count = 0  # pyright: ignore[reportPrivateUsage]
    copied.models = models
    return copied


def in_replay_scope() -> bool:
    """Whether a `replay_scope()` is already open here (a durable engine's): one scope per run keeps one tally."""
    return _durable_replay.snapshot() is not None


def is_mcp_toolset(toolset: AbstractToolset[Any]) -> bool:
    """Whether `toolset` is pydantic-ai's `MCPToolset`, without importing its optional MCP client."""
    # No MCPToolset exists unless its module (which needs the `mcp` extra) was imported by whoever built one.
    module = sys.modules.get("pydantic_ai.mcp")
    return module is not None and isinstance(toolset, module.MCPToolset)


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


@dataclass
class ProviderEvents:
    """What a watched stream's provider yielded: its events, and whether it reached its end."""

    events: list[ModelResponseStreamEvent] = field(default_factory=list[ModelResponseStreamEvent])
    """The events, in order."""
    ended: bool = False
    """Whether the provider's events ran out (a consumer may still have stopped before the stream's last event)."""


def watch_provider_events(stream: StreamedResponse) -> ProviderEvents | None:
    """Watch the events `stream`'s provider yields, as its own `__aiter__` reads them.

    The provider's events are what `_get_event_iterator` yields, before pydantic-ai adds the part ends and the
    final-result event; a replay that yields the same ones gets the rest added the same way. Shadowed on the
    instance (the stream is this request's, handed to no one yet) rather than wrapped, because the agent reads
    a dozen attributes of the very object the model yielded. None, watching nothing, when the stream was
    already read (a `FallbackModel` reads a member's first event before handing it over).
    """
    if stream._event_iterator is not None:  # pyright: ignore[reportPrivateUsage]
        return None
    events = stream._get_event_iterator  # pyright: ignore[reportPrivateUsage]
    seen = ProviderEvents()

    async def watched() -> AsyncIterator[ModelResponseStreamEvent]:
        async for event in events():
            seen.events.append(event)
            yield event
        seen.ended = True

    setattr(stream, "_get_event_iterator", watched)  # noqa: B010 (a method shadowed on one instance)
    return seen


def stamped_call_parts(response: ModelResponse, parameters: ModelRequestParameters) -> ModelResponse:
    """`response` with its tool calls stamped as a live stream's parts manager stamps them (an output call's kind).

    pydantic-ai 2.78 stamps a streamed call as it arrives and a plain response after `Model.request` returns, so
    a pin drawn by a plain request lacks what a stream replayed from it must carry (`tool_kind='output'`). Before
    2.78 nothing is stamped: the response is returned as it is.
    """
    try:
        from pydantic_ai._parts_manager import (  # pyright: ignore[reportPrivateUsage]
            stamp_and_type_call_part,
            tool_part_kinds,
            ui_visibility_stamps,
        )
    except ImportError:  # pragma: no cover - pydantic-ai before 2.78 stamps nothing
        return response
    kinds, stamps = tool_part_kinds(parameters), ui_visibility_stamps(parameters)
    parts = [
        stamp_and_type_call_part(part, kinds, stamps) if isinstance(part, ToolCallPart) else part
        for part in response.parts
    ]
    if all(new is old for new, old in zip(parts, response.parts, strict=True)):
        return response
    return replace(response, parts=parts)


@dataclass(frozen=True, slots=True)
class SyncCallbackThreads:
    """Where pydantic-ai runs a sync callback (a sync tool's body) at this point of a run."""

    executor: Executor | None
    """The executor the app chose (`Agent.using_thread_executor`, `UseThreadExecutor`); None for anyio's threads."""


def sync_callback_threads() -> SyncCallbackThreads | None:
    """Where pydantic-ai would run a sync callback now; None where this pydantic-ai does not say.

    pydantic-ai sets where with a public context manager (`Agent.using_thread_executor`) but reads it from a private
    context variable, `pydantic_ai._utils._thread_executor`, read here so that an executor set for one tool call
    (`sync_bodies.BodyThreads`) runs the body where the app's would have. None keeps the call as it is: its body's
    result is then dropped when its call is cancelled while it runs, as before.
    """
    slot: object = getattr(_pydantic_ai_utils, "_thread_executor", None)
    if not isinstance(slot, ContextVar) or not callable(getattr(Agent, "using_thread_executor", None)):
        return None
    executor: object = cast("ContextVar[object]", slot).get()
    return SyncCallbackThreads(executor if isinstance(executor, Executor) else None)
