"""What counts as the same model call: the call policy, and the pin key and fingerprint it yields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus.provider.keying.keys import key_of, walked
from anagrapheus.provider.keying.request import MODEL_CALL, RequestKeys, request_material
from anagrapheus.provider.provenance import DEFAULT_CALL_POLICY
from anagrapheus.timeline.canonical import JSONValue

__all__ = ["MODEL_CALL", "CallPin", "CallPolicy", "SemanticCallPolicy", "call_pin"]


@runtime_checkable
class CallPolicy(Protocol):
    """Decides what goes into a model call's key: two calls with equal material are the same call.

    A policy class may declare `name: ClassVar[str]` and `version: ClassVar[int]`; recordings stamp
    them as provenance and refuse to load under another policy (see `call_policy_identity`). A policy
    with a true `keep_values` attribute gets fingerprints that keep the start of each field's value.
    """

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        """Return the key material of one model request, as JSON-shaped values."""
        ...


@dataclass(frozen=True, slots=True)
class CallPin:
    """The key of one model call, and a compact per-field fingerprint of its material for divergence reports."""

    key: str
    """`p1:model_call:<sha256 of the material's canonical JSON>`."""
    fingerprint: Mapping[str, str]
    """Field name (`settings.temperature`, `tools.search`, `messages[3]`) to a short digest; never content."""


def call_pin(
    policy: CallPolicy,
    messages: Sequence[ModelMessage],
    settings: ModelSettings | None,
    parameters: ModelRequestParameters,
    *,
    model_id: str,
) -> CallPin:
    """Key a model request under `policy`: `pin_key("model_call", material)` and `fingerprint_of(material)`.

    Both come from the one material the policy returns, as the walk of key material writes it (a
    `SemanticCallPolicy` keys its own material without walking the messages it walked before). The
    fingerprint is digested when first read: a replay that hits never reads it.
    """
    if isinstance(policy, SemanticCallPolicy):
        return policy.pin(messages, settings, parameters, model_id=model_id)
    material = policy.material(messages, settings, parameters, model_id=model_id)
    return _walked_pin(policy, material)


def _walked_pin(policy: object, material: Mapping[str, object]) -> CallPin:
    """The pin of a policy's material, walked as every key's material is."""
    # Walked first, then keyed: written in the order it runs.
    material = walked(material)
    return CallPin(*key_of(MODEL_CALL, material, values=getattr(policy, "keep_values", False) is True))


class SemanticCallPolicy:
    """The default policy: keeps what the model is told and drawn under, drops what differs between two runs.

    Material: `model` (the model id), `settings` (effective settings without delivery-only and session
    entries), `tools` (function tools by name), `output` (mode, schema, output tools, ...), `instructions`,
    `native_tools`, `parameters` (any other request parameter) and `messages` (each message's semantic content,
    tool-call ids replaced by their order of first appearance). See docs/how-to/call-policy.md.

    `keep_values=True` keeps, beside each field's digest, the start of its value (redacted), so a
    `PinMiss` shows what a moved field held and holds now. It changes no key; it puts prompt text in
    the log and in recordings, which is why it is off by default.
    """

    __slots__ = ("_keys", "keep_values")

    name: ClassVar[str] = DEFAULT_CALL_POLICY[0]
    """The policy's name in a recording's provenance."""
    version: ClassVar[int] = DEFAULT_CALL_POLICY[1]
    """Bumped whenever what this policy keys changes, so recordings keyed by the old one are refused, not missed."""

    def __init__(self, *, keep_values: bool = False) -> None:
        self.keep_values = keep_values
        """Keep the start of each field's value in the fingerprint, for divergence reports (opt-in)."""
        # This policy's own material is keyed by the kept history; a subclass's own `material` is walked whole.
        own = type(self).material is SemanticCallPolicy.material
        self._keys = RequestKeys() if own else None

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        """Return the key material of one model request, as canonical JSON values."""
        return request_material(messages, settings, parameters, model_id=model_id)

    def pin(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> CallPin:
        """`call_pin` under this policy: a conversation's messages walked once, however many requests re-send them."""
        keys: RequestKeys | None = getattr(self, "_keys", None)  # (unset by a subclass that skips __init__)
        if keys is None:
            return _walked_pin(self, self.material(messages, settings, parameters, model_id=model_id))
        values = self.keep_values is True
        return CallPin(*keys.key(messages, settings, parameters, model_id=model_id, values=values))
