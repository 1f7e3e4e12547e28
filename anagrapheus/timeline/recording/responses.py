"""A run's recorded history as a recording line holds it: each model call's result its unit's pin holds, referred to.

A conversation's run records the messages the run before it added (`RunInputs`, `provider.inputs`), and among them
each model call's result, which that call's pin in the same unit holds already (issue #43). In memory, in a log and
in every event a reader returns, a history is whole. Only the recording file writes such a message as a reference,
`{"$anagrapheus.response_of": digest, ...}`: the digest of the result as its pin holds it, less the fields the
framework sets on a result after its call (`Stamping.stamped_fields`, the provider layer's), with those fields as
the message holds them but for the ones the message before it holds alike. A message is referred to only when an
earlier `model_call` pin line of the same run of its unit's lines holds it (a line of another unit in between ends
the run, as for fingerprint deltas), and only when the reference read back is the very message, so a reader makes
the history whole exactly. Keys starting `$anagrapheus.` are the library's own: no message holds one. References
are written only in a version 4 recording, which an older reader refuses by its version rather than read a
reference as a message.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NoReturn, cast

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.canonical import canonical_number, encode_normalised, stored_json_of_parsed
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, Event, PinPromoted, RunInputs
from anagrapheus.timeline.recording.strict_json import parse_object

__all__ = ["RESPONSE_OF", "ResponseReferences", "ResponseResolver"]

RESPONSE_OF = "$anagrapheus.response_of"
"""The field of a history item that refers to a model response a pin of its unit holds: the response's digest."""


_MODEL_CALL = "model_call"
_PIN_TYPE = PinPromoted.event_type
_INPUTS_TYPE = RunInputs.event_type
# The fields in a line's text that say it may be one to read: cheap tests before a parse.
_PIN_MARK = f'"kind":"{_MODEL_CALL}"'
_INPUTS_MARK = f'"type":"{_INPUTS_TYPE}"'

_ABSENT = object()

Responses = dict[str, dict[str, Any]]
"""Each model response held by a pin of the current run of one unit's lines, by its digest."""


# A pin's response is read as a recording line's JSON is (numbers as canonical JSON spells them), so what a reference
# is made whole with is what the line it stands for would have been read as.
_decode_response = json.JSONDecoder(parse_float=canonical_number).decode


def _digest(response: dict[str, Any], stamped: tuple[str, ...]) -> str:
    """The digest naming a result: of its JSON as a reader writes it back, less the stamped fields."""
    unstamped = {name: value for name, value in response.items() if name not in stamped}
    return hashlib.sha256(stored_json_of_parsed(unstamped).encode()).hexdigest()[:32]


def _fields(item: object) -> dict[str, Any]:
    """A history item's fields; none for an item that is not an object."""
    return cast(dict[str, Any], item) if isinstance(item, dict) else {}


def _restored(
    base: dict[str, Any], reference: dict[str, Any], before: object, stamped: tuple[str, ...]
) -> dict[str, Any]:
    """The message a reference stands for: its base less the stamped fields, with the reference's stamped fields.

    A stamped field the reference leaves out is the one the message `before` it in the history holds (a run's
    messages share their run and conversation ids), or absent when that one has none.
    """
    message = {name: value for name, value in base.items() if name not in stamped}
    earlier = _fields(before)
    for name in stamped:
        if name in reference:
            message[name] = reference[name]
        elif name in earlier:
            message[name] = earlier[name]
    return message


def _current_payload(fields: dict[str, Any], event: type[Event]) -> dict[str, Any] | None:
    """The payload of a line holding a built-in `event` at its current version; None for any other line."""
    if fields["namespace"] != BUILTIN_NAMESPACE or fields["type"] != event.event_type:
        return None
    payload = fields["payload"]
    if fields["schema_version"] != event.schema_version or not isinstance(payload, dict):
        return None
    return cast(dict[str, Any], payload)


def _pin_text(fields: dict[str, Any]) -> tuple[str, str] | None:
    """The unit and response text of a current `model_call` pin line that did not fail; None for any other line."""
    payload = _current_payload(fields, PinPromoted)
    if payload is None:
        return None
    unit, raw = payload.get("unit_id"), payload.get("raw")
    if payload.get("kind") != _MODEL_CALL or payload.get("failed") is not False or not isinstance(unit, str):
        return None
    text = cast(dict[str, Any], raw).get("ordered_json") if isinstance(raw, dict) else None
    return (unit, text) if isinstance(text, str) else None


def _response_of(text: str) -> dict[str, Any] | None:
    """The model response a pin's text holds; None when it holds none."""
    try:
        response: object = _decode_response(text)
    except (ValueError, RecursionError):
        return None
    return cast(dict[str, Any], response) if isinstance(response, dict) else None


def _history_of(fields: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """The unit and recorded history list of a current `run_inputs` line; None for any other line."""
    payload = _current_payload(fields, RunInputs)
    if payload is None:
        return None
    unit, inputs = payload.get("unit_id"), payload.get("inputs")
    history = cast(dict[str, Any], inputs).get("history") if isinstance(inputs, dict) else None
    if not isinstance(unit, str) or not isinstance(history, list):
        return None
    return unit, cast(list[Any], history)


class _Run:
    """The responses of the current run of one unit's pinned responses and histories: all either side holds.

    Only a current `model_call` pin line that did not fail, or a `run_inputs` line holding a history, belongs to a
    run: one of another unit ends it, any other line is passed over (so a reader of one unit's lines finds what a
    reader of the whole file finds). A pin's response is read only once a history refers to one: a replay's load
    of a file without references parses no response twice.
    """

    def __init__(self, stamped: tuple[str, ...]) -> None:
        self.stamped = stamped
        self.unit: str | None = None
        self.responses: Responses = {}
        self.pending: list[str] = []

    def of(self, unit: str) -> None:
        """Start a run of `unit`'s lines unless this is one."""
        if unit != self.unit:
            self.responses = {}
            self.pending = []
            self.unit = unit

    def hold(self, unit: str, text: str) -> None:
        """Hold a pin's response text, read when a reference is looked up."""
        self.of(unit)
        self.pending.append(text)

    def find(self, digest: str) -> dict[str, Any] | None:
        """The response of `digest` the run's pins hold (two of one digest differ in stamped fields alone)."""
        if digest not in self.responses and self.pending:
            for text in self.pending:
                response = _response_of(text)
                if response is not None:
                    self.responses[_digest(response, self.stamped)] = response
            self.pending = []
        return self.responses.get(digest)

    def empty(self) -> bool:
        return not self.responses and not self.pending


class ResponseReferences:
    """The writer's side: each run's history written with the responses its unit's pins hold referred to."""

    def __init__(self, stamped: tuple[str, ...]) -> None:
        self._stamped = stamped
        self._run = _Run(stamped)
        self.written = False
        """Whether a reference was written (the file is then version 4)."""

    def line(self, text: str) -> str:
        """`text`, the line as written otherwise, with its history's pinned responses referred to where any is."""
        # A line that is neither a model call's pin nor a run's inputs holds neither mark: it is not parsed.
        if _PIN_MARK not in text and _INPUTS_MARK not in text:
            return text
        fields = parse_object(text, where="<writing>", line=0)
        held = _pin_text(fields)
        if held is not None:
            self._run.hold(*held)
            return text
        found = _history_of(fields)
        if found is None:
            return text
        self._run.of(found[0])
        history = found[1]
        changed = False
        # Each message as it stands, the one before a reference included: what a reader has made whole by then.
        messages: list[object] = list(history)
        for at, message in enumerate(messages):
            if self._run.empty():
                break
            if not isinstance(message, dict):
                continue
            message = cast(dict[str, Any], message)
            digest = _digest(message, self._stamped)
            base = self._run.find(digest)
            if base is None:
                continue
            before = messages[at - 1] if at else None
            earlier = _fields(before)
            reference: dict[str, Any] = {RESPONSE_OF: digest}
            reference.update(
                (name, message[name])
                for name in self._stamped
                if name in message and earlier.get(name, _ABSENT) != message[name]
            )
            restored = _restored(base, reference, before, self._stamped)
            if stored_json_of_parsed(restored) != stored_json_of_parsed(message):
                continue
            history[at] = reference
            changed = True
        if not changed:
            return text
        self.written = True
        # `text` is the encoder's own writing of what it parsed back, so the rest of the line keeps its bytes.
        return encode_normalised(fields)


class ResponseResolver:
    """The reader's side: each run's history made whole again, in file order, holding one unit's responses."""

    def __init__(self, where: str, stamped: tuple[str, ...]) -> None:
        self._where = where
        self._stamped = stamped
        self._run = _Run(stamped)

    def resolve(self, number: int, fields: dict[str, Any]) -> None:
        """Make line `number`'s history whole in `fields`, in place, or refuse a reference to no response held."""
        if fields["type"] == _PIN_TYPE:
            held = _pin_text(fields)
            if held is not None:
                self._run.hold(*held)
            return
        found = _history_of(fields)
        if found is None:
            return
        self._run.of(found[0])
        history = found[1]
        for at, item in enumerate(history):
            if not isinstance(item, dict) or RESPONSE_OF not in item:
                continue
            reference = cast(dict[str, Any], item)
            digest = reference[RESPONSE_OF]
            if not reference.keys() - {RESPONSE_OF} <= set(self._stamped) or not isinstance(digest, str):
                self._refuse(number, f"{RESPONSE_OF} must name a response's digest and its stamped fields alone")
            base = self._run.find(digest)
            if base is None:
                self._refuse(
                    number,
                    f"{RESPONSE_OF} {digest} names no model response an earlier pin of its unit's lines holds"
                    " (a line deleted or moved?)",
                )
            history[at] = _restored(base, reference, history[at - 1] if at else None, self._stamped)

    def _refuse(self, number: int, message: str) -> NoReturn:
        raise RecordingError(message, path=self._where, line=number)
