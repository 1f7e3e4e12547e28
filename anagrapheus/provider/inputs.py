"""What an agent run was asked, recorded as a `RunInputs` event of its unit, and read back to ask it again."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserContent
from pydantic_ai.models import ModelRequestContext
from pydantic_core import PydanticSerializationError, to_jsonable_python

from anagrapheus.errors import CorruptEvent
from anagrapheus.provider.additions import known_dump
from anagrapheus.provider.run_clock import RUN_ID, RUN_PLACE
from anagrapheus.provider.tools import WHOLE_DEPS, CallerRule, asking_as, run_caller
from anagrapheus.timeline.canonical import CanonicalError, JSONValue, canonical_json, pin_key, stored_json
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    EventTypeRegistry,
    PendingEvent,
    PinPromoted,
    RunInputs,
    StoredEvent,
)
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = [
    "INPUTS_FORMAT",
    "INPUTS_LIMIT",
    "InputsRecorder",
    "RecordedRun",
    "output_json",
    "place_of",
    "recorded_runs",
]

INPUTS_FORMAT = 2
"""The version of the `inputs` shape this module writes (it reads this one and every earlier one).

Format 2 adds `history_from`: the history starts with the first `count` messages of the history of an earlier run
of the same unit (`run_id`), and `history` holds only what follows. A run whose history refers to none is written
in format 1, as before, so a recording without one is byte for byte what an earlier version wrote.
"""
_WHOLE_FORMAT = 1
"""The format of inputs whose history is written whole."""
_READ_FORMATS = (_WHOLE_FORMAT, INPUTS_FORMAT)
_REMEMBERED_RUNS = 4
"""How many of a ledger's latest runs are kept to refer to (a run that delegated to others ends after them)."""

INPUTS_LIMIT = 256 * 1024
"""The default bound on one run's recorded inputs, in bytes of canonical JSON: past it the history is left out."""

_PROMPT = TypeAdapter[str | Sequence[UserContent]](str | Sequence[UserContent])
_REGISTRY = EventTypeRegistry()

# Set while a run recorded by an `InputsRecorder` is under way: a run started inside it (by a tool) is nested.
_OUTER_RUN: ContextVar[str | None] = ContextVar("anagrapheus_outer_run", default=None)


def output_json(value: object) -> JSONValue:
    """A value as JSON, or its repr when it has none (it is recorded to be read, not rebuilt)."""
    try:
        return cast(JSONValue, to_jsonable_python(value))
    except (PydanticSerializationError, TypeError, ValueError):
        return {"unserialisable": repr(value)[:200]}


def place_of(
    prompt: str | Sequence[UserContent] | None,
    history: Sequence[ModelMessage],
    deps: object,
    caller: CallerRule,
    resolver: Resolver,
) -> str | None:
    """The digest of what tells a run from the other runs of its unit before it starts; None if it has none.

    Its prompt, the runs its history came from (their ids, pinned, so stable across replays) and its caller (by the
    caller rule, so a run asked again without deps is its recorded caller). Runs asked the same are placed among
    themselves in the order they start, which cannot tell them apart: they were asked the same.
    """
    try:
        return pin_key(
            RUN_PLACE,
            {
                "prompt": None if prompt is None else cast(JSONValue, _PROMPT.dump_python(prompt, mode="json")),
                "history": [[message.run_id, message.conversation_id] for message in history],
                "caller": run_caller(deps, caller, resolver),
            },
        )
    except (PydanticSerializationError, CanonicalError, TypeError, ValueError):
        return None  # placed where it starts, as every run was before runs were placed by their inputs


def _type_name(spec: object) -> str | None:
    """The name of an agent's output type (or of each member of a list of them)."""
    if isinstance(spec, (list, tuple)):
        return " | ".join(_type_name(member) or "?" for member in cast(Sequence[object], spec))
    name = getattr(spec, "__name__", None)
    return name if isinstance(name, str) else type(spec).__name__


@dataclass
class InputsRecorder:
    """Records each run's inputs and outcome for `Pinning`, as one `RunInputs` event noted on the run's ledger."""

    deps: Callable[[Any], object] | None = None
    """The part of the run's deps to snapshot as JSON (the user's opt-in); None records no deps."""
    limit: int = INPUTS_LIMIT
    """The bound on one run's inputs in bytes; past it the message history, then the prompt, is left out."""
    caller: CallerRule = WHOLE_DEPS
    """The `Pinning`'s caller rule: the digest naming the run's caller is recorded, so the run can be asked again."""
    _first: dict[str, tuple[str | None, JSONValue]] = field(default_factory=dict[str, tuple[str | None, JSONValue]])

    def begin(self, ctx: RunContext[Any], resolver: Resolver) -> tuple[dict[str, JSONValue], object]:
        """What the run was asked, read before it starts (the history is copied: the run appends to it).

        Nothing is read when `resolver` records nothing (a strict replay): `end` would drop it, and dumping a long
        history on every replayed run cost more than keying its requests.
        """
        if _recording_unit(resolver) is None:
            return {}, _OUTER_RUN.set(ctx.run_id or "")
        inputs: dict[str, JSONValue] = {
            "format": _WHOLE_FORMAT,
            "prompt": None if ctx.prompt is None else cast(JSONValue, _PROMPT.dump_python(ctx.prompt, mode="json")),
            # Without the fields a later pydantic-ai added while unset, so a re-recording writes the same bytes.
            "history": cast(JSONValue, known_dump(ModelMessagesTypeAdapter, list(ctx.messages))),
            "output_type": _type_name(getattr(ctx.agent, "output_type", None)),
            "agent": getattr(ctx.agent, "name", None),
            "metadata": None if ctx.metadata is None else output_json(ctx.metadata),
            "deps": None if self.deps is None else output_json(self.deps(ctx.deps)),
            "nested": _OUTER_RUN.get() is not None,
        }
        # Only a digest, never the deps: a run asked again without its deps keys its tool calls as they were.
        caller = run_caller(ctx.deps, self.caller, resolver)
        if caller is not None:
            inputs["caller"] = caller
        # Set once everything is read: a snapshot that raises leaves the context as it found it.
        return inputs, _OUTER_RUN.set(ctx.run_id or "")

    def saw_request(self, run_id: str | None, request_context: ModelRequestContext) -> None:
        """Keep the instructions and model settings the run's first model request was sent with."""
        if run_id is None or run_id in self._first:
            return
        last = request_context.messages[-1] if request_context.messages else None
        settings = request_context.model_settings
        self._first[run_id] = (
            last.instructions if isinstance(last, ModelRequest) else None,
            None if settings is None else output_json(settings),
        )

    def end(
        self,
        resolver: Resolver,
        run_id: str | None,
        inputs: dict[str, JSONValue],
        token: object,
        *,
        output: object = None,
        error: BaseException | None = None,
    ) -> None:
        """Note the run's inputs and how it ended on its unit's ledger (nothing under strict replay)."""
        _OUTER_RUN.reset(token)  # pyright: ignore[reportArgumentType]
        instructions, settings = self._first.pop(run_id or "", (None, None))
        recording = _recording_unit(resolver)
        if recording is None or run_id is None or not inputs:
            # `not inputs`: the run began when its resolver recorded nothing (begin read nothing to note).
            return
        ledger, unit = recording
        inputs["instructions"] = instructions
        inputs["model_settings"] = settings
        if error is None:
            inputs["outcome"] = "completed"
            inputs["output"] = output_json(output)
        else:
            inputs["outcome"] = "failed"
            inputs["error"] = f"{type(error).__name__}: {error}"[:1000]
        history = inputs.get("history")
        whole = cast(list[JSONValue], history) if isinstance(history, list) else None
        self._refer(ledger, inputs, whole)
        event = self._event(unit, run_id, inputs)
        ledger.note_event(event)
        if whole is not None and inputs.get("history") is not None and (latest := _latest_runs(ledger)) is not None:
            latest.noted(run_id, whole)

    def _refer(self, ledger: Resolver, inputs: dict[str, JSONValue], history: list[JSONValue] | None) -> None:
        """Write the history as the part of it the unit's latest recorded run did not have, when they share a start.

        A conversation gives each run the history of the one before and what that run added: written whole, turn n
        would store the n turns before it again, and a recording would grow with the square of the conversation.
        """
        if not history:
            return
        latest = _latest_runs(ledger)
        shared, earlier_run = 0, ""
        for run, earlier in [] if latest is None else latest.runs():
            common = 0
            for mine, theirs in zip(history, earlier, strict=False):
                if mine != theirs:
                    break
                common += 1
            if common > shared:
                shared, earlier_run = common, run
        if shared == 0:
            return
        inputs["format"] = INPUTS_FORMAT
        inputs["history_from"] = {"run_id": earlier_run, "count": shared}
        inputs["history"] = history[shared:]

    def _event(self, unit_id: str, run_id: str, inputs: dict[str, JSONValue]) -> PendingEvent:
        """The `RunInputs` event, its inputs bounded: the history goes first, then the prompt."""
        # Written once and measured from that text: the payload holds it as it is (see `run_inputs_payload`).
        text = stored_json(inputs)
        for dropped in ("history", "prompt"):
            # An ASCII text is its canonical form too; otherwise the bound is measured as it always was (NFC).
            size = len(text) if text.isascii() else len(canonical_json(inputs).encode())
            if size <= self.limit:
                break
            value = inputs.get(dropped)
            if not value:
                continue  # nothing to leave out: an empty history
            inputs[dropped] = None
            inputs[f"{dropped}_left_out"] = len(canonical_json(value).encode())
            if dropped == "history" and inputs.pop("history_from", None) is not None:
                inputs["format"] = _WHOLE_FORMAT  # nothing refers to an earlier run any more
            text = stored_json(inputs)
        return PendingEvent(
            namespace=RunInputs.namespace,
            type=RunInputs.event_type,
            schema_version=RunInputs.schema_version,
            payload=run_inputs_payload(unit_id=unit_id, run_id=run_id, inputs_text=text),
            correlation_id=unit_id,
        )


def run_inputs_payload(*, unit_id: str, run_id: str, inputs_text: str) -> str:
    """`RunInputs`' payload from its inputs already written (`stored_json`), byte-equal to the registry's encoding."""
    # Keys in sorted order, as `stored_json` writes an object: inputs, run_id, unit_id.
    return f'{{"inputs":{inputs_text},"run_id":{stored_json(run_id)},"unit_id":{stored_json(unit_id)}}}'


class _LatestRuns:
    """The latest runs a ledger noted with their history whole: the ones a later run's history may refer to.

    Kept per ledger, as its notes are: a reference never outlives the notes it refers to (a unit's notes are
    committed together, in the order noted, or lost together).
    """

    def __init__(self) -> None:
        self._runs: list[tuple[str, list[JSONValue]]] = []
        self._lock = threading.Lock()

    def noted(self, run_id: str, history: list[JSONValue]) -> None:
        """Remember a run just noted; a run noted again under the same id is known by its latest history only."""
        with self._lock:
            kept = [(run, earlier) for run, earlier in self._runs if run != run_id][-(_REMEMBERED_RUNS - 1) :]
            self._runs = [*kept, (run_id, history)]

    def runs(self) -> list[tuple[str, list[JSONValue]]]:
        """The runs remembered, latest first."""
        with self._lock:
            return self._runs[::-1]


_LATEST: Attachment[_LatestRuns] = Attachment("the latest runs noted with their history")


def _latest_runs(ledger: Resolver) -> _LatestRuns | None:
    """The runs `ledger` noted lately (None for a ledger that keeps no attachments: nothing is referred to)."""
    return ledger.attached(_LATEST, _LatestRuns)


def _recording_unit(resolver: Resolver) -> tuple[Resolver, str] | None:
    """The ledger `resolver`'s fresh draws land in, with its unit; None when it records nothing (a strict replay)."""
    ledger = resolver.draws_into
    unit = None if ledger is None else ledger.unit
    return None if ledger is None or unit is None else (ledger, unit)


@dataclass(frozen=True)
class RecordedRun:
    """One recorded run's inputs and outcome, rebuilt as pydantic-ai values to ask the run again."""

    unit_id: str
    """The unit of work the run belonged to."""
    run_id: str
    """The run's recorded id."""
    prompt: str | Sequence[UserContent] | None
    """The user prompt, text or multimodal parts."""
    message_history: list[ModelMessage] | None
    """The history the run continued, None when it started afresh."""
    model_settings: dict[str, Any] | None
    """The model settings the run's first request was sent with (the run's merged with the agent's)."""
    instructions: str | None
    """The instructions the run's first model request was sent with, as rendered."""
    output_type: str | None
    """The name of the agent's output type."""
    deps: JSONValue
    """The snapshot of the deps the user opted into, if any."""
    output: JSONValue
    """The run's output as JSON, when it completed."""
    outcome: str
    """`completed` or `failed`."""
    error: str | None
    """What the run failed with."""
    nested: bool
    """Whether the run was started inside another run of the unit (by a delegating tool)."""
    left_out: tuple[str, ...] = ()
    """Inputs left out of the recording for size (`history`, `prompt`): the run cannot be asked again as it was."""
    named: bool = False
    """Whether the run's caller named it (`run_id=`) rather than a `Pinning` drawing its id: asked again under it."""
    caller: str | None = None
    """The digest naming the run's caller (`Pinning(caller=...)`) its tool calls were keyed with; None if none."""

    def as_its_caller(self) -> AbstractContextManager[None]:
        """Around asking the run again: without deps given, its tool calls are keyed as its recorded caller's."""
        return asking_as(self.caller)

    def run_kwargs(self) -> dict[str, Any]:
        """The arguments of `agent.run(...)` that ask the run again (deps are the caller's to give)."""
        kwargs: dict[str, Any] = {"user_prompt": self.prompt}
        if self.message_history:
            kwargs["message_history"] = self.message_history
        if self.named:
            # Placed by its name (see `RunClocks.start`): its times and calls are keyed on it.
            kwargs["run_id"] = self.run_id
        return kwargs


def _inputs_of(event: RunInputs, *, seq: int) -> dict[str, JSONValue]:
    """A run's recorded inputs, refused unless in a format this version reads."""
    inputs = event.inputs
    if not isinstance(inputs, dict) or inputs.get("format") not in _READ_FORMATS:
        raise CorruptEvent(
            f"run_inputs of run {event.run_id} is not in format {INPUTS_FORMAT} or earlier: written by a newer"
            " anagrapheus?",
            seq=seq,
        )
    return cast(dict[str, JSONValue], inputs)


@dataclass
class _Histories:
    """The runs' histories, each resolved whole: one that refers to an earlier run's history starts with it."""

    whole: dict[tuple[str, str], list[JSONValue] | None] = field(
        default_factory=dict[tuple[str, str], list[JSONValue] | None]
    )

    def resolve(self, event: RunInputs, inputs: dict[str, JSONValue], *, seq: int) -> JSONValue:
        """The run's whole history (None when left out), remembered for the later runs that refer to it."""
        history = inputs.get("history")
        reference = inputs.get("history_from")
        if reference is not None:
            history = self._continued(event, reference, history, seq=seq)
        self.whole[(event.unit_id, event.run_id)] = (
            cast(list[JSONValue], history) if isinstance(history, list) else None
        )
        return history

    def _continued(self, event: RunInputs, reference: JSONValue, tail: JSONValue, *, seq: int) -> list[JSONValue]:
        """The first `count` messages of the earlier run's history, then `tail`."""
        earlier = count = None
        if isinstance(reference, dict):
            earlier, count = reference.get("run_id"), reference.get("count")
        if not isinstance(earlier, str) or not isinstance(count, int) or isinstance(count, bool):
            raise CorruptEvent(
                f"run_inputs of run {event.run_id}: its history_from is not a run id and a count", seq=seq
            )
        start = self.whole.get((event.unit_id, earlier))
        if start is None or len(start) < count or not isinstance(tail, list):
            raise CorruptEvent(
                f"run_inputs of run {event.run_id}: its history continues the first {count} message(s) of run"
                f" {earlier}, which unit {event.unit_id} does not hold before it (a recording cut short or edited?)",
                seq=seq,
            )
        return [*start[:count], *cast(list[JSONValue], tail)]


def _run_of(event: RunInputs, *, seq: int, histories: _Histories) -> RecordedRun:
    inputs = _inputs_of(event, seq=seq)
    prompt = inputs.get("prompt")
    history = histories.resolve(event, inputs, seq=seq)
    settings = inputs.get("model_settings")
    instructions = inputs.get("instructions")
    output_type = inputs.get("output_type")
    error = inputs.get("error")
    # A tampered or foreign recording fails typed, naming the event, never with pydantic's bare error (issue #35).
    try:
        asked = None if prompt is None else _PROMPT.validate_python(prompt)
    except ValidationError as e:
        raise _unreadable(event, "prompt", e, seq=seq) from None
    try:
        continued = ModelMessagesTypeAdapter.validate_python(history) if history else None
    except ValidationError as e:
        raise _unreadable(event, "history", e, seq=seq) from None
    return RecordedRun(
        unit_id=event.unit_id,
        run_id=event.run_id,
        prompt=asked,
        message_history=continued,
        model_settings=cast(dict[str, Any], settings) if isinstance(settings, dict) else None,
        instructions=instructions if isinstance(instructions, str) else None,
        output_type=output_type if isinstance(output_type, str) else None,
        deps=inputs.get("deps"),
        output=inputs.get("output"),
        outcome=str(inputs.get("outcome", "completed")),
        error=error if isinstance(error, str) else None,
        nested=inputs.get("nested") is True,
        left_out=tuple(name for name in ("history", "prompt") if f"{name}_left_out" in inputs),
        caller=caller if isinstance(caller := inputs.get("caller"), str) else None,
    )


def _unreadable(event: RunInputs, what: str, error: ValidationError, *, seq: int) -> CorruptEvent:
    """The error of a run's recorded `what` that pydantic-ai cannot read."""
    return CorruptEvent(
        f"run_inputs of run {event.run_id}: its {what} is not what pydantic-ai reads"
        f" ({error.error_count()} error(s), the first: {error.errors()[0]['msg']})",
        seq=seq,
    )


def recorded_runs(events: Iterable[StoredEvent], *, unit_id: str | None = None) -> list[RecordedRun]:
    """The runs whose inputs a log or recording holds (a unit's, or all), in the order they ended."""
    runs: list[RecordedRun] = []
    drawn: set[object] = set()
    histories = _Histories()
    for stored in events:
        if stored.namespace != BUILTIN_NAMESPACE:
            continue
        if stored.type == PinPromoted.event_type:
            # The ids a `Pinning` drew for its runs: every other recorded run was named by its caller.
            pin = stored.payload_json()
            if pin.get("kind") == RUN_ID:
                drawn.add(pin.get("raw"))
            continue
        if stored.type != RunInputs.event_type:
            continue
        event = _REGISTRY.decode(stored)
        assert isinstance(event, RunInputs)
        if unit_id is None or event.unit_id == unit_id:
            # In log order: a history refers only to a run of its unit that ended, and was noted, before it.
            runs.append(_run_of(event, seq=stored.seq, histories=histories))
    return [dataclasses.replace(run, named=run.run_id not in drawn) for run in runs]
