"""pinned_tool: a tool that reads the world, drawn once and answered from its pin thereafter."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ParamSpec, TypeVar, cast

import anyio.to_thread
from pydantic import TypeAdapter
from pydantic_ai import RunContext, messages
from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateImportUsage]
from pydantic_ai.messages import (
    MULTI_MODAL_CONTENT_TYPES,
    BaseToolCallPart,
    CachePoint,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    TextContent,
    ToolReturn,
)
from pydantic_ai.usage import RunUsage
from pydantic_core import PydanticSerializationError, to_jsonable_python
from typing_extensions import override

from anagrapheus.errors import CanonicalError, HiddenCallerField, PinResultError, UnkeyedCaller, UsageError
from anagrapheus.provider.callers import CALLER, CallerSalt, caller_digest, is_salted, unit_salt
from anagrapheus.provider.cancelled_askings import cancelled_live, counted_asking, delivered_as_live
from anagrapheus.provider.delegation import failed_again, failed_having_delegated, ran_again
from anagrapheus.provider.failures import DrawSequence
from anagrapheus.provider.keying.caller import HiddenField, identity_material
from anagrapheus.provider.keying.keys import key_of, walked
from anagrapheus.provider.keying.material import MaterialWalk
from anagrapheus.provider.occurrence import ask, twin_key
from anagrapheus.provider.outputs import Delegated
from anagrapheus.provider.run_clock import RunClocks
from anagrapheus.provider.typed import DeclaredTypes, needs_tags, rebuilt, typed
from anagrapheus.timeline.canonical import JSONValue, encode_normalised, stored_value
from anagrapheus.timeline.ordered import ORDERED_FIELD, ordered_json, read_ordered
from anagrapheus.timeline.resolving.ledger import noting_keys
from anagrapheus.timeline.resolving.resolver import Resolver, as_resolver

__all__ = [
    "CALLER",
    "TOOL_CALL",
    "WHOLE_DEPS",
    "CallerRule",
    "ToolPin",
    "asking_as",
    "caller_of",
    "is_pinned_tool",
    "pinned_tool",
    "run_caller",
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


class _WholeDeps:
    """The default caller rule: the run's whole deps identify who calls."""

    @override
    def __repr__(self) -> str:
        return "WHOLE_DEPS"


WHOLE_DEPS = _WholeDeps()
"""The default of `Pinning(caller=...)`: the run's deps, whole, join every tool call's key."""

CallerRule = Callable[[Any], object] | _WholeDeps | None
"""What identifies a tool call's caller: `WHOLE_DEPS`, a function of the run's deps, or None for no caller."""


# The caller of a recorded run asked again without its deps (`anagrapheus rerun`, `fork_run`, `rekey`): its digest,
# as the run's inputs recorded it, so its tool calls are keyed as they were.
_ASKING_AS: ContextVar[str | None] = ContextVar("anagrapheus_asking_as", default=None)


def caller_of(deps: object, caller: CallerRule, *, salt: CallerSalt | None = None) -> str | None:
    """The digest naming the caller of a run with `deps` under the rule `caller`; None when no caller is keyed.

    `salt` is the caller salt of the run's unit (`unit_salt`); None gives the unsalted form of recordings made
    before salts. Raises `CanonicalError` when the identity has no JSON form to key.
    """
    identity = _identity(deps, caller)
    return None if identity is None else caller_digest(identity, salt)


def _identity(deps: object, caller: CallerRule) -> str | None:
    """The canonical JSON of the identity `caller` draws from `deps`; None when no caller is keyed."""
    if caller is None or deps is None:
        return None
    identity = deps if isinstance(caller, _WholeDeps) else caller(deps)
    # The whole identity, what its dump hides included: two callers it tells apart never share a key.
    return encode_normalised(identity_material(identity))


def _keyed_caller(deps: object, caller: CallerRule, resolver: Resolver) -> tuple[str | None, str | None]:
    """The caller a run with `deps` keys its tool calls as, and its identity's JSON (None when asked as recorded).

    `caller_of` under the unit's salt, else the recorded caller the run is asked as (`asking_as`).
    """
    identity = _identity(deps, caller)
    if identity is None:
        recorded = _ASKING_AS.get() if caller is not None else None
        if recorded is not None and is_salted(recorded):
            unit_salt(resolver)  # asked as the recorded run asked it: the unit keeps its salt, in its place
        return recorded, None
    return caller_digest(identity, unit_salt(resolver)), identity


def run_caller(deps: object, caller: CallerRule, resolver: Resolver) -> str | None:
    """The caller a run with `deps` is keyed as, for its inputs and its place: None where none is, or none can be.

    Read for every run, tool calls or none: a caller rule that fails on these deps (`lambda deps: deps.user_id`
    given deps without one) fails the run's first tool call, where the key needs it, and never a run that makes
    none, which runs unpinned all the same.
    """
    try:
        return _keyed_caller(deps, caller, resolver)[0]
    except Exception:  # the rule's own error is raised where a tool call is keyed
        return None


@contextmanager
def asking_as(caller: str | None) -> Generator[None]:
    """Key the tool calls of runs without deps started in the block as the recorded caller `caller`'s."""
    token = _ASKING_AS.set(caller)
    try:
        yield
    finally:
        _ASKING_AS.reset(token)


def caller_pin(
    tool: str,
    arguments: Mapping[str, object],
    ctx: RunContext[Any] | None,
    *,
    caller: CallerRule,
    resolver: Resolver,
    run: RunContext[Any] | None = None,
) -> ToolPin:
    """Key a call of `tool` with what identifies its caller (the caller rule), or refuse it loudly (`UnkeyedCaller`).

    The digest of the run's deps (or of what `caller` draws from them) joins the key, so one caller is never
    answered with another's data. A run without deps (None), or `caller=None`, keys no caller: the key it always
    had. A recording made before callers were keyed holds no pin under the caller's key: where it holds one under
    the key without it, that answers. The deps are read from `run` when given (the run a tool without a context
    argument is called in), else from the call's `ctx`.
    """
    deps: object = getattr(run if run is not None else ctx, "deps", None)
    try:
        named, identity = _keyed_caller(deps, caller, resolver)
    except HiddenField as e:
        deps_type = type(deps).__qualname__
        raise HiddenCallerField(tool, deps_type=deps_type, field=e.path, how=e.how, reason=e.reason) from e
    except CanonicalError as e:
        raise UnkeyedCaller(tool, deps_type=type(deps).__qualname__, reason=f"{e.path}: {e.reason}") from e
    if named is None:
        return tool_pin(tool, arguments, ctx=ctx)
    call = tool_pin(tool, arguments, ctx=ctx, caller=named)
    if not resolver.replays or resolver.asked(call.key):
        return call  # a live resolver, or a recording keyed with the caller
    # A recording made before callers were salted holds the unsalted digest; one made before they were keyed, none.
    if identity is not None:
        unsalted = tool_pin(tool, arguments, ctx=ctx, caller=caller_digest(identity, None))
        if unsalted.key != call.key and resolver.asked(unsalted.key):
            return unsalted
    before = tool_pin(tool, arguments, ctx=ctx)
    return before if resolver.asked(before.key) else call


def tool_pin(
    tool: str,
    arguments: Mapping[str, object],
    *,
    deps: object = _UNKEYED,
    ctx: RunContext[Any] | None = None,
    caller: str | None = None,
) -> ToolPin:
    """Key a call of `tool` with `arguments` (by parameter name); a `RunContext` among them is left out of the key.

    The run's deps are not in a tool's key. Pass `deps=` (JSON-shaped, or a pydantic model) to key the part
    of the deps that decides what the tool reads, such as a region or an account. What the call's
    `RunContext` (`ctx`, or one among the arguments) says about the call itself joins the key (the
    approval rule): an approved call (`tool_call_approved`) and the metadata its approval carried
    (`tool_call_metadata`), so an approved call is never answered by the pin of the unapproved one.
    A call that is neither approved nor carries metadata keeps the key it always had. `caller` is the digest
    naming who calls (`caller_of`), which `Pinning` keys by default.
    """
    material: dict[str, JSONValue] = {"tool": walked(tool, at="$.tool"), "args": _arguments(tool, arguments)}
    if caller is not None:
        material["caller"] = caller
    if deps is not _UNKEYED:
        try:
            material["deps"] = walked(deps, at="$.deps")
        except CanonicalError as e:
            raise CanonicalError(f"the deps keyed for tool {tool!r} cannot be keyed: {e.reason}", path=e.path) from e
    context = ctx if ctx is not None else _context_among(arguments)
    if context is not None:
        material.update(_call_context(tool, context))
    # Walked once: the key and the fingerprint are both written from this material.
    return ToolPin(*key_of(TOOL_CALL, material))


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
            material["approval_metadata"] = walked(metadata, at="$.approval_metadata")
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


def tool_result_raw(
    tool: str,
    result: object,
    *,
    enqueued: Sequence[tuple[Sequence[object], str]] = (),
    usage: RunUsage | None = None,
    runs: int = 0,
    within: Sequence[str] = (),
    declared: DeclaredTypes | None = None,
) -> JSONValue:
    """Return a tool's result as the raw JSON its pin keeps, or raise `PinResultError` saying why it cannot be.

    The pin is `{"$anagrapheus.tool_result": 2, "ordered_json": text}`: the result and what the call did
    to its run, written as JSON text in the result's own key order, floats and strings as they were, so
    the model is sent the very tool return it would be sent unpinned. A result holding what pydantic-ai
    sends the model as more than JSON (a `ToolReturn`, an image or other `BinaryContent`, a URL to a file),
    or a tuple, is kept type-tagged, so `tool_result_from_raw` rebuilds the very objects. A typed value's class
    must be one `declared` holds (the tool's return annotation's; only `VALUE_TYPES` when None).
    """
    declared = DeclaredTypes(source=f"the signature of tool {tool!r}") if declared is None else declared
    envelope: dict[str, JSONValue]
    if enqueued or usage is not None or runs or within or needs_tags(result):
        envelope = {"value": _tagged(tool, result, declared)}
    else:
        try:
            # Checked as the log would store it (which refuses what JSON cannot hold), kept as it is.
            stored_value(result)
        except CanonicalError as e:
            raise PinResultError(
                f"tool {tool!r} returned {type(result).__qualname__}, which is not JSON-shaped ({e}); a pinned tool"
                " must return JSON types (dict, list, str, int, float, bool, None), e.g. model.model_dump(mode='json')"
            ) from e
        envelope = {"value": {"$t": "json", "v": cast(JSONValue, result)}}
    # What the call did to its run besides returning: kept with the result, only when it did anything.
    if enqueued:
        envelope["enqueued"] = enqueued_raw(tool, enqueued, declared)
    if usage is not None:
        envelope["usage"] = _usages.dump_python(usage, mode="json")
    if runs:
        envelope["runs"] = runs
    if within:
        envelope["within"] = list(within)
    return {_TAGGED: _ORDERED_VERSION, ORDERED_FIELD: ordered_json(envelope)}


def tool_result_from_raw(raw: JSONValue, declared: DeclaredTypes | None = None) -> Any:
    """Return a tool pin's raw JSON as the run receives it, on every path, so a replay sees what the run saw.

    JSON comes back as JSON; a type-tagged result (see `tool_result_raw`) as the objects the tool returned, each
    only as a class `declared` holds (only `VALUE_TYPES` when None): any other tag is `UndeclaredType`.
    """
    return tool_answer_from_raw(raw, declared).value


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A tool pin read back: the result, and what the call did to its run besides returning it."""

    value: Any
    """The result, as the run receives it."""
    enqueued: list[tuple[list[Any], str]] = dataclasses.field(default_factory=list[tuple[list[Any], str]])
    """Each `ctx.enqueue` call the tool made: its content and priority, in order."""
    usage: RunUsage | None = None
    """The usage the call added to its run (an agent it delegated to, run with `usage=ctx.usage`)."""
    runs: int = 0
    """How many agent runs started through the same resolver while the tool ran (the agents it delegated to)."""
    within: list[str] = dataclasses.field(default_factory=list[str])
    """The keys the call asked for while it ran (its delegated agent's requests, say), in order."""


_ENVELOPE = frozenset({"value", "enqueued", "usage", "runs", "within"})


def tool_answer_from_raw(raw: JSONValue, declared: DeclaredTypes | None = None) -> ToolAnswer:
    """A tool pin's result as the run receives it, with what the call did to its run besides."""
    declared = DeclaredTypes(source="the tool (no signature given)") if declared is None else declared
    if isinstance(raw, dict) and raw.get(_TAGGED) == _ORDERED_VERSION and raw.keys() == {_TAGGED, ORDERED_FIELD}:
        text = raw[ORDERED_FIELD]
        raw = read_ordered(raw)
        if not (isinstance(raw, dict) and "value" in raw and raw.keys() <= _ENVELOPE):
            raise PinResultError(f"a tool pin's ordered result is {text!r:.200}, not a result and what its call did")
    # A pin written before results were kept as ordered text: its JSON is canonical, a tagged result marked 1.
    elif not (
        isinstance(raw, dict) and raw.get(_TAGGED) == 1 and "value" in raw and raw.keys() - {_TAGGED} <= _ENVELOPE
    ):
        return ToolAnswer(raw)
    enqueued = enqueued_from_raw(raw["enqueued"], declared) if "enqueued" in raw else []
    try:
        usage = _usages.validate_python(raw["usage"]) if "usage" in raw else None
    except ValueError as e:
        raise PinResultError(f"a tool pin's usage is {raw['usage']!r}, not a run's usage ({e})") from e
    runs = raw.get("runs", 0)
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 0:
        raise PinResultError(f"a tool pin's count of runs is {runs!r}, not a count")
    within = raw.get("within", [])
    if not (isinstance(within, list) and all(isinstance(key, str) for key in within)):
        raise PinResultError(f"a tool pin's keys asked within are {within!r}, not a list of keys")
    return ToolAnswer(_untagged(raw["value"], declared), enqueued, usage, runs, cast("list[str]", within))


def enqueued_raw(tool: str, enqueued: Sequence[tuple[Sequence[object], str]], declared: DeclaredTypes) -> JSONValue:
    """What a tool enqueued into its run (`ctx.enqueue`), each call's content type-tagged with its priority."""
    return [
        {"content": [_tagged(tool, item, declared) for item in content], "priority": priority}
        for content, priority in enqueued
    ]


def enqueued_from_raw(raw: JSONValue, declared: DeclaredTypes) -> list[tuple[list[Any], str]]:
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
        calls.append(([_untagged(item, declared) for item in content], cast(str, call["priority"])))
    return calls


# A tool's result holding pydantic-ai message content is kept as {_TAGGED: 1, "value": <tagged tree>}, in which every
# node says what it is ({"$t": "json" | "list" | "dict" | "content" | "ToolReturn", ...}), so nothing is guessed back.
_TAGGED = "$anagrapheus.tool_result"
# Marks a result kept as ordered text (see `tool_result_raw`); 1 marked a tagged result kept as canonical JSON.
_ORDERED_VERSION = 2
_CONTENT_TYPES: tuple[type, ...] = (*MULTI_MODAL_CONTENT_TYPES, TextContent, CachePoint)
_TOOL_RETURN_FIELDS = frozenset(f.name for f in dataclasses.fields(ToolReturn) if f.init)
# A content node names its class; it is looked up here, never in a module.
_CONTENT_CLASSES: dict[str, type] = {kind.__name__: kind for kind in _CONTENT_TYPES}


_messages = ModelMessagesTypeAdapter
_usages: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_request_parts: TypeAdapter[ModelRequestPart] = TypeAdapter(ModelRequestPart)


def _is_request_part(value: object) -> bool:
    """Whether `value` is a part of a model request (what a tool may enqueue), as pydantic-ai defines them."""
    return type(value).__module__ == messages.__name__ and isinstance(getattr(value, "part_kind", None), str)


def _tagged(tool: str, value: object, declared: DeclaredTypes) -> JSONValue:
    """`value` as a tree of type-tagged JSON nodes."""
    if isinstance(value, ToolReturn):
        returned = cast("ToolReturn[object]", value)
        names = [f.name for f in dataclasses.fields(returned) if f.name != "kind"]
        return {"$t": "ToolReturn", "v": {name: _tagged(tool, getattr(returned, name), declared) for name in names}}
    if isinstance(value, _CONTENT_TYPES):
        dumped = TypeAdapter(type(value)).dump_python(value, mode="json")
        return {"$t": "content", "class": type(value).__name__, "v": dumped}
    if isinstance(value, (ModelRequest, ModelResponse)):
        return {"$t": "message", "v": _messages.dump_python([value], mode="json")[0]}
    if _is_request_part(value):
        return {"$t": "request_part", "v": _request_parts.dump_python(cast(Any, value), mode="json")}
    if isinstance(value, (list, tuple)):
        items = cast("list[object] | tuple[object, ...]", value)
        return {
            "$t": "tuple" if isinstance(value, tuple) else "list",
            "v": [_tagged(tool, item, declared) for item in items],
        }
    if isinstance(value, dict):
        entries = cast("dict[object, object]", value)
        if needs_tags(entries):
            tree = {str(name): _tagged(tool, item, declared) for name, item in entries.items()}
            return {"$t": "dict", "v": tree}
    return _json_leaf(tool, cast(object, value), declared)


def _json_leaf(tool: str, value: object, declared: DeclaredTypes) -> JSONValue:
    """A part of a tagged result that holds no message content, as its JSON, with its type where JSON loses it."""
    if needs_tags(value):
        return {"$t": "typed", **typed(value, what=f"tool {tool!r} returned", declared=declared)}
    try:
        jsonable: JSONValue = to_jsonable_python(value)
        # Refused as the log refuses it; kept in its own key order, its floats and strings as they were.
        stored_value(jsonable)
        return {"$t": "json", "v": jsonable}
    except (CanonicalError, PydanticSerializationError) as e:
        held = type(value).__qualname__
        raise PinResultError(f"tool {tool!r} returned {held} inside its result, which has no JSON form ({e})") from e


def _untagged(node: JSONValue, declared: DeclaredTypes) -> Any:
    """Rebuild what `_tagged` wrote, or raise `PinResultError` for a node it could not have written."""
    if not isinstance(node, dict):
        raise PinResultError(f"a tagged tool result holds {node!r}, not a tagged node")
    tag, value = node.get("$t"), node.get("v")
    if tag == "json":
        return value
    if tag == "typed":
        return rebuilt(node, declared)
    if tag == "list" and isinstance(value, list):
        return [_untagged(item, declared) for item in value]
    if tag == "tuple" and isinstance(value, list):
        return tuple(_untagged(item, declared) for item in value)
    if tag == "dict" and isinstance(value, dict):
        return {name: _untagged(item, declared) for name, item in value.items()}
    if tag == "ToolReturn" and isinstance(value, dict) and value.keys() <= _TOOL_RETURN_FIELDS:
        return ToolReturn(**{name: _untagged(item, declared) for name, item in value.items()})
    if tag == "message":
        return _messages.validate_python([value])[0]
    if tag == "request_part":
        return _request_parts.validate_python(value)
    if tag == "content":
        found = _CONTENT_CLASSES.get(str(node.get("class")))
        if found is not None:
            return TypeAdapter(found).validate_python(value)
    raise PinResultError(f"a tagged tool result holds a node anagrapheus cannot rebuild: {node!r}")


def pinned_tool(
    resolver: Resolver,
    func: Callable[P, R] | Callable[P, Awaitable[R]],
    *,
    name: str | None = None,
    dedupe_repeats: bool = False,
    caller: CallerRule = WHOLE_DEPS,
) -> Callable[P, Awaitable[Any]]:
    """Wrap a world-reading tool so its result is pinned under its name and arguments (without the `RunContext`).

    The wrapper is always a coroutine function with the tool's signature and docstring, so pydantic-ai
    builds the same schema. A synchronous body runs in a worker thread while the resolver is touched
    only on the calling thread. The result must be JSON-shaped, or hold pydantic-ai message content
    (`ToolReturn`, `BinaryContent`, ...); it is returned as the same JSON, or rebuilt as the same objects,
    on every path. `name` names both the pin and the tool pydantic-ai registers; it defaults to the
    function's name. A call made again with the same arguments in one agent run, after the first
    returned, runs again (the repeat rule); `dedupe_repeats=True` answers it from the first call's pin.
    Inside an agent run, what identifies the caller joins the key as under `Pinning` (`caller`: the run's
    deps whole by default, a function drawing an identity from them, or None).
    """
    tool = name if name is not None else getattr(func, "__name__", None)
    if not tool:
        raise UsageError("pinned_tool needs name=... for a callable without a __name__")
    resolver = as_resolver(resolver)
    signature = inspect.signature(func)
    is_async = inspect.iscoroutinefunction(func)
    # The classes a replay may rebuild the tool's typed results as: its signature's, never the recording's.
    declared = DeclaredTypes.returned_by(func, source=f"the signature of tool {tool!r}")
    # A call retried after it failed (a `ModelRetry`, say) is drawn anew; its failures are pinned in order.
    draws = DrawSequence()

    @functools.wraps(func)
    async def pinned(*args: P.args, **kwargs: P.kwargs) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        context = _context_among(bound.arguments)
        run = context if context is not None else get_current_run_context()
        call = caller_pin(tool, bound.arguments, None, caller=caller, resolver=resolver, run=run)

        async def draw() -> JSONValue:
            watch = CallWatch(context, resolver)
            call_args, call_kwargs = _swapped(signature, bound.arguments, watch, args, kwargs)
            with watch.running():
                if is_async:
                    result: object = await cast(Callable[..., Awaitable[R]], func)(*call_args, **call_kwargs)
                else:
                    result = await _ran_to_its_end(
                        functools.partial(cast(Callable[..., Any], func), *call_args, **call_kwargs)
                    )
            return watch.raw(tool, result, declared)

        answer = await answer_tool_call(
            draws, resolver, call, context, draw, per_run=not dedupe_repeats, declared=declared
        )
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # Cancelled while its body ran (`_ran_to_its_end`): pinned now, the cancellation is the caller's.
            raise asyncio.CancelledError
        return answer

    # One name for the pin and for the tool pydantic-ai registers (it names a tool after `__name__`).
    pinned.__name__ = tool
    # Lets the `Pinning` capability pass the call through rather than pin it twice under one key.
    setattr(pinned, _PINNED_MARK, True)
    return pinned


async def _ran_to_its_end(body: Callable[[], R]) -> R:
    """Run a sync tool's body in a worker thread; cancelled meanwhile, still return what it returned.

    A thread cannot be stopped: the body runs to its end whatever happens to the task awaiting it, so the
    world was reached and its answer is what a retry must be given (the retry rule). Returned, it is pinned;
    the task is still cancelling, and `pinned_tool` raises the cancellation once the pin is written.
    """
    job = asyncio.ensure_future(anyio.to_thread.run_sync(body))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        while not job.done():
            with suppress(asyncio.CancelledError):
                await asyncio.wait({job})
        if job.cancelled() or job.exception() is not None:
            raise
        return job.result()


class CallWatch:
    """Watches one drawn tool call for what it does to its run besides returning, to pin with its result.

    The tool is given a copy of its `RunContext` whose `enqueue` notes what it enqueues (and still
    delivers it), and whose `usage` is a copy of the run's: what the call adds to it (an agent it
    delegated to with `usage=ctx.usage`) is pinned, and `settle` adds it to the run's usage on every
    path. Runs started through the same resolver meanwhile (the delegated agents) are counted, so that
    when a pin answers and they do not run, the runs after them keep their positions (and their ids).
    """

    def __init__(self, ctx: RunContext[Any] | None, resolver: Resolver) -> None:
        self.enqueued: list[tuple[Sequence[object], str]] = []
        self._within: list[str] = []
        # The runs numbered through the resolver; a resolver that keeps no clocks numbers none (see run_clock.py).
        self._clocks = RunClocks.of(resolver)
        self._runs = 0 if self._clocks is None else self._clocks.runs
        self.ctx: RunContext[Any] | None = None
        self._usage: tuple[RunUsage, RunUsage] | None = None
        self._run_usage: RunUsage | None = None
        usage: object = getattr(ctx, "usage", None)
        if ctx is None or not isinstance(usage, RunUsage):
            # No run's context (or one made by hand, as a test calling a tool directly makes it): nothing to watch.
            return
        self._run_usage = usage
        self._usage = (_usage_copy(usage), _usage_copy(usage))
        if type(ctx) is RunContext:
            # As pydantic-ai copies a run's context for each capability hook: a plain `RunContext` is its fields.
            noting = copy.copy(ctx)
            noting.usage = self._usage[1]
        else:
            noting = dataclasses.replace(ctx, usage=self._usage[1])  # a subclass may rely on being rebuilt
        deliver = ctx.enqueue

        def enqueue(*content: Any, priority: Any = "asap") -> str | None:
            self.enqueued.append((content, priority))
            return deliver(*content, priority=priority)

        noting.enqueue = enqueue  # type: ignore[method-assign]
        self.ctx = noting

    @contextmanager
    def running(self) -> Generator[None]:
        """Around the tool's body: note the keys it asks for (an agent it delegates to, a pinned call it makes)."""
        with noting_keys() as noted:
            try:
                yield
            except BaseException as error:
                self._within = noted
                self._failed(error)
                raise
        self._within = noted

    def _failed(self, error: BaseException) -> None:
        """A body that raised still did what it did before: an agent it delegated to used what it used.

        Unpinned, that usage is the run's (the delegate counted it in `ctx.usage`): it is added to the run's
        now, and noted on the error, so the failure's pin keeps it and a replay adds it too.
        """
        usage = self._added()
        if usage is not None and self._run_usage is not None:
            self._run_usage.incr(usage)
        failed_having_delegated(error, Delegated(usage, self._ran(), self._within))

    def _added(self) -> RunUsage | None:
        """The usage the body added to its copy of the run's; None for none."""
        if self._usage is None:
            return None
        before, after = self._usage
        added = after - before
        return added if added != RunUsage() else None

    def _ran(self) -> int:
        """How many runs started through the resolver while the body ran."""
        return 0 if self._clocks is None else self._clocks.runs - self._runs

    def raw(self, tool: str, result: object, declared: DeclaredTypes) -> JSONValue:
        """The call's result as its pin keeps it, with what the call did to its run (typed as `declared` allows)."""
        return tool_result_raw(
            tool,
            result,
            enqueued=self.enqueued,
            usage=self._added(),
            runs=self._ran(),
            within=self._within,
            declared=declared,
        )


_IMMUTABLE_COUNTS: frozenset[type] = frozenset({int, float, bool, str, Decimal, type(None)})


def _usage_copy(usage: RunUsage) -> RunUsage:
    """A copy of a run's usage, equal to `copy.deepcopy`'s: its counts shared (none can change), its details copied.

    About 0.6 µs where a deep copy takes about 4.4 (two a drawn tool call). A usage holding anything else (a subclass,
    a count of another type, details that are not names to integers) is deep-copied, as before.
    """
    counts = vars(usage)
    details = usage.details
    if (
        type(usage) is not RunUsage
        or type(details) is not dict
        or not all(type(value) in _IMMUTABLE_COUNTS for name, value in counts.items() if name != "details")
        or not all(type(name) is str and type(value) is int for name, value in details.items())
    ):
        return copy.deepcopy(usage)
    copied = copy.copy(usage)
    copied.details = dict(details)
    return copied


async def answer_tool_call(
    draws: DrawSequence,
    resolver: Resolver,
    call: ToolPin,
    ctx: RunContext[Any] | None,
    draw: Callable[[], Awaitable[JSONValue]],
    *,
    per_run: bool,
    declared: DeclaredTypes,
) -> Any:
    """Answer a keyed tool call from its pin or by `draw`, then do to the run what the call did besides returning.

    Its typed values are rebuilt only as classes `declared` holds, on every path.
    """
    # Identical calls in one model response are keyed apart first, so each runs; then the repeat rule numbers each.
    key = twin_key(call.key, kind=TOOL_CALL, twin=twin_of(ctx), resolver=resolver) if per_run else call.key
    asking = ask(key, kind=TOOL_CALL, resolver=resolver, ctx=ctx, per_run=per_run)
    # Which asking of its key in the unit this is: one cancelled live is delivered as cancelled on replay.
    number = counted_asking(resolver, asking.key)
    drawn = answered = False

    async def effect() -> JSONValue:
        nonlocal drawn, answered
        drawn = True
        value = await draw()
        answered = True  # what it returned is pinned, even if the caller is cancelled while the pin is written
        return value

    drawn_key = draws.key(asking.key, kind=TOOL_CALL, resolver=resolver)
    try:
        # Cancelled live before its answer came, it waits to be cancelled so again, taking no pin.
        marked = await delivered_as_live(resolver, asking.key, number, answered=False)
        answer = await draws.resolve(
            resolver,
            asking.key,
            kind=TOOL_CALL,
            effect=effect,
            interpret=lambda raw: tool_answer_from_raw(raw, declared.for_pin(asking.key)),
            fingerprint=call.fingerprint,
        )
        answered = True
        if not drawn:
            # A replayed call whose body delegated to an agent runs again, its delegate answered from its pins: the
            # app sees the delegate's run as live. The call's pin has answered, so the run is given what it was given.
            await ran_again(resolver, drawn_key, answer.within, effect)
            # Cancelled live once its answer came (a call beside it raised), it waits to be cancelled so again.
            if marked:
                await delivered_as_live(resolver, asking.key, number, answered=True)
    except BaseException as error:
        if isinstance(error, asyncio.CancelledError):
            # Before its answer came (its body never ran, or its pin was being written), or after it (a replay).
            cancelled_live(resolver, asking.key, number, answered=answered)
        asking.failed()
        if not drawn:
            # A pinned failure: what the body did before it raised (an agent it delegated to) is done again.
            did = await failed_again(resolver, drawn_key, error, effect)
            settle(ctx, ToolAnswer(None, usage=did.usage, runs=did.runs, within=did.within), resolver, drawn=False)
        raise
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        cancelled_live(resolver, asking.key, number, answered=True)  # its sync body ran to its end, pinned
    asking.arrived()
    settle(ctx, answer, resolver, drawn=drawn)
    return answer.value


def twin_of(ctx: RunContext[Any] | None) -> int:
    """How many calls identical to `ctx`'s (same tool, same arguments) came before it in the same model response.

    Parallel tool calls of one response run each, unpinned; under `Pinning` each is an asking of its own.
    """
    call_id = getattr(ctx, "tool_call_id", None)
    if ctx is None or call_id is None:
        return 0
    for message in reversed(ctx.messages):
        if not isinstance(message, ModelResponse):
            continue
        calls = [part for part in message.parts if isinstance(part, BaseToolCallPart)]
        at = next((index for index, part in enumerate(calls) if part.tool_call_id == call_id), None)
        if at is None:
            return 0
        mine = calls[at]
        arguments = mine.args_as_dict()
        return sum(1 for part in calls[:at] if part.tool_name == mine.tool_name and part.args_as_dict() == arguments)
    return 0


def settle(ctx: RunContext[Any] | None, answer: ToolAnswer, resolver: Resolver, *, drawn: bool) -> None:
    """Do to the run what the call did besides returning: its usage on every path; the rest when a pin answered."""
    if ctx is not None and answer.usage is not None:
        ctx.usage.incr(answer.usage)
    if drawn:
        # The drawn call enqueued its messages and started its runs itself.
        return
    resolver.answered_within(answer.within)
    clocks = RunClocks.of(resolver)
    if answer.runs and clocks is not None:
        with clocks.lock:
            clocks.runs += answer.runs
    if ctx is not None:
        for content, priority in answer.enqueued:
            ctx.enqueue(*content, priority=cast(Any, priority))


def _swapped(
    signature: inspect.Signature,
    arguments: Mapping[str, object],
    watch: CallWatch,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments, with the `RunContext` among them (if any) swapped for the watched copy."""
    context = _context_among(arguments)
    if context is None or watch.ctx is None:
        return args, kwargs
    rebound = signature.bind_partial()
    rebound.arguments.update({name: watch.ctx if value is context else value for name, value in arguments.items()})
    return rebound.args, rebound.kwargs


def is_pinned_tool(func: object) -> bool:
    """Whether `func` is a wrapper made by `pinned_tool`, which pins its own calls."""
    return getattr(func, _PINNED_MARK, False) is True
