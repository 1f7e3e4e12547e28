"""pinned_tool: a tool that reads the world, drawn once and answered from its pin thereafter."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

import anyio.to_thread
from pydantic_ai import RunContext

from anagrapheus.errors import CanonicalError, PinResultError, UsageError
from anagrapheus.provider.failures import DrawSequence
from anagrapheus.provider.policy_material import MaterialWalk
from anagrapheus.timeline.canonical import JSONValue, canonical_value, pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of
from anagrapheus.timeline.resolver import PinResolver

__all__ = [
    "TOOL_CALL",
    "ToolPin",
    "is_pinned_tool",
    "pinned_tool",
    "tool_pin",
    "tool_result_from_raw",
    "tool_result_raw",
]

TOOL_CALL = "tool_call"
"""The pin kind of a tool call."""

_PINNED_MARK = "__anagrapheus_pinned_tool__"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ToolPin:
    """The key of one tool call, and a compact per-field fingerprint of its material for divergence reports."""

    key: str
    """`p1:tool_call:<sha256 of the tool's name and arguments>`."""
    fingerprint: Mapping[str, str]
    """Field name (`tool`, `args.city`) to a short digest; never content."""


_UNKEYED: object = object()


def tool_pin(tool: str, arguments: Mapping[str, object], *, deps: object = _UNKEYED) -> ToolPin:
    """Key a call of `tool` with `arguments` (by parameter name); a `RunContext` among them is left out of the key.

    The run's deps are not in a tool's key. Pass `deps=` (JSON-shaped, or a pydantic model) to key the part
    of the deps that decides what the tool reads, such as a region or an account.
    """
    material: dict[str, JSONValue] = {"tool": tool, "args": _arguments(tool, arguments)}
    if deps is not _UNKEYED:
        try:
            material["deps"] = MaterialWalk().value(deps, at="$.deps")
        except CanonicalError as e:
            raise CanonicalError(f"the deps keyed for tool {tool!r} cannot be keyed: {e.reason}", path=e.path) from e
    return ToolPin(key=pin_key(TOOL_CALL, material), fingerprint=fingerprint_of(material))


def _arguments(tool: str, given: Mapping[str, object]) -> dict[str, JSONValue]:
    """The call's arguments as key material, without the `RunContext` the run fills in.

    Written by the model calls' walk, so both keep one canonical form: sets sorted, bytes by digest,
    never an order that changes with the process's hash seed.
    """
    arguments: dict[str, JSONValue] = {}
    walk = MaterialWalk()
    for name, value in given.items():
        if isinstance(value, RunContext):
            continue
        try:
            arguments[name] = walk.value(value, at=f"$.args.{name}")
        except CanonicalError as e:
            message = f"argument {name!r} of tool {tool!r} cannot be keyed as JSON: {e.reason}"
            raise CanonicalError(message, path=e.path) from e
    return arguments


def tool_result_raw(tool: str, result: object) -> JSONValue:
    """Return a tool's result as the raw JSON its pin keeps, or raise `PinResultError` saying why it cannot be."""
    try:
        return canonical_value(result)
    except CanonicalError as e:
        raise PinResultError(
            f"tool {tool!r} returned {type(result).__qualname__}, which is not JSON-shaped ({e}); a pinned tool must"
            " return JSON types (dict, list, str, int, float, bool, None), e.g. model.model_dump(mode='json')"
        ) from e


def tool_result_from_raw(raw: JSONValue) -> JSONValue:
    """Return a tool pin's raw JSON as the run receives it: JSON on every path, so a replay sees what the run saw."""
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
    # A call retried after it failed (a `ModelRetry`, say) is drawn anew; its failures are pinned in order.
    draws = DrawSequence()

    @functools.wraps(func)
    async def pinned(*args: P.args, **kwargs: P.kwargs) -> JSONValue:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = tool_pin(tool, bound.arguments)

        async def draw() -> JSONValue:
            if is_async:
                result: object = await cast(Callable[P, Awaitable[R]], func)(*args, **kwargs)
            else:
                result = await anyio.to_thread.run_sync(
                    functools.partial(cast(Callable[..., Any], func), *args, **kwargs)
                )
            return tool_result_raw(tool, result)

        return await draws.resolve(
            resolver,
            call.key,
            kind=TOOL_CALL,
            effect=draw,
            interpret=tool_result_from_raw,
            fingerprint=call.fingerprint,
        )

    # One name for the pin and for the tool pydantic-ai registers (it names a tool after `__name__`).
    pinned.__name__ = tool
    # Lets the `Pinning` capability pass the call through rather than pin it twice under one key.
    setattr(pinned, _PINNED_MARK, True)
    return pinned


def is_pinned_tool(func: object) -> bool:
    """Whether `func` is a wrapper made by `pinned_tool`, which pins its own calls."""
    return getattr(func, _PINNED_MARK, False) is True
