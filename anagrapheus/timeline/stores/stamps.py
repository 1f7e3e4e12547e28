"""How every store stamps envelopes: seq after the log's last, one time per append as ISO text, event ids."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import cast

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent
from anagrapheus.timeline.ordered import parsed_json

__all__ = ["iso_timestamp", "stamp", "stamped", "utc_now"]


def utc_now() -> datetime:
    """Return the wall clock's time, timezone-aware in UTC."""
    return datetime.now(UTC)


def iso_timestamp(moment: datetime) -> str:
    """Write a moment as the log stores it: UTC, microseconds, a trailing `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


_strict = json.JSONDecoder(parse_constant=_refuse_constant).decode

_DEFAULT_RECURSION = 1000
"""Python's default recursion limit: `json` reads any nesting pydantic-core reads below it, short of 800 frames deep."""


def _object_payload(payload: object) -> bool:
    """Whether `payload` is JSON text of an object, as `_strict` reads it; raises as `_strict` does where it is not.

    Read by `parsed_json` (pydantic-core first, about half the time, its NaN and infinities refused; `_strict`
    wherever it refuses, accepting or raising as it always did). With Python's recursion limit set lower than its
    default, `_strict` alone reads: it would refuse nesting the parser reads.
    """
    if type(payload) is str and sys.getrecursionlimit() >= _DEFAULT_RECURSION:
        return isinstance(parsed_json(payload, loads=_strict, allow_inf_nan=False), dict)
    return isinstance(_strict(cast(str, payload)), dict)


def _check(event: PendingEvent, index: int) -> None:
    """Refuse an event the recording reader would refuse: the door is the append, not the later read."""
    # Typed, but a caller's event may hold anything at run time.
    version, namespace, type_name = cast(
        "tuple[object, object, object]", (event.schema_version, event.namespace, event.type)
    )
    problem = None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        problem = f"schema_version must be an integer >= 1, not {version!r}"
    elif not (isinstance(namespace, str) and namespace and isinstance(type_name, str) and type_name):
        problem = "namespace and type must be non-empty strings"
    else:
        try:
            is_object = _object_payload(event.payload)
        except (TypeError, ValueError, RecursionError) as e:
            problem = f"payload is not JSON ({e})"
        else:
            if not is_object:
                problem = "payload must be a JSON object"
    if problem is not None:
        raise UsageError(f"event {index} ({event.namespace}:{event.type}) cannot be appended: {problem}")


def stamp(clock: Callable[[], datetime]) -> str:
    """Read an injected clock for an envelope's `created_at`, refusing a naive time."""
    now = clock()
    if now.tzinfo is None:
        raise UsageError("the store's clock must return timezone-aware datetimes")
    return iso_timestamp(now)


def stamped(
    events: Sequence[PendingEvent], *, after: int, clock: Callable[[], datetime], new_event_id: Callable[[], str]
) -> list[StoredEvent]:
    """Envelope pending events as the next ones after seq `after`, with one time and an id each (unless preset).

    Each event is checked first, so a log never holds what its own reader would refuse.
    """
    for index, event in enumerate(events):
        _check(event, index)
    created_at = stamp(clock)
    return [
        StoredEvent(
            after + offset,
            event.event_id or new_event_id(),
            event.namespace,
            event.type,
            event.schema_version,
            event.causation_id,
            event.correlation_id,
            created_at,
            event.payload,
        )
        for offset, event in enumerate(events, start=1)
    ]
