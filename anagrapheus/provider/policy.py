"""What counts as the same model call: the call policy, and the pin key and fingerprint it yields."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus.provider.policy_material import MaterialWalk, encode_canonical
from anagrapheus.provider.policy_settings import settings_material
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, pin_key
from anagrapheus.timeline.fingerprint import DIGEST_CHARS, bounded_fingerprint, digest_text, fingerprint_of

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
    """Decides what goes into a model call's key: two calls with equal material are the same call."""

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
    fingerprint: dict[str, str]
    """Field name (`settings.temperature`, `tools.search`, `messages[3]`) to a short digest; never content."""


def call_pin(
    policy: CallPolicy,
    messages: Sequence[ModelMessage],
    settings: ModelSettings | None,
    parameters: ModelRequestParameters,
    *,
    model_id: str,
) -> CallPin:
    """Key a model request under `policy`: `pin_key("model_call", material)` and `fingerprint_of(material)`."""
    if isinstance(policy, SemanticCallPolicy) and type(policy).material is SemanticCallPolicy.material:
        return policy.pin(messages, settings, parameters, model_id=model_id)
    material = policy.material(messages, settings, parameters, model_id=model_id)
    return CallPin(key=pin_key(MODEL_CALL, material), fingerprint=fingerprint_of(material))


class SemanticCallPolicy:
    """The default policy: keeps what the model is told and drawn under, drops what differs between two runs.

    Material: `model` (the model id), `settings` (effective settings without delivery-only and session
    entries), `tools` (function tools by name), `output` (mode, schema, output tools, ...), `instructions`,
    `native_tools`, `parameters` (any other request parameter) and `messages` (each message's semantic content,
    tool-call ids replaced by their order of first appearance). See docs/how-to/call-policy.md.
    """

    __slots__ = ()

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        """Return the key material of one model request."""
        head, history = self._walk(messages, settings, parameters, model_id=model_id)
        head["messages"] = [json.loads(text) for text in history]
        return head

    def pin(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> CallPin:
        """Return exactly `call_pin(self, ...)`, encoding each leaf of the material once instead of three times."""
        head, history = self._walk(messages, settings, parameters, model_id=model_id)
        # Canonical JSON of a dict is its sorted "key":value pairs, so the text of the whole is assembled from the
        # text of the fingerprint's leaves (two levels down), each written and digested exactly once.
        fields: dict[str, str] = {}
        pairs: list[str] = []
        for name in sorted([*head, "messages"]):
            if name == "messages":
                if history:
                    sha256 = hashlib.sha256
                    digests = [sha256(leaf.encode()).hexdigest()[:DIGEST_CHARS] for leaf in history]
                    fields.update(zip(_message_fields(len(history)), digests, strict=False))
                    text = "[" + ",".join(history) + "]"
                else:
                    text = "[]"
                    fields[name] = digest_text(text)
                pairs.append(f'"messages":{text}')
                continue
            value = head[name]
            if isinstance(value, dict) and value:
                inner: list[str] = []
                entries = cast(dict[str, Any], value)
                for sub in sorted(entries):
                    leaf = encode_canonical(entries[sub])
                    fields[f"{name}.{sub}"] = digest_text(leaf)
                    inner.append(f"{encode_canonical(sub)}:{leaf}")
                text = "{" + ",".join(inner) + "}"
            elif isinstance(value, list) and value:
                leaves = [encode_canonical(item) for item in cast(list[Any], value)]
                for index, leaf in enumerate(leaves):
                    fields[f"{name}[{index}]"] = digest_text(leaf)
                text = "[" + ",".join(leaves) + "]"
            else:
                text = encode_canonical(value)  # pyright: ignore[reportUnknownArgumentType]
                fields[name] = digest_text(text)
            pairs.append(f"{encode_canonical(name)}:{text}")
        whole = "{" + ",".join(pairs) + "}"
        key = f"{KEY_SCHEME}:{MODEL_CALL}:{hashlib.sha256(whole.encode()).hexdigest()}"
        return CallPin(key=key, fingerprint=bounded_fingerprint(fields))

    def _walk(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> tuple[dict[str, Any], list[str]]:
        """Walk one request: the material without its messages, and each message's canonical JSON."""
        walk = MaterialWalk()
        # Messages first, so tool-call ids are numbered in the order the conversation shows them.
        history = walk.texts(messages, at="$.messages")
        return self._head(walk, settings, parameters, model_id=model_id), history

    def _head(
        self,
        walk: MaterialWalk,
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        rest: dict[str, Any] = walk.value(parameters, at="$.parameters")
        rest.pop("$type", None)
        output: dict[str, Any] = {}
        for name, short in _OUTPUT_FIELDS.items():
            if name in rest:
                output[short] = rest.pop(name)
        if "tools" in output:
            output["tools"] = _by_name(output["tools"])
        head: dict[str, Any] = {
            "model": walk.value(model_id, at="$.model"),
            "settings": settings_material(settings, walk),
            "tools": _by_name(rest.pop("function_tools", [])),
            "output": output,
        }
        for name, top in (("instruction_parts", "instructions"), ("native_tools", "native_tools")):
            if name in rest:
                head[top] = rest.pop(name)
        if rest:
            head["parameters"] = rest
        return head


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


_message_names: tuple[str, ...] = ()


def _message_fields(count: int) -> tuple[str, ...]:
    """The fingerprint's names for at least `count` messages, made once rather than on every request."""
    global _message_names
    names = _message_names
    if len(names) < count:
        # Built whole and then rebound, so a thread racing this one never sees a half-made tuple.
        names = tuple(f"messages[{index}]" for index in range(max(count, 2 * len(names))))
        _message_names = names
    return names
