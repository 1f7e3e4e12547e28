"""A response's request time and duration (pydantic-ai 2.78's `request_timestamp`, `duration`), from pinned times.

pydantic-ai times each request from the wall clock where the model that answers it sends it. Where a run's times
are pinned from a clock (`Pinning(clock=...)`), a plain request's response is not pinned with that timing: both
are derived from times the run already pins, live and on replay alike. So is a pin that holds no timing (recorded
before pydantic-ai had these fields, or under such a clock). The request was sent at the pinned `timestamp` of the
request it answers, and took until the response's own `timestamp` (never less than zero); the wall clock is never
read. A response pinned without a clock, and a streamed one (whose response pydantic-ai builds anew from the live
stream each time it is read), keeps the timing pydantic-ai measured, and replays with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

__all__ = ["TIMED", "time_from_pins", "untime", "untimed"]

TIMED = "request_timestamp" in {field for field in ModelResponse.__dataclass_fields__}
"""Whether the installed pydantic-ai times responses (2.78 and later)."""


def untime(response: ModelResponse) -> None:
    """Drop the wall-clock timing pydantic-ai gave `response`, so its pin holds none."""
    if TIMED:
        response.request_timestamp = None  # pyright: ignore[reportAttributeAccessIssue]
        response.duration = None  # pyright: ignore[reportAttributeAccessIssue]


def untimed(response: ModelResponse) -> ModelResponse:
    """`response` without its timing (`untime`), returned: key material built on a response leaves timing out."""
    untime(response)
    return response


def time_from_pins(response: ModelResponse, messages: Sequence[ModelMessage], *, always: bool = False) -> None:
    """Give `response` the timing derived from the pinned times of `messages`, where it has none (or `always`)."""
    if not TIMED or not (always or response.request_timestamp is None):  # pyright: ignore[reportAttributeAccessIssue]
        return
    sent = next((m.timestamp for m in reversed(messages) if isinstance(m, ModelRequest)), None)
    if sent is None:
        sent = response.timestamp
    response.request_timestamp = sent  # pyright: ignore[reportAttributeAccessIssue]
    response.duration = max(response.timestamp - sent, timedelta(0))  # pyright: ignore[reportAttributeAccessIssue]
