"""PinnedModel: one pin per model request, streamed or not, answered from the log under replay."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import is_not
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit
from weakref import WeakValueDictionary

import anyio
from pydantic import TypeAdapter
from pydantic_ai import RunContext
from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateImportUsage]
from pydantic_ai.durable_exec import record_durable_unit
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import KnownModelName, Model, ModelRequestContext, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings, merge_model_settings
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python
from typing_extensions import override

from anagrapheus.errors import InexactReplay, PartialPin, PinMiss, PinResultError, UsageError
from anagrapheus.provider.additions import known_dump
from anagrapheus.provider.compat import fill_response_cost, watch_provider_events
from anagrapheus.provider.failures import FAILURES, DrawSequence
from anagrapheus.provider.keying.material import new_fields_set
from anagrapheus.provider.occurrence import Asking, ask
from anagrapheus.provider.policy import MODEL_CALL, CallPin, CallPolicy, SemanticCallPolicy, call_pin
from anagrapheus.provider.run_clock import RunClocks
from anagrapheus.provider.stream import (
    ATTEMPTS_TIMED,
    PARTIAL_STATES,
    PinnedStreamedResponse,
    StreamAnswer,
    attempt_times_of,
    chunks_in,
    chunks_of,
    stream_answer,
)
from anagrapheus.provider.timing import time_from_pins, untime
from anagrapheus.provider.typed import (
    VALUE_TYPES,
    DeclaredTypes,
    needs_tags,
    needs_type,
    rebuilt,
    typed,
    typed_tree,
    untyped_tree,
)
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of
from anagrapheus.timeline.ordered import ordered, read_ordered
from anagrapheus.timeline.resolving.resolver import Resolver, as_resolver

if TYPE_CHECKING:
    from pydantic_ai.models.batch import Batch, BatchRequest, BatchResult, EncodedBatchRequest

__all__ = [
    "COMPACTION",
    "TOKEN_COUNT",
    "PinnedModel",
    "response_answer",
    "response_from_raw",
    "response_raw",
]

TOKEN_COUNT = "model_token_count"
"""The pin kind of a token count asked of the provider ahead of a request."""
COMPACTION = "model_compaction"
"""The pin kind of a provider-side compaction of the message history."""

T = TypeVar("T")

_responses: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_usages: TypeAdapter[RequestUsage] = TypeAdapter(RequestUsage)
_response_validator = _responses.validator


def explained(miss: PinMiss, messages: Sequence[ModelMessage], parameters: ModelRequestParameters) -> PinMiss:
    """`miss`, noting the fields of the request the key scheme does not know that were set (a newer release's)."""
    fields = new_fields_set(messages, at="messages") + new_fields_set(parameters, at="parameters")
    if not fields:
        return miss
    shown = ", ".join(fields[:_SHOWN_NEW_FIELDS]) + (
        f" and {len(fields) - _SHOWN_NEW_FIELDS} more" if len(fields) > _SHOWN_NEW_FIELDS else ""
    )
    note = (
        f"fields key scheme {KEY_SCHEME} does not know hold values in this request (set by a newer pydantic-ai"
        f" or by your code; each moves the key): {shown}"
    )
    return PinMiss(miss.divergence.noted(note))


_SHOWN_NEW_FIELDS = 8

_STREAMS_KEPT = 256
"""How many runs' answered streams a `PinnedModel` keeps for a `Pinning` to hear of (`answered_stream`)."""


def endpoint_url(url: str) -> str | None:
    """Return `url` without userinfo, query or fragment: where a provider lives, never how it was logged into.

    A URL that does not parse is dropped (None) rather than kept with whatever it may hold.
    """
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if host is None:
        return None if "@" in parts.netloc else urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _strip_urls(raw: dict[str, Any]) -> None:
    # A base URL can carry a password (userinfo) or a key (`?api-key=`); pydantic-ai copies it into every
    # response. Stripping it here, before the pin is written, keeps it out of the scratch table, the log and
    # every recording. The cost: a model whose own base URL has a query no longer treats a pinned response
    # as from its endpoint, so it resends history instead of naming server-side state by id.
    if isinstance(raw.get("provider_url"), str):
        raw["provider_url"] = endpoint_url(raw["provider_url"])
    details = raw.get("provider_details")
    if isinstance(details, dict):
        for name, value in cast(dict[str, Any], details).items():
            if name.endswith("_url") and isinstance(value, str):
                details[name] = endpoint_url(value)


def response_raw(response: ModelResponse) -> JSONValue:
    """Return `response` as a JSON object with the cost estimate the run was given; its pin keeps `response_answer`.

    Key material built on a response (a fallback's attempt times) uses this form, as it did before answers
    were pinned as ordered text, so those keys stay as they were.
    """
    # The agent estimates a response's cost from a price table when the provider did not report one,
    # and never overwrites a cost already set. Estimating it here, with the agent's own function, pins
    # the figure the recorded run saw: a replay reports the same cost whatever the price table says
    # by then, and skips the table lookup.
    fill_response_cost(response)
    raw: dict[str, Any] = known_dump(_responses, response)
    _strip_urls(raw)
    return raw


def response_answer(response: ModelResponse) -> JSONValue:
    """Return `response` as its pin keeps it: `{"ordered_json": text}`, its JSON in the provider's key order.

    Provider details JSON would bring back as something else (a `datetime` stamp, a `Decimal`) are kept with
    their types too, beside the response (`DETAIL_TYPES`), so the run receives them as the provider gave them.
    """
    raw = response_raw(response)
    kept = _detail_types(response)
    if kept and isinstance(raw, dict):
        raw[DETAIL_TYPES] = kept
    return ordered(raw)


DETAIL_TYPES = "$anagrapheus.detail_types"
"""Where a response's pin keeps the types of its provider details: `{"response" | part index: {name: typed}}`; a
list or dict holding such values is kept whole as `{"$t": "tree", "v": typed_tree(...)}`."""


# Provider details have no signature: they keep only the fixed value types; any other class is kept as its JSON.
_DETAILS = DeclaredTypes(source="the fixed value types of provider details")


def _value_types_only(value: object) -> object:
    """`value` with every leaf whose class is not one of `VALUE_TYPES` written as its JSON, as the pin keeps it."""
    if type(value) in (list, tuple):
        items = [_value_types_only(item) for item in cast("list[object]", value)]
        return tuple(items) if type(value) is tuple else items
    if type(value) is dict:
        return {name: _value_types_only(item) for name, item in cast("dict[object, object]", value).items()}
    if needs_type(value) and type(value) not in VALUE_TYPES:
        # (The response's dump wrote this value's JSON already: it has one.)
        return to_jsonable_python(value)
    return value


def _detail_types(response: ModelResponse) -> dict[str, JSONValue]:
    """The provider details of `response` and of its parts that JSON would not bring back as themselves, typed.

    Only the fixed value types (`VALUE_TYPES`) are kept typed: a replay builds no class a recording names.
    """
    kept: dict[str, JSONValue] = {}
    holders: list[tuple[str, object]] = [("response", response.provider_details)]
    holders += [(str(at), getattr(part, "provider_details", None)) for at, part in enumerate(response.parts)]
    for where, details in holders:
        if not isinstance(details, dict):
            continue
        values = cast(dict[str, object], details)
        typed_here: dict[str, JSONValue] = {}
        for name, held in values.items():
            what = f"the provider details of a response held {name!r}:"
            value = _value_types_only(held)
            if needs_type(value):
                typed_here[name] = typed(value, what=what, declared=_DETAILS)
            elif needs_tags(value):
                # A list or dict holding such values (a usage block stamped with a `datetime`): kept as a tree.
                tree = typed_tree(value, what=f"{what} a list or dict holding", declared=_DETAILS)
                typed_here[name] = {"$t": "tree", "v": tree}
        if typed_here:
            kept[where] = cast(JSONValue, typed_here)
    return kept


def response_from_raw(raw: JSONValue, *, key: str | None = None) -> ModelResponse:
    """Rebuild a fresh `ModelResponse` from a pin's raw JSON; the same code on first draw, reuse and replay.

    A provider detail is rebuilt only as one of `VALUE_TYPES`; any other tag is `UndeclaredType` naming `key`.
    """
    data = read_ordered(raw)
    kept = data.get(DETAIL_TYPES) if isinstance(data, dict) else None
    if kept is not None and isinstance(data, dict):
        data = {name: value for name, value in data.items() if name != DETAIL_TYPES}
    # The adapter's own validator, as `TypeAdapter.validate_python` calls it with no option given: one layer fewer.
    response = _response_validator.validate_python(data)
    _unset_defaults(response.usage)
    if isinstance(kept, dict):
        _retyped(response, cast(dict[str, JSONValue], kept), _DETAILS if key is None else _DETAILS.for_pin(key))
    # The run that receives the response stamps its own ids; an old run's stamps never travel with a pin.
    response.run_id = None
    response.conversation_id = None
    return response


def _class_defaults(cls: type[object]) -> dict[str, object]:
    """The fields of dataclass `cls` whose default is the class's own attribute, each to that very object."""
    return {
        each.name: each.default
        for each in dataclasses.fields(cast(Any, cls))
        if each.default is not dataclasses.MISSING and getattr(cls, each.name, None) is each.default
    }


_USAGE_DEFAULTS = _class_defaults(RequestUsage)


def _unset_defaults(usage: RequestUsage) -> None:
    """Drop from a validated usage each count that is its class's very default object, as pydantic-ai's own are.

    Validation sets every field on the instance; pydantic-ai sets only what the provider reported, and adds a
    response's usage to the run's over the names set on either (`RunUsage.incr`), a dozen getattr/isinstance/setattr
    a request for counts that are all zero. A name dropped reads the class's attribute: the very object it held (an
    `is` test, so `0.0` for an `int` default of `0` stays), so every read, `==`, `repr` and dump is as before.
    """
    if type(usage) is not RequestUsage:
        return  # (a subclass may read its own fields otherwise)
    held = usage.__dict__
    # (At C speed: each name's default, or a marker no value is, against its value by identity.)
    defaults = map(_USAGE_DEFAULTS.get, held, repeat(_MISSING))
    usage.__dict__ = dict(compress(held.items(), map(is_not, defaults, held.values())))


_MISSING = object()


def _retyped(response: ModelResponse, kept: dict[str, JSONValue], declared: DeclaredTypes) -> None:
    """Give the provider details of `response` and its parts back the types `_detail_types` kept."""
    for where, typed_here in kept.items():
        holder: object = response if where == "response" else _part_at(response, where)
        details = getattr(holder, "provider_details", None)
        if not (isinstance(details, dict) and isinstance(typed_here, dict)):
            raise PinResultError(f"a response pin keeps detail types for {where!r}, which has no provider details")
        for name, node in typed_here.items():
            if not isinstance(node, dict):
                raise PinResultError(f"a response pin keeps {node!r:.200} as the type of detail {name!r}")
            value = untyped_tree(node.get("v"), declared) if node.get("$t") == "tree" else rebuilt(node, declared)
            cast(dict[str, object], details)[name] = value


def _part_at(response: ModelResponse, where: str) -> object:
    """The part of `response` at index `where`, or None."""
    return response.parts[int(where)] if where.isdigit() and int(where) < len(response.parts) else None


def _usage_from_raw(raw: JSONValue) -> RequestUsage:
    return _usages.validate_python(raw)


@asynccontextmanager
async def _exit_shielded(context: AbstractAsyncContextManager[T]) -> AsyncGenerator[T]:
    """Enter `context`, and exit it shielded from cancellation.

    A run whose consumer stops reading is cancelled; the stream it stopped is pinned as far as it got
    on the way out, and that write must not be cancelled with the run, or the pin is lost.
    """
    value = await context.__aenter__()
    try:
        yield value
    except BaseException as e:
        suppressed = False
        with anyio.CancelScope(shield=True):
            suppressed = await context.__aexit__(type(e), e, e.__traceback__)
        if not suppressed:
            raise
    else:
        with anyio.CancelScope(shield=True):
            await context.__aexit__(None, None, None)


class _Watched:
    """A live stream as its pin sees it: the provider's events, and the failed attempts its model reported."""

    def __init__(self, stream: StreamedResponse) -> None:
        self.provider = watch_provider_events(stream)
        # Attempts a `FallbackModel` around this model adds later are its own, not this model's answer.
        self.attempts = stream.failed_attempts

    def answer(self, stream: StreamedResponse) -> JSONValue:
        """The stream's pin: its response so far (as `get()` reports it, also after an early stop or error), chunked."""
        response = stream.get()
        attempts = response.failed_attempts or []
        # A fallback prepends the attempts that failed before this stream: not this model's answer, but their times
        # (the wall clock's, around this model) are what the run saw, and a replay reports them so.
        outer = attempts[: len(attempts) - len(self.attempts or [])]
        if response.failed_attempts != self.attempts:
            response = replace(response, failed_attempts=self.attempts)
        chunks = None if self.provider is None else chunks_of(response, self.provider.events, ended=self.provider.ended)
        return stream_answer(response_answer(response), chunks, outer)


def stream_from_raw(raw: JSONValue, *, key: str | None = None) -> StreamAnswer:
    """Rebuild a streamed pin: the response, as a plain request reads it, and the boundaries of its chunks."""
    times = raw.get(ATTEMPTS_TIMED) if isinstance(raw, dict) else None
    return StreamAnswer(
        response_from_raw(raw, key=key),
        chunks_in(raw),
        None if times is None else attempt_times_of(times, kind=MODEL_CALL),
    )


@dataclass(slots=True)
class _Asked:
    """One model request as it is asked: the request, what its pin is keyed on, and its asking in the run."""

    messages: list[ModelMessage]
    settings: ModelSettings | None
    parameters: ModelRequestParameters
    call: CallPin
    """The key and fingerprint of what was asked (the call policy's material)."""
    asking: Asking
    """Its asking in the run: the run's place, the occurrence, and the key it is resolved under."""
    drawn: bool = False
    """Whether it was drawn from the wrapped model, rather than answered from a pin."""


@dataclass(init=False)
class PinnedModel(WrapperModel):
    """Wraps any pydantic-ai model so that each request is pinned through a resolver.

    Live (`PinLedger`) the first request for a key reaches the wrapped model and its response is
    pinned; under replay (`ReplayPins`) the response comes from the log and the wrapped model is
    never reached. Streamed and plain requests of the same call share one key. Batch calls are
    refused: their results arrive outside any request a pin can see. A request asked again in one
    agent run after its answer arrived (a poll, a sample) is a request of its own (the repeat rule,
    `anagrapheus.provider.occurrence`), unless `dedupe_repeats` answers it from the first.
    """

    resolver: Resolver
    """Answers each keyed request: draws it live, or answers it from pins."""
    policy: CallPolicy
    """Decides what goes into a request's key material."""
    dedupe_repeats: bool
    """Answer a request asked again in one run from the first asking's pin, as before the repeat rule."""
    pin_timing: bool
    """Whether a response's wall-clock timing (pydantic-ai 2.78's `request_timestamp`, `duration`) is pinned with it.
    False (what `Pinning(clock=...)` sets) leaves it out of a plain request's pin, so recording again writes the same
    bytes, and derives it from the pinned times instead, live and on replay (`anagrapheus.provider.timing`); a
    stream's is pinned either way."""

    def __init__(
        self,
        wrapped: Model | KnownModelName | str,
        resolver: Resolver,
        *,
        policy: CallPolicy | None = None,
        dedupe_repeats: bool = False,
        pin_timing: bool = True,
    ) -> None:
        super().__init__(wrapped)
        self.resolver = as_resolver(resolver)
        self.dedupe_repeats = dedupe_repeats
        self.pin_timing = pin_timing
        self.policy = policy if policy is not None else SemanticCallPolicy()
        # Responses answered from a pin rather than drawn: their server-side jobs are not this run's to poll or cancel.
        self._answered: WeakValueDictionary[int, ModelResponse] = WeakValueDictionary()
        # A request retried after a failed draw is drawn anew, under a key of its own.
        self._draws = DrawSequence()
        # Streams answered from a pin, by run, until the run's `chat` span hears of them (`answered_stream`).
        self._streams_answered: dict[str | None, int] = {}

    def pin_for(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> CallPin:
        """Return the key and fingerprint of a request, exactly as `request` would pin it."""
        # An agent run passes settings that already include the model's own; a direct request does not.
        # Merging again is idempotent, so both reach the key the same way.
        settings = merge_model_settings(self.wrapped.settings, model_settings)
        return call_pin(self.policy, messages, settings, model_request_parameters, model_id=self.wrapped.model_id)

    def _refuse_inexact_fallback(self) -> None:
        """Refuse to replay a failure inside a `FallbackModel` whose attempts no `Pinning` times (see the docs).

        The fallback times each failed attempt from the wall clock around this model, where no pin reaches:
        answered from a pin, a failure takes another duration and timestamp than it did, and the response
        that answers would carry them. `Pinning` pins those times; one `PinnedModel` around the whole
        `FallbackModel` pins the response with its attempts. Without either, the run stops here, loudly.
        """
        if self.resolver.draws_live:
            return
        run = get_current_run_context()
        fallback = getattr(run, "model", None)
        if not isinstance(fallback, FallbackModel) or not any(member is self for member in fallback.models):
            return
        # A `Pinning` over this resolver numbers the run in its clocks; a replay that keeps none cannot tell: refused.
        clocks = RunClocks.of(self.resolver)
        if run is not None and clocks is not None and run.run_id in clocks.by_id:
            return
        raise InexactReplay(
            "a FallbackModel over PinnedModel members, replayed without the Pinning capability, whose member failed",
            instead="add Pinning(resolver) to the agent, or wrap the whole FallbackModel in one PinnedModel"
            " (PinnedModel(FallbackModel(a, b), resolver)), and record again",
        )

    def _mark_answered(self, response: ModelResponse) -> None:
        self._answered[id(response)] = response

    def _was_answered(self, response: ModelResponse) -> bool:
        return self._answered.get(id(response)) is response

    def answered_stream(self, run_id: str | None) -> bool:
        """Whether a stream of run `run_id` was answered from a pin since last asked (each is told once).

        pydantic-ai opens a streamed request before its `chat` span starts, so the answer is credited to the run
        there; `Pinning` asks this inside the span, to credit the span too (a replayed stream's is not exported).
        """
        count = self._streams_answered.pop(run_id, 0)
        if count > 1:
            self._streams_answered[run_id] = count - 1
        return count > 0

    def _asked(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> _Asked:
        """What one request asks: its call's key and fingerprint, then its asking in the run (place, occurrence)."""
        call = self.pin_for(messages, model_settings, model_request_parameters)
        per_run = not self.dedupe_repeats
        asking = ask(call.key, kind=MODEL_CALL, resolver=self.resolver, ctx=run_context, per_run=per_run)
        return _Asked(messages, model_settings, model_request_parameters, call, asking)

    @override
    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Answer the request from its pin, or draw it from the wrapped model and pin the response."""
        asked = self._asked(messages, model_settings, model_request_parameters)
        try:
            response = await self._draws.resolve(
                self.resolver,
                asked.asking.key,
                kind=MODEL_CALL,
                effect=functools.partial(self._draw, asked),
                interpret=functools.partial(response_from_raw, key=asked.asking.key),
                fingerprint=asked.call.fingerprint,
            )
        except PinMiss as miss:
            self._refuse_inexact_fallback()
            raise explained(miss, messages, model_request_parameters) from None
        except BaseException as e:
            asked.asking.failed()
            if not asked.drawn and isinstance(e, Exception):
                self._refuse_inexact_fallback()
            raise
        return self._received(asked, response)

    async def _draw(self, asked: _Asked) -> JSONValue:
        """Draw a request from the wrapped model: the effect its pin is resolved with."""
        asked.drawn = True
        # Pinned as the wrapped model returned it: the agent stamps run ids only on the copy it receives.
        return self._answer(await self.wrapped.request(asked.messages, asked.settings, asked.parameters))

    def _received(self, asked: _Asked, response: ModelResponse) -> ModelResponse:
        """The response the run receives, once its pin answered: counted in, timed from the pins, checked whole."""
        asked.asking.arrived()
        time_from_pins(response, asked.messages, always=not self.pin_timing)
        if not asked.drawn:
            if response.state in PARTIAL_STATES:
                # Pinned by a stream that stopped before completing: returning it would pass a truncated answer off
                # as the whole one.
                raise PartialPin(asked.call.key, state=response.state)
            self._mark_answered(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """Stream the live response through as it arrives and pin what it accumulated, or replay the pinned one."""
        # Streaming is how a response is received, not what is asked: the key is the plain request's.
        asked = self._asked(messages, model_settings, model_request_parameters, run_context)
        call, asking = asked.call, asked.asking

        watched: _Watched | None = None

        @asynccontextmanager
        async def open_stream() -> AsyncGenerator[StreamedResponse]:
            nonlocal watched
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as live:
                watched = _Watched(live)
                yield live

        def captured(stream: StreamedResponse) -> JSONValue:
            if watched is None:  # pragma: no cover - a stream is captured only once it opened
                return response_answer(stream.get())
            return watched.answer(stream)

        # Until a live stream is drawn, a failure is a pinned one (or the resolver's own).
        live = False
        try:
            async with _exit_shielded(
                self.resolver.resolve_stream(
                    self._draws.key(asking.key, kind=MODEL_CALL, resolver=self.resolver),
                    kind=MODEL_CALL,
                    effect=open_stream,
                    # A stream is pinned as timed: its response is built anew from the live stream (with the
                    # timing pydantic-ai measured) whenever the run reads it, past the reach of any pin.
                    capture=captured,
                    interpret=functools.partial(stream_from_raw, key=asking.key),
                    fingerprint=call.fingerprint,
                    failure=FAILURES,
                )
            ) as draw:
                # A durable unit to pydantic-ai's telemetry: drawn live, or answered from a pin (see DrawSequence).
                record_durable_unit(executed=draw.live is not None)
                live = draw.live is not None
                if draw.live is not None:
                    yield draw.live
                else:
                    answer = draw.pinned
                    if answer is None:  # pragma: no cover - a resolver yields one or the other
                        raise UsageError("the resolver yielded neither a live stream nor a pinned response")
                    pinned = answer.response
                    self._mark_answered(pinned)
                    run_id = None if run_context is None else run_context.run_id
                    self._streams_answered[run_id] = self._streams_answered.get(run_id, 0) + 1
                    if len(self._streams_answered) > _STREAMS_KEPT:
                        # Told to no `Pinning` (a bare `PinnedModel`): the oldest runs' counts go.
                        del self._streams_answered[next(iter(self._streams_answered))]
                    time_from_pins(pinned, messages)
                    replayed = PinnedStreamedResponse(
                        pinned,
                        key=asking.key,
                        model_request_parameters=model_request_parameters,
                        failure=draw.failure,
                        chunks=answer.chunks,
                        attempt_times=answer.attempt_times,
                    )
                    try:
                        yield replayed
                    finally:
                        # A read waiting past where the recorded stream stopped need wait no longer: it is over.
                        await replayed.close_stream()
        except BaseException as e:
            asking.failed()
            if not isinstance(e, Exception):
                raise
            self._draws.note(asking.key, e, resolver=self.resolver)
            if not live:
                self._refuse_inexact_fallback()
            if isinstance(e, PinMiss):
                raise explained(e, messages, model_request_parameters) from None
            raise
        asking.arrived()

    @override
    async def count_tokens(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> RequestUsage:
        """Count tokens through a pin of its own: asking the provider is a call like any other."""
        call = self.pin_for(messages, model_settings, model_request_parameters)

        async def draw() -> JSONValue:
            usage = await self.wrapped.count_tokens(messages, model_settings, model_request_parameters)
            return _usages.dump_python(usage, mode="json")

        return await self._draws.resolve(
            self.resolver,
            pin_key(TOKEN_COUNT, {"call": call.key}),
            kind=TOKEN_COUNT,
            effect=draw,
            interpret=_usage_from_raw,
            fingerprint=call.fingerprint,
        )

    @override
    async def compact_messages(
        self,
        request_context: ModelRequestContext,
        *,
        instructions: str | None = None,
    ) -> ModelResponse:
        """Compact the history through a pin of its own, keyed on the history and the compaction instructions."""
        call = self.pin_for(
            request_context.messages, request_context.model_settings, request_context.model_request_parameters
        )

        async def draw() -> JSONValue:
            return self._answer(await self.wrapped.compact_messages(request_context, instructions=instructions))

        compaction = pin_key(COMPACTION, {"call": call.key, "instructions": instructions})
        compacted = await self._draws.resolve(
            self.resolver,
            compaction,
            kind=COMPACTION,
            effect=draw,
            interpret=functools.partial(response_from_raw, key=compaction),
            # Named apart from the request's own `instructions` fields, which the agent's instructions fill.
            fingerprint={**call.fingerprint, **fingerprint_of({"compaction_instructions": instructions})},
        )
        time_from_pins(compacted, request_context.messages, always=not self.pin_timing)
        return compacted

    def _answer(self, response: ModelResponse) -> JSONValue:
        """The pin of a drawn response: without its wall-clock timing unless `pin_timing`."""
        if not self.pin_timing:
            untime(response)
        return response_answer(response)

    # A suspended response answered from a pin names a server-side job of the recorded run, not of this one.

    @override
    def continuation_delay(self, response: ModelResponse) -> float | None:
        """Continue a pinned suspended response at once (its next segment is pinned too); a live one as drawn."""
        return None if self._was_answered(response) else self.wrapped.continuation_delay(response)

    @override
    async def cancel_suspended_response(self, response: ModelResponse) -> None:
        """Cancel a live suspended job; a job named by a pinned response is the recorded run's and is left alone."""
        if not self._was_answered(response):
            await self.wrapped.cancel_suspended_response(response)

    @override
    def _release_suspended_response(self, response: ModelResponse) -> None:
        if not self._was_answered(response):
            self.wrapped._release_suspended_response(response)  # pyright: ignore[reportPrivateUsage]

    # Batches are refused, live and under replay: a batch's results arrive outside any request a pin can see.

    @property
    @override
    def batch_max_requests(self) -> int | None:
        """None: a pinned model has no batch API, so pydantic-ai refuses to batch it before anything is sent."""
        return None

    @property
    @override
    def batch_max_bytes(self) -> int | None:
        """None, as for `batch_max_requests`."""
        return None

    def _refuse_batch(self, method: str) -> NoReturn:
        raise UsageError(
            f"PinnedModel cannot pin {method}: batch results arrive outside any request a pin can see."
            " Send the requests one by one through the pinned model (each is pinned), or batch the unwrapped model"
        )

    @override
    async def batch_encode(self, request: BatchRequest) -> EncodedBatchRequest:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_encode")

    @override
    async def batch_create(self, requests: Sequence[EncodedBatchRequest]) -> Batch:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_create")

    @override
    async def batch_status(self, batch: Batch) -> Batch:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_status")

    @override
    async def batch_results(self, batch: Batch) -> list[BatchResult]:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_results")

    @override
    async def batch_cancel(self, batch: Batch) -> Batch:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_cancel")

    @override
    def batch_decode(self, result: BatchResult, request: BatchRequest) -> ModelResponse:
        """Refused: batch calls cannot be pinned."""
        self._refuse_batch("batch_decode")
