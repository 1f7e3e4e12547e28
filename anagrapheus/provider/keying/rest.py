"""The rest of a request (its parameters, model id and settings), walked once while each request reads the same.

pydantic-ai builds a new `ModelRequestParameters`, with new tool definitions (and a new model id string), for every
request, holding the same values. The rest is read into *tokens*: each value's exact class, then the value itself
for an immutable leaf (a float as its `hex()`, which tells -0.0 from 0.0), or a container's length and its members,
or a pydantic-ai dataclass's fields. Each leaf follows its exact class, so equal tokens are equal leaves of one
class at the same places of the same shape: such a rest walks to the very same material and text (the walk is a
function of its input's classes, shape and leaf values alone), so both are kept. Only a rest the walk reads
without the messages' numbering (no tool-call id, no tool call's arguments, no property, no other class) is kept;
any other rest is walked as before, every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from operator import attrgetter
from typing import Any, Final

from anagrapheus.provider.keying.material import MaterialWalk, plain_reads, walk_rest
from anagrapheus.timeline.canonical import encode_normalised

__all__ = ["KeptRest", "rest_tokens", "split_material"]

# Immutable, and equal only to an equal value of their own class once the class is compared (a subclass is another
# class, so never one of these). A float is compared by its `hex()`: -0.0 equals 0.0.
_LEAVES: Final = frozenset({str, int, bool, type(None), bytes})
_MESSAGES: Final = '"messages":['
# Containers whose tokens, empty, are their class and 0 (a request's parameters hold many empty ones).
_CONTAINERS: Final = frozenset({list, tuple, set, frozenset, dict})


class _Untokened(Exception):
    """Internal: the rest holds a value the tokens cannot vouch for (it is walked on every request)."""


@cache
def _fields_of(cls: type[Any]) -> Callable[[Any], tuple[object, ...]] | None:
    """A getter of the fields the walk reads of a pydantic-ai dataclass, as a tuple; None unless all read plainly."""
    reads = plain_reads(cls)
    if reads is None:
        return None
    if len(reads) == 1:
        one = attrgetter(reads[0])
        return lambda value: (one(value),)
    return attrgetter(*reads) if reads else lambda _: ()


def _tokens(value: object, out: list[object]) -> None:
    kind = type(value)
    if kind in _LEAVES:
        out += (kind, value)
    elif kind is float:
        number: float = value  # pyright: ignore[reportAssignmentType]
        if not math.isfinite(number):
            raise _Untokened  # refused by the walk, unless skipped as the very default object: walked each time
        out += (kind, number.hex())
    elif kind is list or kind is tuple or kind is set or kind is frozenset:
        items: list[object] = value  # pyright: ignore[reportAssignmentType]
        out += (kind, len(items))
        _members(items, out)
    elif kind is dict:
        mapping: dict[object, object] = value  # pyright: ignore[reportAssignmentType]
        out += (kind, len(mapping))
        for key, item in mapping.items():
            if type(key) is not str:
                raise _Untokened
            member = type(item)
            # (A leaf inline: most members are, and a call each would cost more than the rest of the reading.)
            if member in _LEAVES:
                out += (key, member, item)
            elif member in _CONTAINERS and not item:
                out += (key, member, 0)
            else:
                out.append(key)
                _tokens(item, out)
    else:
        fields = _fields_of(kind)
        if fields is None:
            raise _Untokened
        try:
            read = fields(value)
        except AttributeError:
            raise _Untokened from None
        out.append(kind)
        _members(read, out)


def _members(items: Iterable[object], out: list[object]) -> None:
    for item in items:
        member = type(item)
        if member in _LEAVES:
            out += (member, item)
        elif member in _CONTAINERS and not item:
            out += (member, 0)
        else:
            _tokens(item, out)


def rest_tokens(rest: tuple[object, str, Mapping[str, object]]) -> list[object] | None:
    """The tokens of a request's rest, or None where it holds what they cannot vouch for."""
    out: list[object] = []
    try:
        for part in rest:
            _tokens(part, out)
    except (_Untokened, RecursionError):
        return None
    return out


def split_material(rest: dict[str, Any]) -> tuple[str, str]:
    """The canonical text of a request's material before its messages, and after them (`rest` holds the others)."""
    before = {name: rest[name] for name in rest if name < "messages"}
    if not before:
        return "{" + _MESSAGES, "]," + encode_normalised(rest)[1:]
    after = {name: rest[name] for name in rest if name > "messages"}
    return encode_normalised(before)[:-1] + "," + _MESSAGES, "]," + encode_normalised(after)[1:]


class KeptRest:
    """The rest of the last request keyed: its tokens, its material and the text around its messages."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[list[object], dict[str, Any], str, str] | None = None

    def walked(
        self, walk: MaterialWalk, rest: tuple[object, str, Mapping[str, object]]
    ) -> tuple[dict[str, Any], str, str]:
        """The rest's material (`walk_rest`, a dict of its own) and its text before and after the messages."""
        tokens = rest_tokens(rest)
        last = self._last
        if tokens is not None and last is not None and tokens == last[0]:
            # Walked afresh, it is the same material: the dict is the request's own, what it holds is shared, unchanged.
            return dict(last[1]), last[2], last[3]
        material = walk_rest(walk, rest)
        head, tail = split_material(material)
        if tokens is not None:
            self._last = (tokens, material, head, tail)
        return dict(material), head, tail
