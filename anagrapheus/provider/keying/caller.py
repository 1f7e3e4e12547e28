"""A caller's identity as key material: the whole caller, with what its dump hides, or refused naming the field.

A pydantic model dumps without its `Field(exclude=True)` fields and its private attributes, and a dataclass
without attributes set outside its fields: two callers differing only there would share one key, and one would be
answered with the other's data (issue #41). Such state joins the identity's material beside the dump, each item
under its path; where it has no JSON form the identity is refused (`HiddenField`), naming the field. An identity
that hides nothing keys as it always has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

from anagrapheus.errors import CanonicalError
from anagrapheus.provider.keying.material import MaterialWalk, layout_reads

__all__ = ["HiddenField", "identity_material"]

_DEPTH = 64


class HiddenField(CanonicalError):
    """Internal: a field an identity's dump hides holds no JSON form, so no key can see it."""

    def __init__(self, reason: str, *, path: str, how: str) -> None:
        super().__init__(reason, path=path)
        self.how = how
        """How the field is hidden (`Field(exclude=True)`, a private attribute, ...)."""


def identity_material(identity: object) -> Any:
    """`identity` walked as key material, with the state its dump hides beside it; `CanonicalError` if it cannot be.

    The material of an identity that hides nothing is its walk alone, the one it always had.
    """
    walk = MaterialWalk()
    whole = walk.value(identity)
    hidden: dict[str, tuple[object, str]] = {}
    _hidden(identity, "$", hidden, 0)
    if not hidden:
        return whole
    seen: dict[str, Any] = {}
    for path, (value, how) in hidden.items():
        try:
            seen[path] = walk.value(value, at=path)
        except CanonicalError as e:
            raise HiddenField(e.reason, path=path, how=how) from None
    return {"$whole": whole, "$hidden": seen}


def _hidden(value: object, at: str, found: dict[str, tuple[object, str]], depth: int) -> None:
    """Note in `found` each item of `value` its dump leaves out, by path, with how it is hidden."""
    if depth > _DEPTH or value is None or isinstance(value, str | bytes | int | float):
        return
    if isinstance(value, Mapping):
        for name, item in cast(Mapping[object, object], value).items():
            _hidden(item, f"{at}.{name}", found, depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(cast(Sequence[object], value)):
            _hidden(item, f"{at}[{index}]", found, depth + 1)
        return
    if isinstance(value, type) or layout_reads(type(value)) is not None:
        return  # a class, or a pydantic-ai message object, which the walk keys by its own layout
    fields = _declared(value)
    if fields is None:
        return
    dumped = _dumped_names(value)
    for name, how in fields.items():
        item = getattr(value, name, None)
        if dumped is not None and name not in dumped:
            found[f"{at}.{name}"] = (item, how)
        _hidden(item, f"{at}.{name}", found, depth + 1)
    private = getattr(value, "__pydantic_private__", None)
    for name, item in cast(dict[str, object], private or {}).items():
        found[f"{at}.{name}"] = (item, "a private attribute (PrivateAttr)")
        _hidden(item, f"{at}.{name}", found, depth + 1)
    if dataclasses.is_dataclass(value) and hasattr(value, "__dict__"):
        for name, item in vars(value).items():
            if name not in fields and name != "__pydantic_private__":
                found[f"{at}.{name}"] = (item, "an attribute set outside the dataclass's fields")


def _declared(value: object) -> dict[str, str] | None:
    """The fields of a pydantic model or a dataclass, each with how its dump would hide it; None for other values."""
    model_fields = getattr(type(value), "__pydantic_fields__", None)
    if isinstance(model_fields, dict):
        how = "left out of its dump (Field(exclude=True), exclude_if or a serializer)"
        return dict.fromkeys(cast(dict[str, object], model_fields), how)
    if dataclasses.is_dataclass(value):
        return {field.name: "left out of its dump" for field in dataclasses.fields(value)}
    return None


def _dumped_names(value: object) -> set[str] | None:
    """The names of the fields `value`'s dump holds (by name or alias); None when its dump is not a mapping."""
    serializer = getattr(type(value), "__pydantic_serializer__", None)
    if serializer is None:
        return None  # a plain dataclass: pydantic dumps every field
    # (The walk of the whole identity dumped it already: it cannot fail here.)
    dump: object = serializer.to_python(value)
    if not isinstance(dump, Mapping):
        return set()  # a custom serializer that writes no fields: every field is hidden
    names = {str(name) for name in cast(Mapping[object, object], dump)}
    fields = cast(dict[str, Any], getattr(type(value), "__pydantic_fields__", {}))
    for name, info in fields.items():
        alias = getattr(info, "serialization_alias", None) or getattr(info, "alias", None)
        if alias in names:
            names.add(name)
    return names
