"""Output functions as pins: a function the agent calls with the model's output is a call like a tool's.

An output function (`output_type=ToolOutput(f)`, `TextOutput(f)`, `NativeOutput(f)`, a bare function)
may read the world as a tool does, so under `Pinning` it is pinned like one: keyed on its name and
the output it was given, drawn once, answered from its pin thereafter, under the repeat rule. What it
returned is kept as the JSON of its return annotation, as ordered text (`{"ordered_json": text}`), and
rebuilt as that type on every path; a result that would not come back equal to itself is refused while
recording, never replayed different.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic_ai.output import NativeOutput, PromptedOutput, TextOutput, ToolOutput
from pydantic_ai.usage import RunUsage
from pydantic_core import PydanticSerializationError

from anagrapheus.errors import CanonicalError, PinResultError
from anagrapheus.provider.keying.keys import key_of, walked
from anagrapheus.timeline.canonical import JSONValue, stored_value
from anagrapheus.timeline.ordered import ordered, read_ordered

__all__ = [
    "DELEGATED",
    "OUTPUT_CALL",
    "Delegated",
    "delegated_of",
    "delegated_raw",
    "output_function_named",
    "output_pin",
    "output_result_from_raw",
    "output_result_raw",
    "output_returns",
]

OUTPUT_CALL = "output_call"
"""The pin kind of a call of an output function."""


def output_pin(function: str, output: object, *, partial: bool) -> tuple[str, Mapping[str, str]]:
    """The key and fingerprint of a call of the output function `function` with `output` (a partial one apart)."""
    try:
        given = walked(output, at="$.output")
    except CanonicalError as e:
        message = f"the output given to output function {function!r} cannot be keyed: {e.reason}"
        raise CanonicalError(message, path=e.path) from e
    material: dict[str, JSONValue] = {"function": walked(function, at="$.function"), "output": given}
    if partial:
        material["partial"] = True
    return key_of(OUTPUT_CALL, material)


def output_function_named(spec: object, name: str) -> Callable[..., Any] | None:
    """The output function called `name` in an agent's `output_type`, looked for through its markers and lists."""
    for function in _functions(spec):
        if getattr(function, "__name__", None) == name:
            return function
    return None


def _functions(spec: object) -> list[Callable[..., Any]]:
    if isinstance(spec, ToolOutput):
        return _functions(spec.output)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    if isinstance(spec, TextOutput):
        return _functions(spec.output_function)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    if isinstance(spec, (NativeOutput, PromptedOutput)):
        return _functions(spec.outputs)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [found for item in typing.cast("Sequence[object]", spec) for found in _functions(item)]
    if inspect.isfunction(spec) or inspect.ismethod(spec):
        return [spec]
    return []


def output_returns(function: Callable[..., Any] | None) -> object:
    """The return annotation of `function`, or None when it has none to rebuild a result by."""
    if function is None:
        return None
    try:
        hints = typing.get_type_hints(function)
    except Exception:
        # An annotation that does not resolve (a name only a type checker sees): no type to rebuild by.
        return None
    returned = hints.get("return")
    return None if returned in (None, Any, object) else returned


def _adapter(returns: object) -> TypeAdapter[Any]:
    """A pydantic adapter for a return annotation (any annotation pydantic can validate)."""
    return TypeAdapter(typing.cast(Any, returns))


DELEGATED = "$anagrapheus.delegated"
"""Where an output function's pin keeps what its body did to the run besides returning (an agent it handed the
question to, run with `usage=ctx.usage`): `{"usage": ..., "runs": n, "within": [keys]}`, beside its result."""

_usages: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)


@dataclass(frozen=True, slots=True)
class Delegated:
    """What an output function's body did to its run besides returning, as its pin keeps it."""

    usage: RunUsage | None = None
    """The usage it added to the run (its delegate's requests and tokens)."""
    runs: int = 0
    """How many agent runs started through the same resolver while it ran."""
    within: list[str] = field(default_factory=list[str])
    """The keys it asked for while it ran (its delegate's requests), in order."""


def delegated_raw(delegated: Delegated) -> JSONValue | None:
    """`delegated` as its pin keeps it, or None when the body did nothing to the run."""
    kept: dict[str, JSONValue] = {}
    if delegated.usage is not None and delegated.usage != RunUsage():
        kept["usage"] = _usages.dump_python(delegated.usage, mode="json")
    if delegated.runs:
        kept["runs"] = delegated.runs
    if delegated.within:
        kept["within"] = list(delegated.within)
    return kept or None


def delegated_of(raw: JSONValue) -> Delegated:
    """What an output function's pin says its body did to the run; nothing for a pin that says nothing."""
    kept = raw.get(DELEGATED) if isinstance(raw, dict) else None
    if kept is None:
        return Delegated()
    try:
        if not isinstance(kept, dict):
            raise TypeError("not an object")
        usage = _usages.validate_python(kept["usage"]) if "usage" in kept else None
        runs, within = kept.get("runs", 0), kept.get("within", [])
        if not (type(runs) is int and runs >= 0 and isinstance(within, list)):
            raise TypeError("runs or within of the wrong type")
        if not all(isinstance(key, str) for key in within):
            raise TypeError("a key that is not a string")
    except (TypeError, ValueError) as e:
        raise PinResultError(f"an {OUTPUT_CALL} pin keeps {kept!r:.200} as what its body did ({e})") from e
    return Delegated(usage, runs, cast("list[str]", within))


def output_result_raw(
    function: str, returns: object, result: object, *, delegated: Delegated | None = None
) -> JSONValue:
    """What an output function returned, as its pin keeps it; refused unless it rebuilds equal to itself."""
    try:
        dumped: object = result if returns is None else _adapter(returns).dump_python(result, mode="json")
        # Refused as the log refuses it; kept as ordered text, so a dict comes back in its own key order.
        stored_value(dumped)
        raw = ordered(dumped)
    except (CanonicalError, PydanticSerializationError) as e:
        raise PinResultError(
            f"output function {function!r} returned {type(result).__qualname__}, which has no JSON form ({e});"
            " annotate its return type so it can be pinned and rebuilt"
        ) from e
    if output_result_from_raw(returns, raw) != result:
        raise PinResultError(
            f"output function {function!r} returned {type(result).__qualname__}, which would not replay equal to"
            " itself from its JSON; annotate its return type (a pydantic model, a dataclass, JSON types)"
        )
    kept = None if delegated is None else delegated_raw(delegated)
    return raw if kept is None or not isinstance(raw, dict) else {**raw, DELEGATED: kept}


def output_result_from_raw(returns: object, raw: JSONValue) -> Any:
    """Rebuild an output function's result from its pin: as its return type, or as JSON when it has none."""
    value = read_ordered(raw)
    if returns is None:
        return value
    try:
        return _adapter(returns).validate_python(value)
    except ValueError as e:
        raise PinResultError(f"an {OUTPUT_CALL} pin does not hold a {returns!r} ({e})") from e
