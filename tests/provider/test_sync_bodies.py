"""A sync body handed to pydantic-ai's worker thread, its call cancelled: what comes back, and when nothing does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai._utils import run_in_executor  # pyright: ignore[reportPrivateUsage]

from anagrapheus.provider.sync_bodies import Ran, called_to_its_end


class Later:
    """An awaitable that is not a coroutine (a plain function may return one; pydantic-ai then awaits it)."""

    def __await__(self) -> Generator[Any, None, str]:
        return "later"
        yield  # pragma: no cover - makes this a generator


async def cancelled_midway(call: Any, started: threading.Event, release: threading.Event) -> Ran[Any]:
    """Run `called_to_its_end(call)`, cancel it once the body started, then let the body go; return what it gave."""
    task = asyncio.ensure_future(called_to_its_end(call, sync_body=True))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel("a tool beside it raised")
    await asyncio.sleep(0.01)
    assert not task.done()  # waiting for the body, which still runs
    release.set()
    return await task


def test_a_body_cancelled_midway_gives_what_it_returned_and_the_cancellation() -> None:
    started, release = threading.Event(), threading.Event()

    def tide() -> str:
        started.set()
        release.wait(10)
        return "high tide at Brest 14:05"

    ran = asyncio.run(cancelled_midway(lambda: run_in_executor(tide), started, release))
    assert ran.value == "high tide at Brest 14:05"
    assert isinstance(ran.cancelled, asyncio.CancelledError) and ran.cancelled.args == ("a tool beside it raised",)


def test_a_call_not_cancelled_gives_its_result_or_its_error_as_it_would() -> None:
    def tide() -> str:
        return "high tide at Brest 14:05"

    def dropped() -> str:
        raise ConnectionError("the tide service dropped")

    assert asyncio.run(called_to_its_end(lambda: run_in_executor(tide), sync_body=True)) == Ran(
        "high tide at Brest 14:05"
    )
    with pytest.raises(ConnectionError, match="dropped"):
        asyncio.run(called_to_its_end(lambda: run_in_executor(dropped), sync_body=True))


def test_a_body_that_raised_after_its_call_was_cancelled_gives_the_cancellation() -> None:
    started, release = threading.Event(), threading.Event()

    def tide() -> str:
        started.set()
        release.wait(10)
        raise ConnectionError("the tide service dropped")

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_midway(lambda: run_in_executor(tide), started, release))


def test_a_plain_function_that_returned_an_awaitable_gives_the_cancellation() -> None:
    # pydantic-ai would have awaited what it returned, on the cancelled call: nothing came back to pin.
    started, release = threading.Event(), threading.Event()

    def tide() -> Later:
        started.set()
        release.wait(10)
        return Later()

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_midway(lambda: run_in_executor(tide), started, release))


def test_a_body_whose_call_was_cancelled_before_it_started_never_runs() -> None:
    # The app's one worker is busy, so the body waits in its queue: cancelled there, it is dropped, as a pool drops it.
    busy, ran = threading.Event(), threading.Event()

    def tide() -> str:
        ran.set()
        return "high tide at Brest 14:05"

    async def cancelled_queued(executor: ThreadPoolExecutor) -> None:
        with Agent.using_thread_executor(executor):
            task = asyncio.ensure_future(called_to_its_end(lambda: run_in_executor(tide), sync_body=True))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    executor = ThreadPoolExecutor(max_workers=1)
    executor.submit(busy.wait, 10)
    try:
        asyncio.run(cancelled_queued(executor))
    finally:
        busy.set()
        executor.shutdown(wait=True)
    assert not ran.is_set()


def test_a_call_that_handed_over_two_bodies_lets_its_cancellation_go_on_at_once() -> None:
    # Which of them is the tool's body cannot be told: nothing is waited for, nothing given back.
    started, release = threading.Barrier(3), threading.Event()

    def tide() -> str:
        started.wait(10)
        release.wait(10)
        return "high tide at Brest 14:05"

    async def both() -> list[str]:
        return list(await asyncio.gather(run_in_executor(tide), run_in_executor(tide)))

    async def cancelled() -> None:
        task = asyncio.ensure_future(called_to_its_end(both, sync_body=True))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            release.set()

    asyncio.run(cancelled())


def test_an_async_tool_is_awaited_alone() -> None:
    async def tide() -> str:
        await asyncio.sleep(10)
        return "never"

    async def cancelled() -> None:
        task = asyncio.ensure_future(called_to_its_end(tide, sync_body=False))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())


def test_a_body_the_apps_executor_dropped_as_it_shut_down_is_not_awaited_for_ever() -> None:
    busy = threading.Event()

    def tide() -> str:
        return "high tide at Brest 14:05"

    async def dropped(executor: ThreadPoolExecutor) -> None:
        with Agent.using_thread_executor(executor):
            task = asyncio.ensure_future(called_to_its_end(lambda: run_in_executor(tide), sync_body=True))
            await asyncio.sleep(0.05)
            executor.shutdown(wait=False, cancel_futures=True)
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)

    executor = ThreadPoolExecutor(max_workers=1)
    executor.submit(busy.wait, 10)
    try:
        asyncio.run(dropped(executor))
    finally:
        busy.set()
        executor.shutdown(wait=True)
