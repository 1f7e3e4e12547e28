"""What counts as the same model call: the call policy, and the pin key and fingerprint it yields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus.provider.policy_history import KeyedHistory, split_material
from anagrapheus.provider.policy_material import MaterialWalk
from anagrapheus.provider.policy_settings import settings_material
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, canonical_value, pin_key
from anagrapheus.timeline.fingerprint import DeferredFingerprint
from anagrapheus.timeline.provenance import DEFAULT_CALL_POLICY

__all__ = ["MODEL_CALL", "CallPin", "CallPolicy", "SemanticCallPolicy", "call_pin"]

MODEL_CALL = "model_call"
"""The pin kind of a model request."""

_OUTPUT_FIELDS = {
    "output_mode": "mode",
    "output_object": "object",
    "output_tools": "tools",
    "prompted_output_template": "prompted_template",
    "allow_text_output": "allow_text",
    "allow_image_output": "allow_image",
}


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

    Both come from the one material the policy returns. The default policy's is canonical as its walk writes it;
    any other policy's is normalised here first. The fingerprint is digested when first read: a replay that
    hits never reads it.
    """
    semantic = isinstance(policy, SemanticCallPolicy) and type(policy).material is SemanticCallPolicy.material
    if semantic:
        default = cast(SemanticCallPolicy, policy)
        pinned = default._history_pin(messages, settings, parameters, model_id=model_id)  # pyright: ignore[reportPrivateUsage]
        if pinned is not None:
            return pinned
    material = policy.material(messages, settings, parameters, model_id=model_id)
    if not semantic:
        material = canonical_value(material)
    values = getattr(policy, "keep_values", False) is True
    return CallPin(
        key=pin_key(MODEL_CALL, material, normalised=True), fingerprint=DeferredFingerprint(material, values=values)
    )


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

    __slots__ = ("_history", "keep_values")

    name: ClassVar[str] = DEFAULT_CALL_POLICY[0]
    """The policy's name in a recording's provenance."""
    version: ClassVar[int] = DEFAULT_CALL_POLICY[1]
    """Bumped whenever what this policy keys changes, so recordings keyed by the old one are refused, not missed."""

    def __init__(self, *, keep_values: bool = False) -> None:
        self.keep_values = keep_values
        """Keep the start of each field's value in the fingerprint, for divergence reports (opt-in)."""
        # What earlier requests of each conversation walked, so a request walks only what is new or changed.
        self._history = KeyedHistory()

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        """Return the key material of one model request, as canonical JSON values."""
        walk = MaterialWalk()
        # Messages first, so tool-call ids are numbered in the order the conversation shows them.
        history = walk.value(list(messages), at="$.messages")
        material = self._rest(walk, settings, parameters, model_id=model_id)
        material["messages"] = history
        return material

    def _rest(
        self, walk: MaterialWalk, settings: ModelSettings | None, parameters: ModelRequestParameters, *, model_id: str
    ) -> dict[str, Any]:
        """The material of a request but its messages."""
        rest: dict[str, Any] = walk.value(parameters, at="$.parameters")
        rest.pop("$type", None)
        output: dict[str, Any] = {}
        for name, short in _OUTPUT_FIELDS.items():
            if name in rest:
                output[short] = rest.pop(name)
        if "tools" in output:
            output["tools"] = _by_name(output["tools"])
        material: dict[str, Any] = {
            "model": walk.value(model_id, at="$.model"),
            "settings": settings_material(settings, walk),
            "tools": _by_name(rest.pop("function_tools", [])),
            "output": output,
        }
        for name, top in (("instruction_parts", "instructions"), ("native_tools", "native_tools")):
            if name in rest:
                material[top] = rest.pop(name)
        if rest:
            material["parameters"] = rest
        return material

    def _history_pin(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> CallPin | None:
        """`call_pin` under this policy, walking only the messages earlier requests did not; None if it cannot."""
        if not self._history.worth_keeping(messages):
            return None
        probe = MaterialWalk()
        rest = self._rest(probe, settings, parameters, model_id=model_id)
        if probe.call_ids:
            # The rest numbered tool-call ids of its own, which would follow the messages': key it whole.
            return None
        head, tail = split_material(rest)
        digest, history = self._history.digest(messages, head, tail)
        rest["messages"] = history
        return CallPin(
            key=f"{KEY_SCHEME}:{MODEL_CALL}:{digest}",
            fingerprint=DeferredFingerprint(rest, values=self.keep_values is True),
        )


def _by_name(definitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Index tool definitions by name: the order they are listed in is not something the model is told."""
    indexed: dict[str, Any] = {}
    for definition in definitions:
        name = str(definition.get("name"))
        # pydantic-ai refuses duplicate names; should two slip through, neither may hide the other.
        while name in indexed:
            name += "#"
        indexed[name] = definition
    return indexed
