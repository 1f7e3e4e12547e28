"""The default policy's material of a model request, and its key: one pass, walking only the messages not kept.

A request visits each room of the key path once: its settings are reduced (`settings`), then the kept history
(`history`) decides whether its conversation is kept and has the walk (`material`) read, in one pass, the messages
it does not hold and then the rest of the request; the key is written from the hash state it returns, or, for a
conversation not kept, from the material (`keys`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus.provider.keying.history import KeyedHistory
from anagrapheus.provider.keying.material import walk_request
from anagrapheus.provider.keying.settings import reduced_settings
from anagrapheus.timeline.canonical import JSONValue, digest_key
from anagrapheus.timeline.fingerprint import DeferredFingerprint

__all__ = ["MODEL_CALL", "RequestKeys", "request_material"]

MODEL_CALL = "model_call"
"""The pin kind of a model request."""

# `digest_key(MODEL_CALL, digest)` is this prefix and the digest: the kind is checked once, here, not per request.
_KEY_PREFIX = digest_key(MODEL_CALL, "")


def request_material(
    messages: Sequence[ModelMessage],
    settings: ModelSettings | None,
    parameters: ModelRequestParameters,
    *,
    model_id: str,
) -> dict[str, JSONValue]:
    """The default policy's key material of one request, as canonical JSON values (see `SemanticCallPolicy`)."""
    _, walked, material = walk_request(messages, (), 0, (parameters, model_id, reduced_settings(settings)))
    material["messages"] = [each for each, _ in walked]
    return material


class RequestKeys:
    """Keys requests under the default policy, keeping each conversation's messages between its requests."""

    __slots__ = ("_history",)

    def __init__(self) -> None:
        # What earlier requests of each conversation walked, so a request walks only what is new or changed.
        self._history = KeyedHistory()

    def key(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
        values: bool,
    ) -> tuple[str, Mapping[str, str]]:
        """The key of a request (byte-identical to `key_of` its `request_material`) and its fingerprint."""
        digest, material = self._history.material(messages, (parameters, model_id, reduced_settings(settings)))
        return _KEY_PREFIX + digest, DeferredFingerprint(material, values=values)
