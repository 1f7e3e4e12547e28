"""A UI adapter's request pinned whole: the ids and times pydantic-ai's AG-UI and Vercel AI adapters draw.

An adapter (`pydantic_ai.ui.ag_ui.AGUIAdapter`, `pydantic_ai.ui.vercel_ai.VercelAIAdapter`) wraps a run in
draws of its own that no capability sees: a fresh `uuid4` for every AG-UI message and reasoning id and every
Vercel AI message id, a `uuid7` for an AG-UI thread or run the client named none for, a wall-clock millisecond
on every AG-UI event, and the wall-clock timestamps of the history it converts from the browser's JSON, stamped
before the run starts. `dispatch_pinned` draws each of them through the run's resolver, keyed on its position
among the request's draws and on a digest of the request's body (and how many requests with that body came
before), so a replay of the same request answers each draw from its pin. The run's id is drawn the same way (unless
the app names one), so runs served at once replay each as itself whatever order they start in.

The adapter modules call `uuid4`, `uuid7` and `now_utc` by their module names, so those names are replaced,
once, by functions that draw through the request being dispatched (a context variable) and call the original
anywhere else: nothing changes outside `dispatch_pinned`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib
import threading
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic_ai.messages import ModelMessage

from anagrapheus.errors import PinResultError
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.events import new_uuid7
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver, as_resolver

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["UI_DRAW", "dispatch_pinned"]

UI_DRAW = "ui_draw"
"""The pin kind of one draw a UI adapter makes around a run: an id, an event's time, a converted history's times."""

T = TypeVar("T")

# Where the adapters call a draw by its module name: (module, name, what the draw is).
_DRAW_SITES = (
    ("pydantic_ai.ui._event_stream", "uuid4", "uuid"),
    ("pydantic_ai.ui.ag_ui._event_stream", "uuid4", "uuid"),
    ("pydantic_ai.ui.ag_ui._event_stream", "uuid7", "uuid"),
    ("pydantic_ai.ui.ag_ui._event_stream", "now_utc", "time"),
)


@dataclass
class _Requests:
    """Per digest of a request's body, how many requests with it were dispatched through one resolver."""

    seen: dict[str, int] = field(default_factory=dict[str, int])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def occurrence(self, digest: str) -> int:
        with self.lock:
            taken = self.seen.get(digest, 0)
            self.seen[digest] = taken + 1
            return taken


_REQUESTS: Attachment[_Requests] = Attachment("the UI requests dispatched through a resolver")


@dataclass
class _Draws:
    """One request's draws: each pinned under the request and its position among them."""

    resolver: Resolver
    request: str
    occurrence: int
    position: int = 0

    def draw(self, what: str, effect: Callable[[], JSONValue], interpret: Callable[[JSONValue], T]) -> T:
        """Draw `effect` through the resolver at the request's next position, read back by `interpret`."""
        position = self.position
        self.position += 1
        key = pin_key(UI_DRAW, {"request": self.request, "occurrence": self.occurrence, "draw": position, "what": what})
        return self.resolver.resolve(key, kind=UI_DRAW, effect=effect, interpret=interpret)


_ACTIVE: contextvars.ContextVar[_Draws | None] = contextvars.ContextVar("anagrapheus_ui_draws", default=None)
_INSTALLED: set[tuple[str, str]] = set()
_INSTALL_LOCK = threading.Lock()


def _as_uuid(raw: JSONValue) -> uuid.UUID:
    # A pin that is not a UUID string would hand the browser a wrong id with confidence; refuse it instead.
    try:
        return uuid.UUID(raw) if isinstance(raw, str) else _refused(raw, "a UUID string")
    except ValueError:
        return _refused(raw, "a UUID")


def _as_time(raw: JSONValue) -> datetime:
    try:
        return datetime.fromisoformat(raw) if isinstance(raw, str) else _refused(raw, "an ISO 8601 time")
    except ValueError:
        return _refused(raw, "an ISO 8601 time")


def _refused(raw: JSONValue, expected: str) -> Any:
    raise PinResultError(f"a {UI_DRAW} pin holds {raw!r}, not {expected}")


def _drawing(original: Callable[[], Any], what: str) -> Callable[[], Any]:
    """`original`, drawn through the request being dispatched, if any."""
    interpret: Callable[[JSONValue], Any] = _as_uuid if what == "uuid" else _as_time

    def draw() -> Any:
        draws = _ACTIVE.get()
        if draws is None:
            return original()
        return draws.draw(what, lambda: cast(JSONValue, _dumped(original())), interpret)

    draw.__wrapped__ = original  # pyright: ignore[reportFunctionMemberAccess]
    return draw


def _dumped(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _install() -> None:
    """Replace each draw site's name by one that draws through the request being dispatched (once per site)."""
    with _INSTALL_LOCK:
        for module_name, name, what in _DRAW_SITES:
            if (module_name, name) in _INSTALLED:
                continue
            module = importlib.import_module(module_name)
            # Every site is there from the floor (2.68) to the newest release verified (see the tests).
            setattr(module, name, _drawing(cast(Callable[[], Any], getattr(module, name)), what))
            _INSTALLED.add((module_name, name))


def _times(messages: list[ModelMessage]) -> Iterator[tuple[object, str]]:
    """Every timestamp field of `messages` and their parts, in order, as (holder, attribute)."""
    for message in messages:
        if getattr(message, "timestamp", None) is not None:
            yield message, "timestamp"
        for part in message.parts:
            if isinstance(getattr(part, "timestamp", None), datetime):
                yield part, "timestamp"


def _pin_history(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Pin the timestamps of a history converted from the browser's JSON, and write the pinned ones back."""
    draws = _ACTIVE.get()
    if draws is None:
        return messages
    held = list(_times(messages))
    stamped: list[JSONValue] = [cast(datetime, getattr(holder, name)).isoformat() for holder, name in held]

    def interpret(raw: JSONValue) -> list[datetime]:
        if not isinstance(raw, list) or len(raw) != len(held):
            return _refused(raw, f"a list of {len(held)} times (one per timestamp of the converted history)")
        return [_as_time(item) for item in raw]

    for (holder, name), pinned in zip(held, draws.draw("history", lambda: stamped, interpret), strict=True):
        setattr(holder, name, pinned)
    return messages


_PINNED_CLASSES: dict[type, type] = {}


def _pinned_class(adapter: type[T]) -> type[T]:
    """`adapter`, with the history it converts pinned (made once per adapter class)."""
    with _INSTALL_LOCK:
        made = _PINNED_CLASSES.get(adapter)
        if made is None:
            base = cast(Any, adapter)

            def load_messages(cls: type, *args: Any, **kwargs: Any) -> list[ModelMessage]:
                return _pin_history(base.load_messages.__func__(cls, *args, **kwargs))

            made = type(f"Pinned{adapter.__name__}", (adapter,), {"load_messages": classmethod(load_messages)})
            _PINNED_CLASSES[adapter] = made
        return cast(type[T], made)


async def dispatch_pinned(adapter: type[Any], request: Request, *, resolver: object, **options: Any) -> Response:
    """`adapter.dispatch_request(request, **options)`, with every id and time the adapter draws pinned.

    `resolver` is the one the agent's `Pinning` pins through (a `PinLedger` recording, a `ReplayPins` replaying):
    the adapter's draws join the run's pins, and a replay of the same request body answers them from there.
    `options` pass to `dispatch_request` as they are (`agent=` among them).
    """
    _install()
    resolved = as_resolver(cast(Any, resolver))
    body = await request.body()  # Starlette keeps it, so the adapter reads the same bytes
    digest = hashlib.sha256(body).hexdigest()
    requests = resolved.attached(_REQUESTS, _Requests)
    occurrence = 0 if requests is None else requests.occurrence(digest)
    draws = _Draws(resolved, f"{adapter.__module__}.{adapter.__qualname__}:{digest}", occurrence)
    token = _ACTIVE.set(draws)
    try:
        if options.get("run_id") is None:
            # The run named by the request, not by when it starts: runs from a browser's history have no prompt and no
            # earlier run ids to be placed by, so two chats served at once would take each other's place on replay.
            options["run_id"] = draws.draw("run_id", lambda: new_uuid7(), lambda raw: str(_as_uuid(raw)))
        response: Response = await _pinned_class(adapter).dispatch_request(request, **options)
    finally:
        _ACTIVE.reset(token)
    streamed = getattr(response, "body_iterator", None)
    if streamed is not None:
        # The stream runs after `dispatch_request` returns, as the server sends it: its draws are the request's too.
        response.body_iterator = _drawn_within(draws, streamed)  # pyright: ignore[reportAttributeAccessIssue]
    return response


async def _drawn_within(draws: _Draws, stream: AsyncGenerator[T]) -> AsyncIterator[T]:
    """`stream`, each step taken with the request's draws active."""
    async with contextlib.aclosing(stream):  # closing this closes the adapter's stream (and its run) with it
        while True:
            token = _ACTIVE.set(draws)
            try:
                chunk = await anext(stream)
            except StopAsyncIteration:
                return
            finally:
                _ACTIVE.reset(token)
            yield chunk
