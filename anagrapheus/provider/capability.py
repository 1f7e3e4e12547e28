"""Pinning: the pydantic-ai capability that pins everything an agent run reads from outside, and its clock."""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import count
from typing import Any

from pydantic_ai import AgentRunResult, RunContext
from pydantic_ai.capabilities import AbstractCapability, WrapOutputProcessHandler, WrapRunHandler
from pydantic_ai.durable_exec import conversation_id_from_run_id, record_durable_unit, replay_scope
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.output import OutputContext
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_core import PydanticSerializationError, to_jsonable_python
from typing_extensions import override

from anagrapheus.errors import PinResultError
from anagrapheus.provider.compat import (
    allow_at_run_time,
    fallback_with_models,
    in_replay_scope,
    is_mcp_toolset,
    tool_function,
)
from anagrapheus.provider.delegation import failed_again, failed_having_delegated, ran_again
from anagrapheus.provider.discovery import PinnedDiscovery
from anagrapheus.provider.failures import DrawSequence
from anagrapheus.provider.in_workflow import refuse_workflow_code
from anagrapheus.provider.inputs import INPUTS_LIMIT, InputsRecorder, place_of
from anagrapheus.provider.keying.keys import walked
from anagrapheus.provider.model import PinnedModel, response_raw
from anagrapheus.provider.occurrence import ask
from anagrapheus.provider.outputs import (
    OUTPUT_CALL,
    Delegated,
    delegated_of,
    output_function_named,
    output_pin,
    output_result_from_raw,
    output_result_raw,
    output_returns,
)
from anagrapheus.provider.policy import CallPolicy
from anagrapheus.provider.run_clock import RunClocks
from anagrapheus.provider.stream import attempt_times_of, attempt_times_raw, timed_attempts
from anagrapheus.provider.sync_bodies import called_to_its_end, runs_in_a_thread
from anagrapheus.provider.timing import untimed
from anagrapheus.provider.tools import (
    WHOLE_DEPS,
    CallerRule,
    CallWatch,
    answer_tool_call,
    caller_pin,
    is_pinned_tool,
    tool_pin,
)
from anagrapheus.provider.typed import DeclaredTypes, needs_tags
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.events import new_uuid7
from anagrapheus.timeline.resolving.ledger import noting_keys
from anagrapheus.timeline.resolving.resolver import Resolver, as_resolver

__all__ = ["ATTEMPT_TIMES", "PinnedToolset", "Pinning"]

ATTEMPT_TIMES = "model_attempt_times"
"""The pin kind of the wall-clock times of a `FallbackModel`'s failed attempts before the answering one."""


@dataclass(init=False)
class Pinning(AbstractCapability[Any]):
    """Pins every model request, every tool call, and the run's ids and timestamps through one resolver.

    `Agent(model, capabilities=[Pinning(ledger)])` records a run; the same agent with
    `Pinning(ReplayPins(...))` replays it without reaching the model, any tool or any MCP server, and
    its `all_messages()` are the recorded run's, byte for byte. Each model is wrapped in a `PinnedModel`
    (its keys, its `policy`). Every toolset's calls are keyed on the tool's name and arguments and on what
    identifies the caller: the run's deps, whole, unless `caller` draws an identity from them (or is None),
    or `tool_deps` names the part of the deps one tool's answer depends on; deps that cannot be keyed refuse
    the call (`UnkeyedCaller`). Each run asks as a run of its own: it never takes another run's answer unless
    it resumes that run (the same `run_id`). An MCP server's tool list and instructions are pinned too. A model
    or tool that already pins its own calls is passed through. A request or tool call asked again in one
    run after its answer arrived reaches the world again, as it does unpinned (the repeat rule), unless
    `dedupe_repeats` says otherwise; an approved tool call is keyed apart from the unapproved one.
    Each run's inputs (prompt, history, settings, and the deps' snapshot `record_deps` gives) and its
    output are noted on the unit as a `RunInputs` event, unless `record_inputs=False`.
    """

    resolver: Resolver
    """Answers each keyed model request and tool call: draws it live, or answers it from pins."""
    policy: CallPolicy | None
    """Decides what goes into a model request's key; `SemanticCallPolicy` when None."""
    tool_deps: Mapping[str, Callable[[Any], object]]
    """Tool name to the part of the run's deps that decides what the tool reads; that part joins its key."""
    caller: CallerRule
    """What identifies the caller in every other tool call's key: the run's deps whole (`WHOLE_DEPS`, the default),
    a function drawing an identity from them (`lambda deps: deps.user_id`), or None to key no caller."""
    clock: Callable[[], datetime] | None
    """Where a live run's pinned timestamps come from; None keeps the ones pydantic-ai stamped."""
    new_id: Callable[[], str]
    """Where a live run's pinned `run_id` comes from: a fresh UUIDv7 unless a test seeds it."""
    dedupe_repeats: bool | Collection[str]
    """The repeat rule's opt-out: True answers every request and tool call asked again in one run from the first
    asking's pin, as before the rule; a collection of tool names does so for those tools only."""
    record_inputs: bool
    """Whether each run's inputs and output are recorded as a `RunInputs` event of its unit (replay ignores it)."""

    def __init__(
        self,
        resolver: Resolver,
        *,
        policy: CallPolicy | None = None,
        tool_deps: Mapping[str, Callable[[Any], object]] | None = None,
        caller: CallerRule = WHOLE_DEPS,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], str] = new_uuid7,
        dedupe_repeats: bool | Collection[str] = False,
        record_inputs: bool = True,
        record_deps: Callable[[Any], object] | None = None,
        inputs_limit: int = INPUTS_LIMIT,
    ) -> None:
        self.resolver = resolver = as_resolver(resolver)
        # A resolver that picks its unit per run (`UnitPerRun`, or one that says it is one) is served around each
        # run; asked once.
        self._per_run = resolver.serves_each_run
        self.record_inputs = record_inputs
        self._inputs = InputsRecorder(deps=record_deps, limit=inputs_limit, caller=caller)
        self.dedupe_repeats = dedupe_repeats if isinstance(dedupe_repeats, bool) else frozenset(dedupe_repeats)
        self.policy = policy
        self.tool_deps = dict(tool_deps or {})
        self.caller = caller
        self.clock = clock
        self.new_id = new_id
        # pydantic-ai asks for a wrapper on every attempt at a request. One wrapper per model keeps what it
        # knows across attempts (responses answered from a pin, failures drawn so far) for the capability's life.
        self._wrappers: dict[int, tuple[Model, Model]] = {}
        # An output function retried after it failed (a `ModelRetry`) is drawn anew, as a tool call is.
        self._outputs = DrawSequence()
        # The runs' ids and times through a resolver that keeps no clocks: drawn fresh, stamped with `clock`, unpinned.
        self._unpinned_clocks = RunClocks.unpinned()
        self._own_clocks: RunClocks | None = None

    @classmethod
    @override
    def get_serialization_name(cls) -> str | None:
        """None: a resolver is a live object, so the capability cannot be written into an agent spec."""
        return None

    @override
    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Keep model work answered from pins out of traces and metrics, as a durable engine keeps replayed work out.

        The pins' own spans are exported (outcome `answered`, as `PinnedModel` reports them): a trace of a
        replayed run shows what was answered, while pydantic-ai's model and tool spans stay out of it.
        """
        refuse_workflow_code("wrap_run")
        if self._per_run is not None:
            # The run's unit is picked now, from the run: its draws go there, and it closes as the run ends.
            return await self._per_run.serve(ctx, lambda: self._recorded(ctx, handler), started=self._start_served)
        return await self._recorded(ctx, handler)

    async def _recorded(self, ctx: RunContext[Any], handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Run `handler` as `_noted` does, and say how it ended to the runs' clocks (the retry rule)."""
        clocks = self._clocks(self._clocked(ctx))
        try:
            result = await self._noted(ctx, handler)
        except BaseException:
            # An exception or a cancellation: the run did not finish, and a retry asked the same resumes it.
            clocks.ended(ctx.run_id, failed=True)
            raise
        clocks.ended(ctx.run_id, failed=False)
        return result

    async def _noted(self, ctx: RunContext[Any], handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Run `handler` in its replay scope, noting the run's inputs (and its output or error) unless turned off."""
        if not self.record_inputs:
            return await self._scoped(handler)
        resolver = self._clocked(ctx)
        inputs, token = self._inputs.begin(ctx, resolver)
        try:
            result = await self._scoped(handler)
        except BaseException as e:
            # A cancellation too: how the run ended is noted on its unit, whatever ended it (issue #40).
            self._inputs.end(resolver, ctx.run_id, inputs, token, error=e)
            raise
        self._inputs.end(resolver, ctx.run_id, inputs, token, output=result.output)
        return result

    @staticmethod
    async def _scoped(handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Run the handler inside a replay scope, unless a durable engine's is open already."""
        if in_replay_scope():
            # A durable engine's scope is open already: its tally counts the pinned answers too.
            return await handler()
        with replay_scope():
            return await handler()

    @override
    def get_default_run_id(self) -> str | None:
        """The run's id, pinned at its position among the runs through the resolver: where it starts."""
        return self._draw_run_id(None)

    @override
    async def _get_default_run_id_for_inputs(self, get_inputs: Callable[[], Mapping[str, Any]]) -> str | None:
        """The run's id, pinned where its inputs place it among the runs: `compat.RUN_INPUTS_HOOK`, from 2.78 on."""
        if type(self).get_default_run_id is not Pinning.get_default_run_id:
            return self.get_default_run_id()  # a subclass's own id, as pydantic-ai's capabilities keep theirs
        if self._per_run is not None:
            return self._draw_run_id(None)  # no unit before the run starts: nothing to place it among
        inputs = get_inputs()
        return self._draw_run_id(
            place_of(inputs.get("prompt"), inputs.get("messages") or (), inputs.get("deps"), self.caller, self.resolver)
        )

    def _draw_run_id(self, place: str | None) -> str | None:
        """The run's id drawn through the resolver; `place` digests its inputs, when known before it starts."""
        # The first hook of a run: in Temporal workflow code it stops the run here, before any store is read.
        refuse_workflow_code("the run's id")
        if self._per_run is not None:
            # No run is known before it starts, so no unit: the id is the engine's (a DBOS run's is stable) or fresh.
            return None
        return self._clocks(self.resolver).draw_run_id(self.resolver, self.new_id, place=place)

    @override
    def get_default_conversation_id(self, run_id: str) -> str | None:
        """Derived from the run's id, as pydantic-ai's durable engines derive it, so it replays with the id."""
        return conversation_id_from_run_id(run_id)

    @override
    async def for_run(self, ctx: RunContext[Any]) -> Pinning:
        """Number the run among the runs through the resolver; the same capability serves it."""
        if self._per_run is None:
            # A run through UnitPerRun is numbered in its unit, once `wrap_run` picked it.
            self._start_clocks(self.resolver, ctx)
        return self

    def _start_clocks(self, resolver: Resolver, ctx: RunContext[Any]) -> None:
        """Number the run among the runs through `resolver`; pin where it was placed, if its id said nothing of it."""
        clocks = self._clocks(resolver)
        clocks.start(ctx.run_id)

        @functools.cache
        def inputs() -> str | None:
            return place_of(ctx.prompt, ctx.messages, ctx.deps, self.caller, resolver)

        clocks.note_place(resolver, ctx.run_id, inputs)
        clocks.take_up(resolver, ctx.run_id, inputs)

    def _start_served(self, resolver: Resolver, ctx: RunContext[Any]) -> None:
        """Number a run its unit was picked for, and pin its id (the engine's, or fresh) where a replay draws it.

        No unit is known before the run starts, so its id was not drawn through a resolver: it is pinned now, at the
        position the run's inputs place it, as a run drawn through its ledger would have pinned it. A replay of the
        unit then takes the recorded id, with nothing passed by hand.
        """
        clocks = self._clocks(resolver)
        run_id = ctx.run_id
        if run_id is not None:
            place = place_of(ctx.prompt, ctx.messages, ctx.deps, self.caller, resolver)
            drawn = clocks.draw_run_id(resolver, lambda: run_id, place=place)
            if drawn != run_id:
                # The unit holds an earlier run's id there (it resumes a run its engine gave another id): this run
                # takes that run's place, so what it asks again is answered from that run's pins.
                clocks.positions[run_id] = clocks.positions[drawn]
                clocks.ended(drawn, failed=False)
        clocks.start(run_id, named=False)

    def _clocks(self, resolver: Resolver) -> RunClocks:
        """The clocks of the runs through `resolver`: its own, or this capability's unpinned ones if it keeps none."""
        if resolver is self.resolver and self._own_clocks is not None:
            return self._own_clocks  # asked at every hook of a run; a resolver's clocks, once made, never change
        clocks = RunClocks.of(resolver)
        if clocks is None:
            return self._unpinned_clocks
        if resolver is self.resolver:
            self._own_clocks = clocks
        return clocks

    def _clocked(self, ctx: RunContext[Any]) -> Resolver:
        """The resolver the run's ids and times are positions in: the run's unit's ledger under UnitPerRun."""
        return self.resolver if self._per_run is None else self._per_run.ledger_for(ctx)

    @override
    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Pin the timestamps of the request about to be sent (and of any request before it not yet pinned)."""
        if self.record_inputs:
            self._inputs.saw_request(ctx.run_id, request_context)
        clocked = self._clocked(ctx)
        await self._clocks(clocked).stamp(clocked, ctx.run_id, ctx.messages, clock=self.clock)
        return request_context

    @override
    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        """Pin the timestamps of the requests made after the last model request (an output tool's return, say)."""
        clocked = self._clocked(ctx)
        await self._clocks(clocked).finish(clocked, result.run_id, result.all_messages(), clock=self.clock)
        return result

    @override
    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        """Pin the times the failed run's requests gained since its last stamp point, then let the error go on.

        A run that ends in an exception (`UsageLimitExceeded` refusing its next request, a tool's error) never
        reaches `after_run`, and the request it built last kept the wall clock's times (issue #34): they are
        pinned here, at the position a replay of the run reaches too. Failing to pin them never hides the error.
        """
        if ctx.run_id is not None:
            clocked = self._clocked(ctx)
            try:
                await self._clocks(clocked).fail(clocked, ctx.run_id, ctx.messages, clock=self.clock)
            except Exception as stamping:
                error.add_note(f"anagrapheus: the failed run's last timestamps were not pinned ({stamping!r})")
        raise error

    @override
    def get_wrapper_model(self, model: Model) -> Model | None:
        """Wrap the model serving a request in a `PinnedModel`; each member of a `FallbackModel` in its own."""
        if isinstance(model, PinnedModel):
            return None
        wrapper = self._wrappers.get(id(model))
        if wrapper is None or wrapper[0] is not model:
            if isinstance(model, FallbackModel):
                # Pinning each member pins a member's failure too, so the fallback recovers on replay as it did.
                members = [self.get_wrapper_model(member) or member for member in model.models]
                wrapper = (model, fallback_with_models(model, members))
            else:
                wrapper = (
                    model,
                    PinnedModel(
                        model,
                        self.resolver,
                        policy=self.policy,
                        dedupe_repeats=self.dedupe_repeats is True,
                        pin_timing=self.clock is None,
                    ),
                )
            self._wrappers[id(model)] = wrapper
        return wrapper[1]

    def _pinned_models(self) -> Iterator[PinnedModel]:
        """The `PinnedModel`s this capability wrapped models in, the members of a `FallbackModel` included."""
        for _, wrapper in self._wrappers.values():
            members = wrapper.models if isinstance(wrapper, FallbackModel) else [wrapper]
            yield from (member for member in members if isinstance(member, PinnedModel))

    @override
    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Give a `FallbackModel`'s failed attempts the times the recorded run measured, so replay is byte-equal."""
        if any(model.answered_stream(ctx.run_id) for model in self._pinned_models()):
            # Answered from a pin, as a streamed request opened before its `chat` span: credited inside the span
            # too, so a replayed stream's span is kept out of traces as a replayed request's is.
            record_durable_unit(executed=False)
        attempts = response.failed_attempts
        if not attempts:
            return response
        # The attempts are timed by the fallback around the pinned members, from the wall clock: pin the times,
        # keyed on what the attempts were and the response that answered (itself a pin).
        material = {
            "response": response_raw(untimed(replace(response, failed_attempts=None))),
            "attempts": [[a.model_name, a.provider_name, a.outcome, a.error] for a in attempts],
        }

        async def measured() -> JSONValue:
            return attempt_times_raw(attempts)

        timings = await self.resolver.aresolve(
            pin_key(ATTEMPT_TIMES, material, walk=walked), kind=ATTEMPT_TIMES, effect=measured, interpret=_attempt_times
        )
        if len(timings) != len(attempts):
            return response
        return replace(response, failed_attempts=timed_attempts(attempts, timings))

    @override
    async def wrap_output_process(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        handler: WrapOutputProcessHandler,
    ) -> Any:
        """Pin a call of an output function like a tool call: keyed on its name and output, answered from its pin."""
        name = output_context.function_name
        if not output_context.has_function or name is None:
            # No function (a plain output type), or a union whose function is chosen inside: nothing of the world.
            return await handler(output)
        key, fingerprint = output_pin(name, output, partial=ctx.partial_output)
        returns = output_returns(output_function_named(getattr(ctx.agent, "output_type", None), name))
        asking = ask(
            key, kind=OUTPUT_CALL, resolver=self.resolver, ctx=ctx, per_run=not _dedupes(self.dedupe_repeats, name)
        )

        # What the body adds to the run (an agent it hands the question to with `usage=ctx.usage`) is pinned with its
        # result, and done to the run again when a pin answers, so a replay's usage and run numbering are live's.
        usage_before = copy.deepcopy(ctx.usage)
        clocks = RunClocks.of(self.resolver)
        runs_before = 0 if clocks is None else clocks.runs
        drawn = False

        def did(within: list[str]) -> Delegated:
            runs = 0 if clocks is None else clocks.runs - runs_before
            return Delegated(ctx.usage - usage_before, runs, within)

        async def draw() -> JSONValue:
            nonlocal drawn
            drawn = True
            with noting_keys() as within:
                try:
                    result = await handler(output)
                except BaseException as error:
                    # Its failure's pin keeps what it did first, so a replay of the failure does it too.
                    failed_having_delegated(error, did(within))
                    raise
            return output_result_raw(name, returns, result, delegated=did(within))

        def redo(delegated: Delegated) -> None:
            """Do to the run what the body did, when a pin answered and the body did not run."""
            if delegated.usage is not None:
                ctx.usage.incr(delegated.usage)
            self.resolver.answered_within(delegated.within)
            if delegated.runs and clocks is not None:
                with clocks.lock:
                    clocks.runs += delegated.runs

        drawn_key = self._outputs.key(asking.key, kind=OUTPUT_CALL, resolver=self.resolver)
        try:
            answer, delegated = await self._outputs.resolve(
                self.resolver,
                asking.key,
                kind=OUTPUT_CALL,
                effect=draw,
                interpret=lambda raw: (output_result_from_raw(returns, raw), delegated_of(raw)),
                fingerprint=fingerprint,
            )
        except BaseException as error:
            if not drawn:
                redo(await failed_again(self.resolver, drawn_key, error, draw))
            raise
        # A replayed hand-off runs its body again, the agent it hands the question to answered from its pins.
        if not drawn and not await ran_again(self.resolver, drawn_key, delegated.within, draw):
            redo(delegated)
        asking.arrived()
        return answer

    @override
    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """Wrap the run's assembled toolset so that each tool call is pinned, and each MCP server's discovery."""
        unnamed = count()

        def pin_discovery(leaf: AbstractToolset[Any]) -> AbstractToolset[Any]:
            if not is_mcp_toolset(leaf):
                return leaf
            # An MCP toolset's label names an object address; its `id` (given, or its URL's host) is stable.
            name = leaf.id if leaf.id is not None else f"#{next(unnamed)}"
            return PinnedDiscovery(leaf, resolver=self.resolver, name=name)

        return PinnedToolset(
            toolset.visit_and_replace(pin_discovery),
            resolver=self.resolver,
            tool_deps=self.tool_deps,
            dedupe_repeats=self.dedupe_repeats,
            caller=self.caller,
        )


# Pinning contributes no toolset and no durable operation of its own, so a DBOS workflow may take it per run.
allow_at_run_time(Pinning)


@dataclass
class PinnedToolset(WrapperToolset[AgentDepsT]):
    """A toolset whose every tool call is pinned under the tool's name and arguments, as `pinned_tool` keys it."""

    resolver: Resolver
    """Answers each keyed tool call: draws it live, or answers it from pins."""
    tool_deps: Mapping[str, Callable[[Any], object]] = field(default_factory=dict[str, Callable[[Any], object]])
    """Tool name to the part of the run's deps that joins the tool's key (deps are otherwise not keyed)."""
    draws: DrawSequence = field(default_factory=DrawSequence)
    """Counts each call's pinned failures, so a call retried after a failure is drawn anew."""
    dedupe_repeats: bool | Collection[str] = False
    """Answer a repeated call in one run from the first call's pin: every tool's (True), or the named tools'."""
    caller: CallerRule = WHOLE_DEPS
    """What identifies the caller in the key of a call of a tool `tool_deps` does not name (see `Pinning`)."""

    @override
    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        """Answer the call from its pin, or call the wrapped toolset and pin the result as JSON."""
        function = tool_function(tool)
        if function is not None and is_pinned_tool(function):
            # A `pinned_tool` pins itself under this very key: pinning it here too would wait on its own draw.
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        keyed_deps = self.tool_deps.get(name)
        arguments = _keyed_arguments(function, tool_args)
        if keyed_deps is None:
            call = caller_pin(name, arguments, ctx, caller=self.caller, resolver=self.resolver)
        else:
            call = tool_pin(name, arguments, deps=keyed_deps(ctx.deps), ctx=ctx)

        cancelled: list[asyncio.CancelledError] = []

        async def draw() -> JSONValue:
            watch = CallWatch(ctx, self.resolver)
            with watch.running():
                # A sync body cancelled while it runs in its worker thread still reaches the world: it is waited for,
                # and what it returned is pinned before the cancellation goes on, as `pinned_tool` pins its own.
                ran = await called_to_its_end(
                    lambda: self.wrapped.call_tool(name, tool_args, watch.ctx or ctx, tool),
                    sync_body=runs_in_a_thread(function),
                )
            if ran.cancelled is not None:
                cancelled.append(ran.cancelled)
            result = ran.value
            # Content pydantic-ai sends as more than JSON (an image) and tuples are kept as themselves; anything else
            # as its JSON, in its own key order.
            return watch.raw(name, result if needs_tags(result) else _jsonable(name, result), declared)

        # The classes a replay may rebuild the tool's typed results as: its function's signature's, never the file's.
        declared = DeclaredTypes.returned_by(function, source=f"the signature of tool {name!r}")
        per_run = not _dedupes(self.dedupe_repeats, name)
        answer = await answer_tool_call(self.draws, self.resolver, call, ctx, draw, per_run=per_run, declared=declared)
        if cancelled:
            raise cancelled[0]  # pinned now: the cancellation is the caller's
        return answer


def _dedupes(dedupe_repeats: bool | Collection[str], tool: str) -> bool:
    """Whether a repeated call of `tool` in one run is answered from the first call's pin (the opt-out)."""
    if isinstance(dedupe_repeats, bool):
        return dedupe_repeats
    return tool in dedupe_repeats


def _attempt_times(raw: JSONValue) -> list[tuple[datetime, timedelta]]:
    return attempt_times_of(raw, kind=ATTEMPT_TIMES)


def _keyed_arguments(function: Callable[..., Any] | None, tool_args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as `pinned_tool` keys them: the validated ones with the function's defaults filled in."""
    if function is None:
        return tool_args
    try:
        bound = _signature(function).bind_partial(**tool_args)
    except (TypeError, ValueError):
        # A signature Python cannot bind by name (positional-only, say): key what the model sent.
        return tool_args
    bound.apply_defaults()
    return dict(bound.arguments)


def _signature(function: Callable[..., Any]) -> inspect.Signature:
    """The function's signature, read once per function: it is bound at every call of its tool."""
    try:
        return _signature_of(function)
    except TypeError:  # a callable that cannot be hashed (or has no signature, which is read again to raise)
        return inspect.signature(function)


@functools.lru_cache(maxsize=512)
def _signature_of(function: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(function)


def _jsonable(tool: str, result: object) -> object:
    # A tool in a toolset may return any value pydantic-ai can send the model; its pin keeps the JSON of it.
    try:
        return to_jsonable_python(result)
    except PydanticSerializationError as e:
        raise PinResultError(f"tool {tool!r} returned {type(result).__qualname__}, which has no JSON form ({e})") from e
