"""PinnedStreamedResponse: a stream rebuilt from a pinned response, so streaming consumers work under replay."""

from __future__ import annotations

from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import CompletedStreamedResponse, ModelRequestParameters

__all__ = ["PinnedStreamedResponse"]


class PinnedStreamedResponse(CompletedStreamedResponse):
    """A stream that replays a pinned `ModelResponse`: each part arrives whole, as fast as the consumer reads.

    The provider's chunk boundaries and timing are not reproduced; everything built from the
    content (`run_stream()`, `run_stream_events()`, `iter()`, event stream handlers) is.
    """

    def __init__(self, response: ModelResponse, *, model_request_parameters: ModelRequestParameters) -> None:
        super().__init__(response, model_request_parameters=model_request_parameters, replay_events=True)

    @property
    def pinned(self) -> ModelResponse:
        """The pinned response this stream replays."""
        return self.response
