"""pinned_tool: a tool that reads the world, drawn once and answered from its pin thereafter."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

import anyio.to_thread
from pydantic_ai import RunContext
from pydantic_core import PydanticSerializationError, to_jsonable_python

from anagrapheus.errors import CanonicalError, PinResultError, UsageError
from anagrapheus.timeline.canonical import JSONValue, canonical_value, pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of
from anagrapheus.timeline.resolver import PinResolver

__all__ = ["TOOL_CALL", "pinned_tool"]

TOOL_CALL = "tool_call"
"""The pin kind of a tool call."""

P = ParamSpec("P")
R = TypeVar("R")


def _arguments(tool: str, bound: inspect.BoundArguments) -> dict[str, JSONValue]:
    """The call's arguments as JSON, without the `RunContext` the run fills in."""
    arguments: dict[str, JSONValue] = {}
    for name, value in bound.arguments.items():
        if isinstance(value, RunContext):
            continue
        try:
            arguments[name] = canonical_value(to_jsonable_python(value))
        except (PydanticSerializationError, CanonicalError) as e:
            raise CanonicalError(
                f"argument {name!r} of tool {tool!r} cannot be keyed as JSON ({e})", path=f"$.args.{name}"
            ) from e
    return arguments


def _result(tool: str, result: object) -> JSONValue:
    try:
        return canonical_value(result)
    except CanonicalError as e:
        raise PinResultError(
            f"tool {tool!r} returned {type(result).__qualname__}, which is not JSON-shaped ({e}); a pinned tool must"
            " return JSON types (dict, list, str, int, float, bool, None), e.g. model.model_dump(mode='json')"
        ) from e


def _as_returned(raw: JSONValue) -> JSONValue:
    # The tool's result reaches the run as JSON on every path, so a first run and its replay see identical values.
    return raw


def pinned_tool(
    resolver: PinResolver,
    func: Callable[P, R] | Callable[P, Awaitable[R]],
    *,
    name: str | None = None,
) -> Callable[P, Awaitable[JSONValue]]:
    """Wrap a world-reading tool so its result is pinned under its name and arguments (without the `RunContext`).

    The wrapper is always a coroutine function with the tool's signature and docstring, so pydantic-ai
    builds the same schema. A synchronous body runs in a worker thread while the resolver is touched
    only on the calling thread. The result must be JSON-shaped; it is returned as JSON on every path.
    `name` names both the pin and the tool pydantic-ai registers; it defaults to the function's name.
    """
    tool = name if name is not None else getattr(func, "__name__", None)
    if not tool:
        raise UsageError("pinned_tool needs name=... for a callable without a __name__")
    signature = inspect.signature(func)
    is_async = inspect.iscoroutinefunction(func)

    @functools.wraps(func)
    async def pinned(*args: P.args, **kwargs: P.kwargs) -> JSONValue:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        material: dict[str, JSONValue] = {"tool": tool, "args": _arguments(tool, bound)}

        async def draw() -> JSONValue:
            if is_async:
                result: object = await cast(Callable[P, Awaitable[R]], func)(*args, **kwargs)
            else:
                result = await anyio.to_thread.run_sync(
                    functools.partial(cast(Callable[..., Any], func), *args, **kwargs)
                )
            return _result(tool, result)

        return await resolver.aresolve(
            pin_key(TOOL_CALL, material),
            kind=TOOL_CALL,
            effect=draw,
            interpret=_as_returned,
            fingerprint=fingerprint_of(material),
        )

    # One name for the pin and for the tool pydantic-ai registers (it names a tool after `__name__`).
    pinned.__name__ = tool
    return pinned
