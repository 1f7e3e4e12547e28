"""Spans for pins: every resolve, commit and abandon reported through OpenTelemetry's API (no SDK needed).

A span is made only where a tracer provider is set (the user's, or logfire's); without one, opening a pin's span
costs one check of OpenTelemetry's global. Inside `answers_untraced()` a span whose pin was answered, not drawn,
is never ended, so never exported (`Pinning` no longer opens it: a replay's pins are spans, outcome `answered`).
"""

from __future__ import annotations

import traceback
import weakref
from collections.abc import Generator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Literal

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Span, StatusCode, use_span
from typing_extensions import override

from anagrapheus.timeline.scoped import scoped
from anagrapheus.timeline.secrets import SecretScanner

__all__ = [
    "KEY_CHARS",
    "Outcome",
    "PinSpan",
    "answers_untraced",
    "pin_span",
    "short_key",
    "spans_made",
    "traced_to",
    "unit_span",
]

Outcome = Literal["drawn", "answered", "reused", "missed", "failed"]
"""What became of one resolve: drawn live, answered from the log, reused from scratch, missed, or failed."""

KEY_CHARS = 12
"""Hex characters of a key's digest a span keeps: enough to find the pin, short enough to read."""

_NAMESPACE = "anagrapheus"
_ANSWERS: frozenset[str] = frozenset({"answered", "reused"})
_untraced_answers: ContextVar[bool] = ContextVar("anagrapheus_untraced_answers", default=False)
_provider: ContextVar[trace.TracerProvider | None] = ContextVar("anagrapheus_tracer_provider", default=None)


# Each provider's tracer, asked of it once: a pin's span is opened per resolve, and `get_tracer` builds a new
# tracer (with its instrumentation scope) on every call. Weak, so a provider a test made goes with it.
_TRACERS: weakref.WeakKeyDictionary[trace.TracerProvider, trace.Tracer] = weakref.WeakKeyDictionary()


def _tracer() -> trace.Tracer | None:
    """The tracer of `traced_to`'s provider or the global one, or None while none is set (the API's proxy)."""
    provider = _provider.get() or trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider):
        return None
    try:
        tracer = _TRACERS.get(provider)
        if tracer is None:
            tracer = _TRACERS[provider] = provider.get_tracer(_NAMESPACE)
    except TypeError:  # a provider that cannot be held weakly or hashed: asked each time, as before
        return provider.get_tracer(_NAMESPACE)
    return tracer


@contextmanager
def traced_to(provider: trace.TracerProvider) -> Generator[None]:
    """Within: pins report their spans to `provider` rather than to OpenTelemetry's global one."""
    with scoped(_provider, provider):
        yield


def short_key(key: str) -> str:
    """A key cut to its scheme, kind and the first `KEY_CHARS` of its digest."""
    head, colon, digest = key.rpartition(":")
    return f"{head}{colon}{digest[:KEY_CHARS]}" if colon else key[:KEY_CHARS]


@contextmanager
def answers_untraced() -> Generator[None]:
    """Within: the spans of pins answered (from the log or from scratch) are never ended, so never exported."""
    with scoped(_untraced_answers, True):
        yield


class PinSpan:
    """The span of one resolve, told its outcome by the resolver; a no-op without a tracer."""

    __slots__ = ("_span", "outcome")

    def __init__(self, span: Span | None) -> None:
        self._span = span
        self.outcome: Outcome | None = None

    def set(self, outcome: Outcome, *, attempts: int | None = None, moved: Sequence[str] = ()) -> None:
        """Say what became of the resolve (the last outcome set stands), its attempts and, on a miss, what moved."""
        self.outcome = outcome
        span = self._span
        if span is None:
            return
        span.set_attribute("anagrapheus.pin.outcome", outcome)
        if attempts is not None:
            span.set_attribute("anagrapheus.pin.attempts", attempts)
        if moved:
            span.set_attribute("anagrapheus.pin.moved", list(moved))


class _NoSpan(PinSpan):
    """The span of a resolve while no tracer provider is set: told its outcome, it keeps nothing."""

    __slots__ = ()

    @override
    def set(self, outcome: Outcome, *, attempts: int | None = None, moved: Sequence[str] = ()) -> None:
        """Keep nothing: no span is made."""


# One reusable context for every resolve while no provider is set: no generator, no span, nothing kept.
_UNTRACED: AbstractContextManager[PinSpan] = nullcontext(_NoSpan(None))


def spans_made() -> bool:
    """Whether a pin's span would be made now (a tracer provider is set): a replay answers a hit without one."""
    return _tracer() is not None


def pin_span(kind: str, key: str, unit_id: str | None, *, current: bool = True) -> AbstractContextManager[PinSpan]:
    """Open the span of one resolve of `key`; an exception that escapes it without an outcome marks it `failed`.

    `current=False` for a stream, whose body runs in its consumer's context: the span is not made current there.
    """
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    return _pin_span(tracer, kind, key, unit_id, current=current)


@contextmanager
def _pin_span(tracer: trace.Tracer, kind: str, key: str, unit_id: str | None, *, current: bool) -> Generator[PinSpan]:
    """The span of one resolve, ended as it closes unless it was an answer to leave out of traces."""
    attributes: dict[str, str] = {"anagrapheus.pin.kind": kind, "anagrapheus.pin.key": short_key(key)}
    if unit_id is not None:
        attributes["anagrapheus.unit.id"] = _redacted(unit_id)
    span = tracer.start_span(f"pin {kind}", attributes=attributes)
    pinned = PinSpan(span)
    try:
        if current:
            # Exceptions are recorded below, redacted: OpenTelemetry's own recording writes the message as it is.
            with use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield pinned
        else:
            yield pinned
    except BaseException as e:
        _record_redacted(span, e)
        # A draw that raised (its effect, a stream cut short, a write) failed; a reused pinned failure stays reused.
        if pinned.outcome in (None, "drawn"):
            pinned.set("failed")
        raise
    finally:
        # An answer replayed under a replay scope was already traced when it was drawn: leave it unended.
        if not (_untraced_answers.get() and pinned.outcome in _ANSWERS):
            span.end()


@contextmanager
def unit_span(action: Literal["commit", "abandon"], unit_id: str) -> Generator[Span | None]:
    """Open the span of a unit's commit or abandon; the caller sets `anagrapheus.unit.pins` on it."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        f"pins {action}",
        attributes={"anagrapheus.unit.id": _redacted(unit_id)},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as e:
            _record_redacted(span, e)
            raise


# Spans leave the process for a collector: no credential rides on one, in an attribute or an exception (issue #35).
_REDACTOR = SecretScanner().redactor()


def _redacted(text: str) -> str:
    return _REDACTOR.redact_text(text)


def _record_redacted(span: Span, error: BaseException) -> None:
    """Record `error` on `span`, its message and stack trace passed through the secret redactor."""
    said = _redacted(f"{type(error).__name__}: {error}")
    stack = _redacted("".join(traceback.format_exception(type(error), error, error.__traceback__)))
    span.record_exception(
        error,
        attributes={"exception.message": _redacted(str(error)), "exception.stacktrace": stack},
    )
    span.set_status(StatusCode.ERROR, said)
