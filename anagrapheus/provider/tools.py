"""pinned_tool: a tool that reads the world, drawn once and answered from its pin thereafter."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

import anyio.to_thread
from pydantic import TypeAdapter
from pydantic_ai import RunContext, messages
from pydantic_ai.messages import (
    MULTI_MODAL_CONTENT_TYPES,
    CachePoint,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    TextContent,
    ToolReturn,
)
from pydantic_core import PydanticSerializationError, to_jsonable_python

from anagrapheus.errors import CanonicalError, PinResultError, UsageError
from anagrapheus.provider.failures import DrawSequence
from anagrapheus.provider.occurrence import ask
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


def tool_pin(
    tool: str,
    arguments: Mapping[str, object],
    *,
    deps: object = _UNKEYED,
    ctx: RunContext[Any] | None = None,
) -> ToolPin:
    """Key a call of `tool` with `arguments` (by parameter name); a `RunContext` among them is left out of the key.

    The run's deps are not in a tool's key. Pass `deps=` (JSON-shaped, or a pydantic model) to key the part
    of the deps that decides what the tool reads, such as a region or an account. What the call's
    `RunContext` (`ctx`, or one among the arguments) says about the call itself joins the key (the
    approval rule): an approved call (`tool_call_approved`) and the metadata its approval carried
    (`tool_call_metadata`), so an approved call is never answered by the pin of the unapproved one.
    A call that is neither approved nor carries metadata keeps the key it always had.
    """
    material: dict[str, JSONValue] = {"tool": tool, "args": _arguments(tool, arguments)}
    if deps is not _UNKEYED:
        try:
            material["deps"] = MaterialWalk().value(deps, at="$.deps")
        except CanonicalError as e:
            raise CanonicalError(f"the deps keyed for tool {tool!r} cannot be keyed: {e.reason}", path=e.path) from e
    context = ctx if ctx is not None else _context_among(arguments)
    if context is not None:
        material.update(_call_context(tool, context))
    return ToolPin(key=pin_key(TOOL_CALL, material), fingerprint=fingerprint_of(material))


def _context_among(arguments: Mapping[str, object]) -> RunContext[Any] | None:
    """The `RunContext` the run passed among a tool's arguments, if the tool takes one."""
    for value in arguments.values():
        if isinstance(value, RunContext):
            return cast("RunContext[Any]", value)
    return None


def _call_context(tool: str, ctx: RunContext[Any]) -> dict[str, JSONValue]:
    """What a call's `RunContext` says about the call that can change the tool's answer: its approval."""
    material: dict[str, JSONValue] = {}
    # A context made by hand (a test calling the tool directly) may lack the fields: such a call is not approved.
    if getattr(ctx, "tool_call_approved", False):
        material["approved"] = True
    metadata: object = getattr(ctx, "tool_call_metadata", None)
    if metadata is not None:
        try:
            material["approval_metadata"] = MaterialWalk().value(metadata, at="$.approval_metadata")
        except CanonicalError as e:
            message = f"the approval metadata of a call of tool {tool!r} cannot be keyed: {e.reason}"
            raise CanonicalError(message, path=e.path) from e
    return material


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


def tool_result_raw(tool: str, result: object, *, enqueued: Sequence[tuple[Sequence[object], str]] = ()) -> JSONValue:
    """Return a tool's result as the raw JSON its pin keeps, or raise `PinResultError` saying why it cannot be.

    A result holding what pydantic-ai sends the model as more than JSON (a `ToolReturn`, an image or other
    `BinaryContent`, a URL to a file) is kept type-tagged, so `tool_result_from_raw` rebuilds the very objects.
    """
    if enqueued:
        return {_TAGGED: 1, "value": _tagged(tool, result), "enqueued": enqueued_raw(tool, enqueued)}
    if holds_content(result):
        return {_TAGGED: 1, "value": _tagged(tool, result)}
    try:
        return canonical_value(result)
    except CanonicalError as e:
        raise PinResultError(
            f"tool {tool!r} returned {type(result).__qualname__}, which is not JSON-shaped ({e}); a pinned tool must"
            " return JSON types (dict, list, str, int, float, bool, None), e.g. model.model_dump(mode='json')"
        ) from e


def tool_result_from_raw(raw: JSONValue) -> Any:
    """Return a tool pin's raw JSON as the run receives it, on every path, so a replay sees what the run saw.

    JSON comes back as JSON; a type-tagged result (see `tool_result_raw`) as the objects the tool returned.
    """
    return tool_answer_from_raw(raw)[0]


def tool_answer_from_raw(raw: JSONValue) -> tuple[Any, list[tuple[list[Any], str]]]:
    """A tool pin's result as the run receives it, and what the tool enqueued into its run (`ctx.enqueue`)."""
    if isinstance(raw, dict) and raw.keys() in ({_TAGGED, "value"}, {_TAGGED, "value", "enqueued"}):
        enqueued = enqueued_from_raw(raw["enqueued"]) if "enqueued" in raw else []
        return _untagged(raw["value"]), enqueued
    return raw, []


def enqueued_raw(tool: str, enqueued: Sequence[tuple[Sequence[object], str]]) -> JSONValue:
    """What a tool enqueued into its run (`ctx.enqueue`), each call's content type-tagged with its priority."""
    return [
        {"content": [_tagged(tool, item) for item in content], "priority": priority} for content, priority in enqueued
    ]


def enqueued_from_raw(raw: JSONValue) -> list[tuple[list[Any], str]]:
    """Rebuild what `enqueued_raw` wrote: each `ctx.enqueue` call's content and priority, in order."""
    if not isinstance(raw, list):
        raise PinResultError(f"a tool pin's enqueued messages are {raw!r}, not a list")
    calls: list[tuple[list[Any], str]] = []
    for call in raw:
        if not (
            isinstance(call, dict) and isinstance(call.get("content"), list) and isinstance(call.get("priority"), str)
        ):
            raise PinResultError(f"a tool pin's enqueued message is {call!r}, not its content and priority")
        content = cast("list[JSONValue]", call["content"])
        calls.append(([_untagged(item) for item in content], cast(str, call["priority"])))
    return calls


# A tool's result holding pydantic-ai message content is kept as {_TAGGED: 1, "value": <tagged tree>}, in which every
# node says what it is ({"$t": "json" | "list" | "dict" | "content" | "ToolReturn", ...}), so nothing is guessed back.
_TAGGED = "$anagrapheus.tool_result"
_CONTENT_TYPES: tuple[type, ...] = (*MULTI_MODAL_CONTENT_TYPES, TextContent, CachePoint)


_messages = ModelMessagesTypeAdapter
_request_parts: TypeAdapter[ModelRequestPart] = TypeAdapter(ModelRequestPart)


def _is_request_part(value: object) -> bool:
    """Whether `value` is a part of a model request (what a tool may enqueue), as pydantic-ai defines them."""
    return type(value).__module__ == messages.__name__ and isinstance(getattr(value, "part_kind", None), str)


def holds_content(value: object) -> bool:
    """Whether `value` is, or holds in a list, tuple or dict, something pydantic-ai sends as more than JSON."""
    if isinstance(value, (ToolReturn, ModelRequest, ModelResponse, *_CONTENT_TYPES)) or _is_request_part(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(holds_content(item) for item in cast("list[object] | tuple[object, ...]", value))
    if isinstance(value, dict):
        return any(holds_content(item) for item in cast("dict[object, object]", value).values())
    return False


def _tagged(tool: str, value: object) -> JSONValue:
    """`value` as a tree of type-tagged JSON nodes."""
    if isinstance(value, ToolReturn):
        returned = cast("ToolReturn[object]", value)
        names = [f.name for f in dataclasses.fields(returned) if f.name != "kind"]
        return {"$t": "ToolReturn", "v": {name: _tagged(tool, getattr(returned, name)) for name in names}}
    if isinstance(value, _CONTENT_TYPES):
        dumped = TypeAdapter(type(value)).dump_python(value, mode="json")
        return {"$t": "content", "class": type(value).__name__, "v": canonical_value(dumped)}
    if isinstance(value, (ModelRequest, ModelResponse)):
        return {"$t": "message", "v": canonical_value(_messages.dump_python([value], mode="json")[0])}
    if _is_request_part(value):
        return {"$t": "request_part", "v": canonical_value(_request_parts.dump_python(cast(Any, value), mode="json"))}
    if isinstance(value, (list, tuple)):
        items = cast("list[object] | tuple[object, ...]", value)
        return {"$t": "tuple" if isinstance(value, tuple) else "list", "v": [_tagged(tool, item) for item in items]}
    if isinstance(value, dict):
        entries = cast("dict[object, object]", value)
        if holds_content(entries):
            return {"$t": "dict", "v": {str(name): _tagged(tool, item) for name, item in entries.items()}}
    return _json_leaf(tool, cast(object, value))


def _json_leaf(tool: str, value: object) -> JSONValue:
    """A part of a tagged result that holds no message content, as its JSON."""
    try:
        return {"$t": "json", "v": canonical_value(to_jsonable_python(value))}
    except (CanonicalError, PydanticSerializationError) as e:
        held = type(value).__qualname__
        raise PinResultError(f"tool {tool!r} returned {held} inside its result, which has no JSON form ({e})") from e


def _untagged(node: JSONValue) -> Any:
    """Rebuild what `_tagged` wrote, or raise `PinResultError` for a node it could not have written."""
    if not isinstance(node, dict):
        raise PinResultError(f"a tagged tool result holds {node!r}, not a tagged node")
    tag, value = node.get("$t"), node.get("v")
    if tag == "json":
        return value
    if tag == "list" and isinstance(value, list):
        return [_untagged(item) for item in value]
    if tag == "tuple" and isinstance(value, list):
        return tuple(_untagged(item) for item in value)
    if tag == "dict" and isinstance(value, dict):
        return {name: _untagged(item) for name, item in value.items()}
    if tag == "ToolReturn" and isinstance(value, dict):
        return ToolReturn(**{name: _untagged(item) for name, item in value.items()})
    if tag == "message":
        return _messages.validate_python([value])[0]
    if tag == "request_part":
        return _request_parts.validate_python(value)
    if tag == "content":
        found = getattr(messages, str(node.get("class")), None)
        if isinstance(found, type) and issubclass(found, _CONTENT_TYPES):
            return TypeAdapter(found).validate_python(value)
    raise PinResultError(f"a tagged tool result holds a node anagrapheus cannot rebuild: {node!r}")


def pinned_tool(
    resolver: PinResolver,
    func: Callable[P, R] | Callable[P, Awaitable[R]],
    *,
    name: str | None = None,
    dedupe_repeats: bool = False,
) -> Callable[P, Awaitable[Any]]:
    """Wrap a world-reading tool so its result is pinned under its name and arguments (without the `RunContext`).

    The wrapper is always a coroutine function with the tool's signature and docstring, so pydantic-ai
    builds the same schema. A synchronous body runs in a worker thread while the resolver is touched
    only on the calling thread. The result must be JSON-shaped, or hold pydantic-ai message content
    (`ToolReturn`, `BinaryContent`, ...); it is returned as the same JSON, or rebuilt as the same objects,
    on every path. `name` names both the pin and the tool pydantic-ai registers; it defaults to the
    function's name. A call made again with the same arguments in one agent run, after the first
    returned, runs again (the repeat rule); `dedupe_repeats=True` answers it from the first call's pin.
    """
    tool = name if name is not None else getattr(func, "__name__", None)
    if not tool:
        raise UsageError("pinned_tool needs name=... for a callable without a __name__")
    signature = inspect.signature(func)
    is_async = inspect.iscoroutinefunction(func)
    # A call retried after it failed (a `ModelRetry`, say) is drawn anew; its failures are pinned in order.
    draws = DrawSequence()

    @functools.wraps(func)
    async def pinned(*args: P.args, **kwargs: P.kwargs) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = tool_pin(tool, bound.arguments)
        asking = ask(
            call.key,
            kind=TOOL_CALL,
            resolver=resolver,
            ctx=_context_among(bound.arguments),
            per_run=not dedupe_repeats,
        )

        drawn = False

        async def draw() -> JSONValue:
            nonlocal drawn
            drawn = True
            enqueued: list[tuple[Sequence[object], str]] = []
            call_args, call_kwargs = _with_noting_context(signature, bound.arguments, enqueued, args, kwargs)
            if is_async:
                result: object = await cast(Callable[..., Awaitable[R]], func)(*call_args, **call_kwargs)
            else:
                result = await anyio.to_thread.run_sync(
                    functools.partial(cast(Callable[..., Any], func), *call_args, **call_kwargs)
                )
            return tool_result_raw(tool, result, enqueued=enqueued)

        answer, enqueued = await draws.resolve(
            resolver,
            asking.key,
            kind=TOOL_CALL,
            effect=draw,
            interpret=tool_answer_from_raw,
            fingerprint=call.fingerprint,
        )
        asking.arrived()
        context = _context_among(bound.arguments)
        if not drawn and context is not None:
            enqueue_again(context, enqueued)
        return answer

    # One name for the pin and for the tool pydantic-ai registers (it names a tool after `__name__`).
    pinned.__name__ = tool
    # Lets the `Pinning` capability pass the call through rather than pin it twice under one key.
    setattr(pinned, _PINNED_MARK, True)
    return pinned


def noting_enqueues(ctx: RunContext[Any], enqueued: list[tuple[Sequence[object], str]]) -> RunContext[Any]:
    """A copy of a call's context whose `enqueue` also notes what the tool enqueued, to pin with its result."""
    noting = dataclasses.replace(ctx)
    deliver = ctx.enqueue

    def enqueue(*content: Any, priority: Any = "asap") -> str | None:
        enqueued.append((content, priority))
        return deliver(*content, priority=priority)

    noting.enqueue = enqueue  # type: ignore[method-assign]
    return noting


def enqueue_again(ctx: RunContext[Any], enqueued: list[tuple[list[Any], str]]) -> None:
    """Enqueue into the run what a tool enqueued when it ran, now that its pin answers it instead."""
    for content, priority in enqueued:
        ctx.enqueue(*content, priority=cast(Any, priority))


def _with_noting_context(
    signature: inspect.Signature,
    arguments: Mapping[str, object],
    enqueued: list[tuple[Sequence[object], str]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments, with the `RunContext` among them (if any) swapped for one noting its enqueues."""
    context = _context_among(arguments)
    if context is None:
        return args, kwargs
    swapped = {
        name: noting_enqueues(context, enqueued) if value is context else value for name, value in arguments.items()
    }
    rebound = signature.bind_partial()
    rebound.arguments.update(swapped)
    return rebound.args, rebound.kwargs


def is_pinned_tool(func: object) -> bool:
    """Whether `func` is a wrapper made by `pinned_tool`, which pins its own calls."""
    return getattr(func, _PINNED_MARK, False) is True
