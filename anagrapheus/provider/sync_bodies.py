"""A sync tool's body in pydantic-ai's worker thread: what it returned, even when the call awaiting it was cancelled.

pydantic-ai runs a sync tool function in a worker thread and awaits it. Cancelled meanwhile (a tool beside it raised),
the await ends at once, but the thread cannot be stopped: the body runs to its end, reaches the world, and what it
returned is dropped. Under `Pinning` the toolset's call is handed an executor of its own for the call
(`Agent.using_thread_executor`, pydantic-ai's public way to choose where sync callbacks run), which runs the body
where pydantic-ai would have (the app's executor, else anyio's worker threads) and keeps its outcome, so the
cancelled call can wait for it and pin it, as `pinned_tool` does with the body it runs itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

import anyio.to_thread
from pydantic_ai import Agent
from typing_extensions import override

from anagrapheus.provider.compat import sync_callback_threads

__all__ = ["BodyThreads", "Ran", "called_to_its_end", "runs_in_a_thread"]

P = ParamSpec("P")
R = TypeVar("R")

# The tasks that hand bodies to anyio's worker threads, held until their thread is done: the loop keeps only weak
# references to tasks, and one may outlive the call that started it (a body its cancelled call did not wait for).
_HANDING: set[asyncio.Task[None]] = set()


@dataclass(frozen=True, slots=True)
class Ran(Generic[R]):
    """What a tool call gave: its result, or the result of its sync body when the call was cancelled while it ran."""

    value: R
    """The call's result; when `cancelled`, the body's own return value."""
    cancelled: asyncio.CancelledError | None = None
    """The cancellation the call met while its body ran, for the caller to raise once the result is pinned."""


class BodyThreads(Executor):
    """Runs the sync callbacks pydantic-ai submits where it would have run them, keeping each one's outcome.

    Each `submit` returns a future the callback itself completes; pydantic-ai awaits it. A callback whose await is
    cancelled before it starts never runs (its future is cancelled, as a thread pool's queued job is); one already
    running runs to its end, and its future keeps what it returned.
    """

    def __init__(self, executor: Executor | None) -> None:
        self._executor = executor
        self.submitted: list[concurrent.futures.Future[Any]] = []
        """The futures of the callbacks submitted, in order."""

    @override
    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[R]:
        """Run `fn(*args, **kwargs)` on the app's executor, or in one of anyio's worker threads as pydantic-ai would."""
        outcome: concurrent.futures.Future[R] = concurrent.futures.Future()

        def job() -> None:
            if not outcome.set_running_or_notify_cancel():
                return  # its await was cancelled before it started: it never reaches the world
            try:
                value = fn(*args, **kwargs)
            except BaseException as error:  # a thread pool keeps whatever its job raised, for the awaiting task
                outcome.set_exception(error)
            else:
                outcome.set_result(value)

        def dropped(_: object) -> None:
            # The job was dropped unrun (the app's executor cancelled its queue as it shut down): so is the body,
            # which would otherwise be awaited for ever. A no-op once the job ran.
            outcome.cancel()

        if self._executor is not None:
            self._executor.submit(job).add_done_callback(dropped)
        else:
            # pydantic-ai's own default: anyio's worker threads, under anyio's thread limiter.
            handing = asyncio.get_running_loop().create_task(anyio.to_thread.run_sync(job))
            _HANDING.add(handing)
            handing.add_done_callback(_HANDING.discard)
            handing.add_done_callback(dropped)
        self.submitted.append(outcome)
        return outcome


def runs_in_a_thread(function: Callable[..., Any] | None) -> bool:
    """Whether pydantic-ai runs `function` in a worker thread: a plain (not async) function, as pydantic-ai tells."""
    if function is None:
        return False
    inner: object = function
    while isinstance(inner, functools.partial):
        inner = cast("functools.partial[Any]", inner).func
    # A callable object whose `__call__` is a coroutine function is async too.
    called: object = getattr(inner, "__call__", None)  # noqa: B004 (its method is read, not whether it has one)
    return not (inspect.iscoroutinefunction(inner) or inspect.iscoroutinefunction(called))


async def called_to_its_end(call: Callable[[], Awaitable[Any]], *, sync_body: bool) -> Ran[Any]:
    """Await `call()`; cancelled while the sync body it handed a worker thread runs, wait for the body's end.

    The wait does not hold the event loop. A body that returned gives `Ran(value, cancelled=...)`: its value is what
    the world answered, for the caller to pin before it raises the cancellation. A body that raised, one that never
    started, or a call that handed over no body (or more than one) lets the cancellation go on as it came.
    `sync_body=False` (an async tool), or a pydantic-ai that does not say where its threads run, awaits `call()` alone.
    """
    where = sync_callback_threads() if sync_body else None
    if where is None:
        return Ran(await call())
    threads = BodyThreads(where.executor)
    try:
        with Agent.using_thread_executor(threads):
            return Ran(await call())
    except asyncio.CancelledError as cancelled:
        if len(threads.submitted) != 1:
            raise
        waiting = asyncio.wrap_future(threads.submitted[0])
        while not waiting.done():
            # A cancellation delivered again (an anyio scope delivers it at every await) waits on: the body still runs.
            with suppress(asyncio.CancelledError):
                await asyncio.wait({waiting})
        # Read through the awaited future, so a body's exception is never reported as one nobody retrieved.
        if waiting.cancelled() or waiting.exception() is not None:
            raise
        value = waiting.result()
        if inspect.isawaitable(value):
            # A plain function that returned an awaitable, which pydantic-ai would have awaited: nothing came back.
            raise
        return Ran(value, cancelled=cancelled)
