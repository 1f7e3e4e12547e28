"""What a later pydantic-ai adds to its dataclasses, left out of what a pin stores while it holds its default.

A pinned response, a run's history or a tool list is stored as pydantic dumps it, and a later pydantic-ai that adds
a field with a default dumps that field too (`"ui_visibility": null`). Left in, every re-recording under the new
release would rewrite every line for nothing. So a field the key scheme does not know (`known_fields`) is dropped
from the dump while it holds its default: loading fills the default back in, so nothing is lost, and the same run
stores the same bytes under either release. A field set to anything else is kept, as the key keeps it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter

from anagrapheus.provider.keying.material import NO_DEFAULT, field_default, known_fields

__all__ = ["known_dump", "without_new_defaults"]

T = TypeVar("T")


@cache
def _new_with_defaults(cls: type[Any]) -> tuple[tuple[str, object], ...] | None:
    """The fields of a pydantic-ai dataclass the key scheme does not know, with their defaults; None for a new class.

    A class the scheme does not know at all is left whole: no recording made under the scheme's release holds it.
    """
    known = known_fields(cls)
    if known is None:
        return None
    return tuple(
        (field.name, default)
        for field in dataclasses.fields(cls)
        if field.name not in known and (default := field_default(field)) is not NO_DEFAULT
    )


def _at_default(value: object, default: object) -> bool:
    return value is default or (type(value) is type(default) and value == default)


@cache
def _shape(cls: type[Any]) -> tuple[tuple[tuple[str, object], ...] | None, tuple[str, ...]] | None:
    """A dataclass's new fields at their defaults (`_new_with_defaults`) and all its field names; None if not one."""
    if not dataclasses.is_dataclass(cls):
        return None
    return _new_with_defaults(cls), tuple(field.name for field in dataclasses.fields(cls))


# Tuples built once: `list | dict` written in a call builds its union each time (half the cost of a leaf's check).
_CONTAINERS = (list, dict)
_SEQUENCES = (list, tuple)

_Dropped = list[tuple[dict[str, Any], tuple[tuple[str, Any], ...]]]
"""Each object `_prune` dropped fields from, with its items before: enough to put it back as it was, in its order."""


def _prune(value: object, dumped: Any, drop: bool, dropped: _Dropped | None = None) -> bool:
    """Whether `dumped`, the JSON dump of `value`, holds new fields at their default; dropped from it if `drop`.

    Each object it drops fields from is noted in `dropped` first, with its items as they were.
    """
    # Only a list or an object can hold a field: a scalar is never walked into (one call less per leaf).
    pruned = False
    if isinstance(dumped, list) and isinstance(value, _SEQUENCES):
        items = cast(list[object], value)
        if len(items) == len(cast(list[Any], dumped)):
            for item, dumped_item in zip(items, cast(list[Any], dumped), strict=True):
                if isinstance(dumped_item, _CONTAINERS):
                    pruned |= _prune(item, dumped_item, drop, dropped)
    elif isinstance(dumped, dict):
        fields = cast(dict[str, Any], dumped)
        shape = None if isinstance(value, type) else _shape(type(value))
        if shape is not None:
            new, names = shape
            if new is None:
                return False
            for name, default in new:
                if name in fields and _at_default(getattr(value, name, NO_DEFAULT), default):
                    if not drop:
                        return True
                    if not pruned and dropped is not None:
                        # Nothing dropped from it yet: its items as dumped, in their order.
                        dropped.append((fields, tuple(fields.items())))
                    del fields[name]
                    pruned = True
            for name in names:
                if isinstance(dumped_field := fields.get(name), _CONTAINERS):
                    pruned |= _prune(getattr(value, name), dumped_field, drop, dropped)
        elif isinstance(value, dict):
            for name, item in cast(dict[object, object], value).items():
                if isinstance(name, str) and isinstance(dumped_item := fields.get(name), _CONTAINERS):
                    pruned |= _prune(item, dumped_item, drop, dropped)
    return pruned


def without_new_defaults(
    value: object, dumped: Any, *, load: Callable[[Any], object], dump: Callable[[object], Any]
) -> Any:
    """`dumped` (the JSON dump of `value`) without the fields a later pydantic-ai added that hold their default.

    Kept as dumped unless the pruned form loads (`load`) and dumps (`dump`) back to `dumped` exactly: a field whose
    absence would load otherwise (a discriminator, say) is never dropped. Under the release the key scheme was
    frozen at nothing is new, so nothing is checked. `dumped` is pruned in place (and put back as it was when kept):
    pass a dump of its own, as `known_dump` does.
    """
    # Pruned in place, each object noted with its items first, rather than pruned in a copy: a copy is a second
    # dump of `value` (pydantic writes one faster than `copy.deepcopy` copies), and most dumps are pruned.
    dropped: _Dropped = []
    if not _prune(value, dumped, True, dropped):
        return dumped
    try:
        again = dump(load(dumped))
    except Exception:
        again = None
    pruned = [(fields, tuple(fields.items())) for fields, _ in dropped]
    for fields, items in dropped:
        fields.clear()
        fields.update(items)
    if again is None or again != dumped:
        return dumped
    # Loaded back to the same dump: pruned again, each object's items as they were pruned, in their order.
    for fields, items in pruned:
        fields.clear()
        fields.update(items)
    return dumped


def known_dump(adapter: TypeAdapter[T], value: T) -> Any:
    """`value` dumped by `adapter` to JSON values, without the later release's fields at their default."""
    return without_new_defaults(
        value,
        adapter.dump_python(value, mode="json"),
        load=adapter.validate_python,
        dump=lambda loaded: adapter.dump_python(cast(T, loaded), mode="json"),
    )
