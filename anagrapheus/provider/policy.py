"""What counts as the same model call: the call policy, and the pin key and fingerprint it yields."""

from __future__ import annotations

import hashlib
import json
from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from json.encoder import encode_basestring as _encode_text
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

from pydantic_ai.messages import CachePoint, ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from anagrapheus.provider.policy_material import FieldText, MaterialWalk, encode_canonical, key_string
from anagrapheus.provider.policy_settings import settings_material
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, pin_key
from anagrapheus.timeline.fingerprint import (
    DIGEST_CHARS,
    bounded_fingerprint,
    digest_text,
    fingerprint_of,
    value_entries,
)
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
    """Key a model request under `policy`: `pin_key("model_call", material)` and `fingerprint_of(material)`."""
    if isinstance(policy, SemanticCallPolicy) and type(policy).material is SemanticCallPolicy.material:
        return policy.pin(messages, settings, parameters, model_id=model_id)
    material = policy.material(messages, settings, parameters, model_id=model_id)
    values = getattr(policy, "keep_values", False) is True
    return CallPin(key=pin_key(MODEL_CALL, material), fingerprint=fingerprint_of(material, values=values))


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

    __slots__ = ("keep_values",)

    name: ClassVar[str] = DEFAULT_CALL_POLICY[0]
    """The policy's name in a recording's provenance."""
    version: ClassVar[int] = DEFAULT_CALL_POLICY[1]
    """Bumped whenever what this policy keys changes, so recordings keyed by the old one are refused, not missed."""

    def __init__(self, *, keep_values: bool = False) -> None:
        self.keep_values = keep_values
        """Keep the start of each field's value in the fingerprint, for divergence reports (opt-in)."""

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
        """Return exactly `call_pin(self, ...)`, writing each leaf of the material once, as text."""
        walk = MaterialWalk()
        # Messages first, so tool-call ids are numbered in the order the conversation shows them.
        history = walk.texts(messages, at="$.messages")
        head = self._head_texts(walk, settings, parameters, model_id=model_id)
        # Canonical JSON of a dict is its sorted "key":value pairs, so the text of the whole is assembled from the
        # text of the fingerprint's leaves (two levels down), each written exactly once.
        leaves: list[tuple[str, str]] = []
        split = 0
        pairs: list[str] = []
        for name in sorted([*head, "messages"]):
            if name == "messages":
                if history:
                    text = "[" + ",".join(history) + "]"
                else:
                    text = "[]"
                    leaves.append((name, text))
                split = len(leaves)
                pairs.append(f'"messages":{text}')
                continue
            value = head[name]
            if type(value) is dict:
                inner: list[str] = []
                for sub in sorted(value):
                    leaf = value[sub]
                    leaves.append((f"{name}.{sub}", leaf))
                    inner.append(f"{_encode_text(sub) if type(sub) is str else encode_canonical(sub)}:{leaf}")
                text = "{" + ",".join(inner) + "}"
            elif type(value) is list:
                leaves.extend((f"{name}[{index}]", leaf) for index, leaf in enumerate(value))
                text = "[" + ",".join(value) + "]"
            else:
                text = cast(str, value)
                leaves.append((name, text))
            pairs.append(f"{_encode_text(name)}:{text}")
        whole = "{" + ",".join(pairs) + "}"
        key = f"{KEY_SCHEME}:{MODEL_CALL}:{hashlib.sha256(whole.encode()).hexdigest()}"
        return CallPin(
            key=key, fingerprint=_Fingerprint(leaves[:split], history, leaves[split:], values=self.keep_values)
        )

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

    def _head_texts(
        self,
        walk: MaterialWalk,
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, _Top]:
        """`_head` as the text of each fingerprint leaf, written straight from the objects (no JSON round trip)."""
        written = walk.fields(parameters, at="$.parameters")
        if written is None:
            generic = self._head(walk, settings, parameters, model_id=model_id)
            return {name: _top_of(value) for name, value in generic.items()}
        rest = dict(written)
        output: dict[str, str] = {}
        for name, short in _OUTPUT_FIELDS.items():
            if name in rest:
                field = rest.pop(name)
                output[short] = _top_text(_by_name_texts(field, parameters.output_tools) if short == "tools" else field)
        head: dict[str, _Top] = {
            "model": walk.text(model_id, at="$.model"),
            "settings": _top_of(settings_material(settings, walk)),
            "tools": _by_name_texts(rest.pop("function_tools", []), parameters.function_tools) or "{}",
            "output": output or "{}",
        }
        for name, top in (("instruction_parts", "instructions"), ("native_tools", "native_tools")):
            if name in rest:
                head[top] = _top_items(rest.pop(name))
        if rest:
            head["parameters"] = {name: _joined(field) for name, field in rest.items()}
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


_Top = str | dict[str, str] | list[str]
"""A top-level field of the material as text: a leaf (str), or its non-empty entries' or items' leaf texts."""


def _joined(field: FieldText) -> str:
    return field if type(field) is str else "[" + ",".join(field) + "]"


def _top_of(value: JSONValue) -> _Top:
    """Split an already-canonical value into leaf texts the way `fingerprint_of` does, two levels down."""
    if isinstance(value, dict):
        return {sub: encode_canonical(item) for sub, item in value.items()} if value else "{}"
    if isinstance(value, list) and value:
        return [encode_canonical(item) for item in value]
    return encode_canonical(value)


def _top_items(field: FieldText) -> _Top:
    if type(field) is list:
        return field if field else "[]"
    text = cast(str, field)
    # Only a value that is not a list or tuple (a list subclass, say) is written whole: split it generically.
    return _top_of(json.loads(text)) if text[:1] in ("[", "{") else text


def _top_text(top: _Top) -> str:
    """The canonical JSON text of a top-level field given as leaf texts."""
    if type(top) is dict:
        return "{" + ",".join(f"{_encode_text(sub)}:{top[sub]}" for sub in sorted(top)) + "}"
    return _joined(cast(FieldText, top))


def _by_name_texts(field: FieldText, definitions: object) -> dict[str, str]:
    """`_by_name` over the written tool definitions: each definition's text under its (deduplicated) name."""
    if type(field) is list and type(definitions) is list:
        kept = [item for item in cast(list[object], definitions) if type(item) is not CachePoint]
        if len(kept) == len(field) and all(type(item) is ToolDefinition and type(item.name) is str for item in kept):
            indexed: dict[str, str] = {}
            for item, text in zip(cast(list[ToolDefinition], kept), field, strict=True):
                # The name as the walk wrote it into the definition's text, which `_by_name` reads back.
                name = key_string(item.name)
                while name in indexed:
                    name += "#"
                indexed[name] = text
            return indexed
    # Anything unusual (a tuple of definitions, a subclass) is read back from its text and indexed generically.
    return {name: encode_canonical(item) for name, item in _by_name(json.loads(_joined(field))).items()}


class _Fingerprint(Mapping[str, str]):
    """`fingerprint_of(material)`, digested on first read from the leaf texts the key was written from.

    A replay that hits never reads a fingerprint, so it never pays for one digest a leaf. The texts are
    immutable strings written when the key was, so a message changed afterwards cannot change either.
    """

    __slots__ = ("_digests", "_head", "_history", "_tail", "_values")

    def __init__(
        self, head: list[tuple[str, str]], history: list[str], tail: list[tuple[str, str]], *, values: bool = False
    ) -> None:
        self._head, self._history, self._tail = head, history, tail
        self._values = values
        self._digests: dict[str, str] | None = None

    def _fields(self) -> dict[str, str]:
        digests = self._digests
        if digests is None:
            sha256 = hashlib.sha256
            fields = {name: digest_text(text) for name, text in self._head}
            history = [sha256(leaf.encode()).hexdigest()[:DIGEST_CHARS] for leaf in self._history]
            fields.update(zip(_message_fields(len(history)), history, strict=False))
            fields.update((name, digest_text(text)) for name, text in self._tail)
            digests = bounded_fingerprint(fields)
            if self._values:
                texts = dict(self._head)
                texts.update(zip(_message_fields(len(self._history)), self._history, strict=False))
                texts.update(self._tail)
                digests.update(value_entries((name, texts[name]) for name in list(digests) if name in texts))
            # Two threads may both digest; they compute the same dict and either may be kept.
            self._digests = digests
        return digests

    def __getitem__(self, name: str) -> str:
        return self._fields()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields())

    def __len__(self) -> int:
        return len(self._fields())

    def __contains__(self, name: object) -> bool:
        return name in self._fields()

    # The dict's own views and lookups, rather than Mapping's generic ones through __getitem__.

    def keys(self) -> KeysView[str]:
        return self._fields().keys()

    def items(self) -> ItemsView[str, str]:
        return self._fields().items()

    def values(self) -> ValuesView[str]:
        return self._fields().values()

    def get(self, name: str, default: Any = None) -> Any:
        return self._fields().get(name, default)

    def __repr__(self) -> str:
        return repr(self._fields())
