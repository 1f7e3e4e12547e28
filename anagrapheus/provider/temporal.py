"""Pins inside Temporal activities: the model and each tool pinned where Temporal runs them, the unit per workflow.

Temporal runs workflow code deterministically from its history and every effect in an activity; pydantic-ai's
`TemporalDurability` makes each model request and tool call an activity. So a pin is drawn inside the activity,
keyed as `Pinning` keys it, in the unit `temporal:<workflow id>` (the same after Temporal retries the activity
on another worker), and written before Temporal learns the activity finished: an activity retried after a
worker died answers from its pin. `TemporalPins` is the capability that closes the unit as the run ends, through
a durable operation (an activity under Temporal), which also pins the run's id, the request timestamps the
workflow stamped and its inputs, so the unit replays offline under plain `Pinning`, byte for byte.

Temporal is imported only inside the activities that ask it for the workflow's id: importing this module needs
no Temporal, and never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, durable_operation
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import KnownModelName, Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.run import AgentRunResult
from pydantic_ai.usage import RunUsage
from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.provider.inputs import INPUTS_LIMIT, InputsRecorder, output_json, place_of
from anagrapheus.provider.model import PinnedModel
from anagrapheus.provider.policy import CallPolicy
from anagrapheus.provider.run_clock import RunClocks
from anagrapheus.provider.tools import WHOLE_DEPS, CallerRule, pinned_tool
from anagrapheus.provider.unit_per_run import fails_for_good
from anagrapheus.timeline.events import EventTypeRegistry, given_or_builtins
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.resolving.replay import ReplayPins
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver
from anagrapheus.timeline.stores.ports import TimelineStore

__all__ = ["UNIT_PREFIX", "TemporalPins", "TemporalUnits", "temporal_unit_id"]

R = TypeVar("R")

UNIT_PREFIX = "temporal:"
"""What a Temporal workflow's unit id starts with; the workflow's id follows."""


def temporal_unit_id() -> str:
    """The unit of the Temporal workflow whose activity is running: `temporal:<workflow id>`."""
    from temporalio import activity  # Temporal is an optional extra (`anagrapheus[temporal]`): imported when asked.

    workflow_id: str | None = activity.info().workflow_id if activity.in_activity() else None
    if workflow_id is None:
        raise UsageError(
            "TemporalPins draws only inside a Temporal activity of a workflow (it names the unit after the workflow);"
            " give the agent TemporalDurability so its model requests and tool calls run as activities"
        )
    return UNIT_PREFIX + workflow_id


class TemporalUnits(DelegatingResolver):
    """A resolver drawing each key in the unit of the Temporal workflow whose activity draws it.

    One per worker process: it keeps the ledger of each unit in use, so that every activity of one workflow
    running in this worker draws into one ledger, and forgets it once the unit closes. A fresh worker (one
    that took over from a worker that died) opens the unit again and reuses its pins.
    """

    def __init__(
        self,
        store: TimelineStore,
        registry: EventTypeRegistry | None = None,
        *,
        unit_of: Callable[[], str] = temporal_unit_id,
    ) -> None:
        self.store = store
        """Where every unit's scratch and log live."""
        self.registry = given_or_builtins(registry)
        """The event types the ledgers encode with (the built-ins included)."""
        self.unit_of = unit_of
        """The unit of the activity running now: `temporal_unit_id` unless a test names another."""
        self._ledgers: dict[str, PinLedger | ReplayPins] = {}
        self._open: dict[str, PinLedger] = {}  # the units drawn into live, as the ledgers that close them
        self._lock = threading.Lock()

    @property
    @override
    def serves_each_run(self) -> TemporalUnits:
        """Itself: its runs are numbered, and their askers kept, by each unit's own ledger."""
        return self

    def ledger_for(self, ctx: RunContext[Any] | None = None) -> PinLedger | ReplayPins:
        """What answers the running activity's unit: its ledger, or a strict replay of it once committed."""
        del ctx  # the unit is the activity's workflow's, whatever run context the activity rebuilt
        return self.unit_for(self.unit_of())

    def unit_for(self, unit_id: str) -> PinLedger | ReplayPins:
        """What answers `unit_id`: the ledger in use, or a new one (a replay of its log if it was committed)."""
        with self._lock:
            found = self._ledgers.get(unit_id)
            if found is None:
                ledger = PinLedger(self.store, self.registry, unit_id=unit_id)
                # An activity retried after its workflow's unit committed (the close ran, the worker died before
                # Temporal saw the workflow end) is answered from the log: it repeats nothing.
                committed = ledger.state == "committed"
                found = ReplayPins.from_store(self.store, self.registry, unit_id=unit_id) if committed else ledger
                self._ledgers[unit_id] = found
                if not committed:
                    self._open[unit_id] = ledger
            return found

    def open_ledger(self, unit_id: str) -> PinLedger | None:
        """The ledger drawing `unit_id` live, or None where the unit was answered from its log (closed before)."""
        self.unit_for(unit_id)
        with self._lock:
            return self._open.get(unit_id)

    def forget(self, unit_id: str) -> None:
        """Drop the unit's ledger once it closed."""
        with self._lock:
            self._ledgers.pop(unit_id, None)
            self._open.pop(unit_id, None)

    async def serve(
        self,
        ctx: RunContext[Any],
        run: Callable[[], Awaitable[R]],
        *,
        started: Callable[[PinLedger | ReplayPins, RunContext[Any]], object],
    ) -> R:
        """Refused: a Temporal run's unit is closed by `TemporalPins`, never served around a run by `Pinning`."""
        raise UsageError(
            "TemporalUnits serves no run under Pinning: give the agent TemporalPins (its model and tools wrapped"
            " with pins.model and pins.tool), which pins inside Temporal's activities"
        )

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        """The ledger of the unit of the activity drawing now, asked for `key` as it is."""
        return self.ledger_for(), key


class TemporalPins(AbstractCapability[Any]):
    """Pins a Temporal agent run inside its activities, and closes the workflow's unit as the run ends.

    `pins = TemporalPins(store)`, then `Agent(pins.model(model), tools=[pins.tool(f), ...],
    capabilities=[TemporalDurability(), pins])`: each model request and tool call is pinned in the activity
    that runs it, in the unit `temporal:<workflow id>`. As the run ends, one durable operation (an activity)
    pins the run's id, the timestamps its requests were stamped with in the workflow and its inputs, and
    commits the unit; a run that raised an `Exception` abandons it (`abandons`). Workflow code stays
    `await agent.run(prompt)`. One agent run per workflow: the unit is the workflow's.
    """

    id = "anagrapheus_pins"
    """The capability's stable id: it names the close operation's activity, which Temporal's history keeps."""

    def __init__(
        self,
        store: TimelineStore,
        registry: EventTypeRegistry | None = None,
        *,
        policy: CallPolicy | None = None,
        caller: CallerRule = WHOLE_DEPS,
        abandons: Callable[[BaseException], bool] = fails_for_good,
        record_inputs: bool = True,
        record_deps: Callable[[Any], object] | None = None,
        inputs_limit: int = INPUTS_LIMIT,
        units: TemporalUnits | None = None,
    ) -> None:
        self.units = units if units is not None else TemporalUnits(store, registry)
        """The resolver every pinned model and tool draws through: the unit of the activity's workflow."""
        self.policy = policy
        """Decides what goes into a model request's key; `SemanticCallPolicy` when None (as under `Pinning`)."""
        self.caller = caller
        """What identifies the caller in a tool call's key, as under `Pinning`."""
        self.abandons = abandons
        """Whether a run's error is final, so its unit is abandoned; otherwise the unit is left open."""
        self.record_inputs = record_inputs
        """Whether the run's inputs and output are noted on its unit as a `RunInputs` event."""
        self._inputs = InputsRecorder(deps=record_deps, limit=inputs_limit, caller=caller)

    @override
    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: a store is a live object, so the capability cannot be written into an agent spec."""
        return None

    def model(self, model: Model | KnownModelName | str) -> PinnedModel:
        """`model`, pinned where Temporal runs its requests: in the model-request activity."""
        return PinnedModel(model, self.units, policy=self.policy)

    def tool(self, func: Callable[..., Any], *, name: str | None = None) -> Callable[..., Awaitable[Any]]:
        """`func` as a tool pinned where Temporal runs it: in the tool-call activity (see `pinned_tool`)."""
        return pinned_tool(self.units, func, name=name, caller=self.caller)

    @override
    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        """Close the workflow's unit through the durable operation: pin the run's id, times and inputs, commit."""
        if ctx.run_id is not None:
            await self.close_unit(
                ctx,
                run_id=ctx.run_id,
                prompt=ctx.prompt,
                messages=result.all_messages(),
                output=output_json(result.output),
                error=None,
            )
        return result

    @override
    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        """Abandon the workflow's unit when the run failed for good (`abandons`); an interrupted run leaves it open."""
        if ctx.run_id is not None and self.abandons(error):
            await self.close_unit(
                ctx,
                run_id=ctx.run_id,
                prompt=ctx.prompt,
                messages=list(ctx.messages),
                output=None,
                error=f"{type(error).__name__}: {error}"[:1000],
            )
        raise error

    @durable_operation(name="close_unit")
    async def close_unit(
        self,
        ctx: RunContext[Any],
        *,
        run_id: str,
        prompt: Any,
        messages: list[ModelMessage],
        output: Any,
        error: str | None,
    ) -> str:
        """Pin the run's id, its requests' times and its inputs in the workflow's unit, then commit it (or abandon).

        An activity under Temporal: retried after a worker died, it finds what it pinned before, or the unit
        closed already, and does nothing twice. Returns the unit's state.
        """
        unit_id = self.units.unit_of()
        answering = self.units.open_ledger(unit_id)
        if answering is None:
            self.units.forget(unit_id)
            return "committed"  # closed by an earlier attempt of this operation, which Temporal did not see end
        state = answering.state
        if state != "open":
            self.units.forget(unit_id)
            return state
        await self._pin_run(answering, ctx, run_id, prompt, messages, output, error)
        if error is None:
            await answering.acommit()
        else:
            await answering.aabandon(reason=f"the run failed for good ({error})")
        self.units.forget(unit_id)
        return answering.state

    async def _pin_run(
        self,
        ledger: PinLedger,
        ctx: RunContext[Any],
        run_id: str,
        prompt: Any,
        messages: list[ModelMessage],
        output: Any,
        error: str | None,
    ) -> None:
        """Pin what `Pinning` pins of a run beside its calls, from the run's finished messages, at its positions.

        The run's id where a replay's `Pinning` draws it (placed by the run's inputs), and the timestamps at each
        stamp point `Pinning` has (before each model request, at the end): the workflow stamped them with
        `workflow.now()`, and a replay gives its requests these.
        """
        history = _history_of(run_id, messages)
        clocks = RunClocks.of(ledger)
        assert clocks is not None  # a PinLedger carries its attachments
        deps = ctx.deps  # carried into the activity by Temporal's run context, as the tools got them
        place = place_of(prompt, history, deps, self.caller, ledger)
        clocks.draw_run_id(ledger, lambda: run_id, place=place)
        clocks.start(run_id)
        recorder = self._inputs if self.record_inputs else None
        begun = None
        if recorder is not None:
            asked = RunContext[Any](
                deps=deps,
                model=cast(Model, None),  # never read: the inputs are the prompt, history, deps and agent
                usage=RunUsage(),
                prompt=prompt,
                messages=list(history),
                agent=ctx.agent,
                run_id=run_id,
            )
            begun = recorder.begin(asked, ledger)
            first = next((m for m in messages[len(history) :] if isinstance(m, ModelRequest)), None)
            if first is not None:
                # The instructions the run's first request carried (its model settings stayed in the workflow).
                sent = ModelRequestContext(
                    model=cast(Model, None),
                    messages=[first],
                    model_settings=None,
                    model_request_parameters=ModelRequestParameters(),
                )
                recorder.saw_request(run_id, sent)
        for at, message in enumerate(messages):
            if at >= len(history) and isinstance(message, ModelRequest) and _answered(messages, at):
                await clocks.stamp(ledger, run_id, messages[: at + 1], clock=None)
        await clocks.finish(ledger, run_id, messages, clock=None)
        if recorder is not None and begun is not None:
            inputs, token = begun
            failure = None if error is None else RuntimeError(error)
            recorder.end(ledger, run_id, inputs, token, output=output, error=failure)


def _history_of(run_id: str, messages: list[ModelMessage]) -> list[ModelMessage]:
    """The messages the run was given (another run's), before the ones it made, which carry its id."""
    start = len(messages)
    while start > 0 and messages[start - 1].run_id == run_id:
        start -= 1
    return messages[:start]


def _answered(messages: list[ModelMessage], at: int) -> bool:
    """Whether the request at `at` was sent: a response follows it."""
    return at + 1 < len(messages) and isinstance(messages[at + 1], ModelResponse)
