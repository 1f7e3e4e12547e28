"""The default policy's material of a model request, and its key, walking only the messages not kept before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus.provider.keying.history import KeyedHistory, split_material
from anagrapheus.provider.keying.keys import key_of
from anagrapheus.provider.keying.material import MaterialWalk
from anagrapheus.provider.keying.settings import reduced_settings
from anagrapheus.timeline.canonical import JSONValue, digest_key
from anagrapheus.timeline.fingerprint import DeferredFingerprint

__all__ = ["MODEL_CALL", "RequestKeys", "request_material"]

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


def request_material(
    messages: Sequence[ModelMessage],
    settings: ModelSettings | None,
    parameters: ModelRequestParameters,
    *,
    model_id: str,
) -> dict[str, JSONValue]:
    """The default policy's key material of one request, as canonical JSON values (see `SemanticCallPolicy`)."""
    # Messages first, so tool-call ids are numbered in the order the conversation shows them.
    return _shaped(_walked(MaterialWalk(), {"messages": list(messages)}, settings, parameters, model_id=model_id))


def _walked(
    walk: MaterialWalk,
    first: dict[str, Any],
    settings: ModelSettings | None,
    parameters: ModelRequestParameters,
    *,
    model_id: str,
) -> dict[str, Any]:
    """`first` and the rest of a request, walked in that order."""
    walked = walk.fields({**first, "parameters": parameters, "model": model_id}, at="$")
    walked["settings"] = walk.fields(reduced_settings(settings), at="$.settings")
    return walked


def _shaped(walked: dict[str, Any]) -> dict[str, Any]:
    """The material of a walked request: its parameters regrouped into tools, output and the rest."""
    rest: dict[str, Any] = walked.pop("parameters")
    rest.pop("$type", None)
    output: dict[str, Any] = {}
    for name, short in _OUTPUT_FIELDS.items():
        if name in rest:
            output[short] = rest.pop(name)
    if "tools" in output:
        output["tools"] = _by_name(output["tools"])
    material: dict[str, Any] = {
        **walked,
        "tools": _by_name(rest.pop("function_tools", [])),
        "output": output,
    }
    for name, top in (("instruction_parts", "instructions"), ("native_tools", "native_tools")):
        if name in rest:
            material[top] = rest.pop(name)
    if rest:
        material["parameters"] = rest
    return material


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
        if self._history.worth_keeping(messages):
            probe = MaterialWalk()
            rest = _shaped(_walked(probe, {}, settings, parameters, model_id=model_id))
            # Unless the rest numbered tool-call ids of its own, which would follow the messages': keyed whole.
            if not probe.call_ids:
                head, tail = split_material(rest)
                digest, history = self._history.digest(messages, head, tail)
                rest["messages"] = history
                return digest_key(MODEL_CALL, digest), DeferredFingerprint(rest, values=values)
        return key_of(MODEL_CALL, request_material(messages, settings, parameters, model_id=model_id), values=values)
