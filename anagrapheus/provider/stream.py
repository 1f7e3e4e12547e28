"""PinnedStreamedResponse: a stream rebuilt from a pinned response, so streaming consumers work under replay."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from pydantic_ai.messages import ModelResponse, ModelResponseStreamEvent
from pydantic_ai.models import CompletedStreamedResponse, ModelRequestParameters
from typing_extensions import override

from anagrapheus.errors import PartialPin

__all__ = ["PARTIAL_STATES", "READ_ON_GRACE", "PinnedStreamedResponse"]

PARTIAL_STATES = frozenset({"incomplete", "interrupted"})
"""States of a response whose stream stopped before completing: the consumer stopped, it failed or was cancelled."""

READ_ON_GRACE = 1.0
"""Seconds a replayed stream that stopped early waits at its end before raising `PartialPin`.

A debouncing consumer (pydantic-ai's `stream_text()` groups deltas for 0.1 s by default) reads ahead of
what it hands on, and would meet the error before handing on what the live run read. Waiting lets it hand
that on, so a run that stopped there stops there again; only a consumer that reads on meets `PartialPin`.
"""


class PinnedStreamedResponse(CompletedStreamedResponse):
    """A stream that replays a pinned `ModelResponse`: each part arrives whole, as fast as the consumer reads.

    The provider's chunk boundaries and timing are not reproduced; everything built from the
    content (`run_stream()`, `run_stream_events()`, `iter()`, event stream handlers) is. A pinned
    response whose stream stopped before completing replays up to where it stopped, then raises
    `PartialPin` if the consumer reads on (after `READ_ON_GRACE`, so a debouncing consumer first hands
    on what it has), rather than pretending the stream ended there; one that failed raises its pinned
    failure there instead, as the live stream did.
    """

    def __init__(
        self,
        response: ModelResponse,
        *,
        key: str,
        model_request_parameters: ModelRequestParameters,
        failure: BaseException | None = None,
    ) -> None:
        super().__init__(response, model_request_parameters=model_request_parameters, replay_events=True)
        self.key = key
        """The key of the pin this stream replays."""
        self.failure = failure
        """The exception the recorded stream failed with after what it streamed, raised again at that point."""
        self._closed = anyio.Event()

    @override
    async def close_stream(self) -> None:
        """Close the replay (its request ended, or the consumer cancelled it): nothing reads past this point."""
        self._closed.set()

    @property
    def pinned(self) -> ModelResponse:
        """The pinned response this stream replays."""
        return self.response

    @override
    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        async for event in super()._get_event_iterator():
            yield event
        if self.failure is not None:
            # The recorded stream failed here: the consumer meets the same exception at the same point.
            raise self.failure
        if self.response.state in PARTIAL_STATES:
            # The recorded stream never reached its end: a consumer that got this far did not read on. One that
            # debounces has only asked ahead; the wait lets it hand on what it has, and stop as the live one did.
            with anyio.move_on_after(READ_ON_GRACE):
                await self._closed.wait()
            if self._closed.is_set():
                # The request is over: what asked ahead was a debouncer whose consumer stopped, and nobody reads on.
                return
            raise PartialPin(self.key, state=self.response.state)
