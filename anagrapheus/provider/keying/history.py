"""Keys of a growing conversation at the cost of its new messages: each message's material and text are kept.

pydantic-ai re-sends the same message objects on every request of a run, with new ones appended. The walk of a
message is kept beside a *watch*: every object the walk read, with the getter that reads what the walk read of
it. A later request whose messages are the same objects, each watch reading the very same values, reuses the
material, the text and the hash state after that message; a message changed in place is walked again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from itertools import chain, islice
from operator import attrgetter, call, is_
from typing import Any, Final, cast

from pydantic_ai.messages import ModelMessage

from anagrapheus.provider.keying.material import MaterialWalk, layout_reads
from anagrapheus.timeline.canonical import JSONValue, encode_normalised

__all__ = ["KeyedHistory", "split_material"]

# Immutable, so reading the same object is reading the same value.
_LEAVES: Final = frozenset({str, int, float, bool, type(None), bytes})
# Keys the walk writes from the key alone. A subclass may write itself through `__int__` or `__float__`, and an
# enum member through its value, either of which can change while the key stays the same object.
_PLAIN_KEYS: Final = frozenset({str, int, float})
_Getter = Callable[[Any], Iterable[object]]
_KEYS: Final[_Getter] = dict[Any, Any].keys
_VALUES: Final[_Getter] = dict[Any, Any].values
# `getter(object)` for a getter and an object, at C speed in `map`.
_CALL: Final[Callable[[_Getter, object], Iterable[object]]] = cast(Any, call)
_AT: Final = "$.messages"
_MESSAGES: Final = '"messages":['

CHAINS: Final = 16
"""Conversations kept at once (by their first message): one a run in flight is plenty; the oldest is dropped."""

SEEN_BEFORE_KEPT: Final = 2
"""Requests of a conversation keyed from scratch before it is kept (a short run never pays for keeping it)."""

SIGHTINGS: Final = 4 * CHAINS
"""Conversations not yet kept whose requests are counted; the oldest is forgotten."""

_Watch = tuple[list[_Getter], list[object], list[object]]


class _Unwatched(Exception):
    """Internal: the message holds an object whose change no getter can see (it is walked on every request)."""


@cache
def _getter(cls: type[Any]) -> _Getter | None:
    reads = layout_reads(cls)
    if reads is None:
        return None
    # The class too: an object whose class was swapped is read by another layout.
    return attrgetter("__class__", *reads)


def _watch(value: object, getters: list[_Getter], objects: list[object]) -> None:
    """Add a getter and its object for every mutable object under `value` that the walk reads."""
    kind = type(value)
    if kind in _LEAVES:
        return
    if kind is list:
        getters.append(tuple)
        objects.append(value)
        listed: list[object] = value  # pyright: ignore[reportAssignmentType]
        for item in listed:
            _watch(item, getters, objects)
    elif kind is tuple:
        held: tuple[object, ...] = value  # pyright: ignore[reportAssignmentType]
        for item in held:
            _watch(item, getters, objects)
    elif kind is dict:
        # Its keys are read by identity too, which is exact for plain keys only: any other is the walk's to read.
        mapping: dict[Any, Any] = value  # pyright: ignore[reportAssignmentType]
        if not all(type(key) in _PLAIN_KEYS for key in mapping):
            raise _Unwatched
        getters += (_KEYS, _VALUES)
        objects += (mapping, mapping)
        for item in mapping.values():
            _watch(item, getters, objects)
    else:
        getter = _getter(kind)
        if getter is None:
            raise _Unwatched
        try:
            read = getter(value)
        except AttributeError:
            # A class with a property field has all its fields watched, and one the walk leaves out may be missing.
            raise _Unwatched from None
        getters.append(getter)
        objects.append(value)
        # The values a getter returns (after the class) are the fields the walk reads.
        for item in islice(read, 1, None):
            _watch(item, getters, objects)


def _watched(message: ModelMessage) -> _Watch | None:
    getters: list[_Getter] = []
    objects: list[object] = []
    try:
        _watch(message, getters, objects)
    except (_Unwatched, RecursionError):
        return None
    return getters, objects, _read(getters, objects)


def _read(getters: Sequence[_Getter], objects: Sequence[object]) -> list[object]:
    return list(chain.from_iterable(map(_CALL, getters, objects)))


def _reads_as_walked(getters: Sequence[_Getter], objects: Sequence[object], values: Sequence[object]) -> bool:
    """Whether each watched object still holds, by identity, what it held when walked."""
    try:
        now = _read(getters, objects)
    except AttributeError:
        # An object whose class was swapped for one lacking a field the old one read: changed, and the walk reads
        # it as it is now (raising, in message order, where the messages really are broken).
        return False
    # By identity: an equal value of another type (1 for True) or an equal copy of a list can key otherwise.
    return len(now) == len(values) and all(map(is_, now, values))


def _same(watch: _Watch | None) -> bool:
    return watch is not None and _reads_as_walked(*watch)


class _Node:
    """One message of a conversation: its material, its canonical text, and what it read."""

    __slots__ = ("added", "material", "message", "text", "watch")

    def __init__(self, message: ModelMessage, material: JSONValue, text: str, added: tuple[str, ...]) -> None:
        self.message = message  # held, so its id names no other object while the node lives
        self.material = material
        self.text = text
        self.added = added
        """The tool-call ids this message numbered first, in order."""
        self.watch = _watched(message)


class _Chain:
    """The messages of one conversation as last keyed, with the hash state after each.

    The watches of the watched nodes are also kept end to end, so one pass of C-level maps checks them all.
    """

    __slots__ = (
        "call_ids",
        "ends",
        "getters",
        "head",
        "known",
        "materials",
        "messages",
        "nodes",
        "objects",
        "states",
        "unwatched",
        "values",
    )

    def __init__(self, head: str) -> None:
        self.nodes: list[_Node] = []
        self.messages: list[ModelMessage] = []
        self.materials: list[JSONValue] = []
        self.states: list[Any] = []  # sha256 of the head and the texts up to and including each node
        self.head = head
        self.call_ids: dict[str, int] = {}
        self.known: list[int] = []  # after each node: how many tool-call ids are numbered
        self.getters: list[_Getter] = []
        self.objects: list[object] = []
        self.values: list[object] = []
        self.ends: list[tuple[int, int]] = []  # after each node: how many getters, and values, come before
        self.unwatched: list[int] = []  # nodes that are walked again on every request

    def append(self, node: _Node) -> None:
        """Add a node after the last."""
        if node.watch is None:
            self.unwatched.append(len(self.nodes))
        else:
            getters, objects, values = node.watch
            self.getters += getters
            self.objects += objects
            self.values += values
        self.nodes.append(node)
        self.messages.append(node.message)
        self.materials.append(node.material)
        self.known.append((self.known[-1] if self.known else 0) + len(node.added))
        self.ends.append((len(self.getters), len(self.values)))

    def _start(self, index: int) -> tuple[int, int]:
        return self.ends[index - 1] if index else (0, 0)

    def truncate(self, keep: int) -> None:
        """Forget the nodes from `keep` on."""
        getters, values = self._start(keep)
        known = self.known[keep - 1] if keep else 0
        del self.getters[getters:], self.objects[getters:], self.values[values:]
        for kept in (self.nodes, self.messages, self.materials, self.known, self.ends, self.states):
            del kept[keep:]
        self.unwatched = [index for index in self.unwatched if index < keep]
        self.call_ids = dict(islice(self.call_ids.items(), known))

    def replace(self, index: int, node: _Node) -> None:
        """Put `node` (which numbers the same tool-call ids) in place of the node at `index`."""
        first_getter, first_value = self._start(index)
        last_getter, last_value = self.ends[index]
        getters, objects, values = node.watch if node.watch is not None else ([], [], [])
        self.getters[first_getter:last_getter] = getters
        self.objects[first_getter:last_getter] = objects
        self.values[first_value:last_value] = values
        moved = (len(getters) - (last_getter - first_getter), len(values) - (last_value - first_value))
        if moved != (0, 0):
            self.ends[index:] = [(g + moved[0], v + moved[1]) for g, v in self.ends[index:]]
        self.nodes[index] = node
        self.materials[index] = node.material
        if (node.watch is None) != (index in self.unwatched):
            self.unwatched = sorted(set(self.unwatched) ^ {index})

    def unchanged(self) -> bool:
        """Whether every watched node reads what it read when walked."""
        return _reads_as_walked(self.getters, self.objects, self.values)

    def rehash(self, start: int) -> None:
        """Recompute the hash states from node `start` on."""
        del self.states[start:]
        state = self.states[start - 1].copy() if start else hashlib.sha256(self.head.encode())
        for index in range(start, len(self.nodes)):
            if index:
                state.update(b",")
            state.update(self.nodes[index].text.encode())
            self.states.append(state.copy())


class KeyedHistory:
    """Keys the messages of requests, reusing what an earlier request of the same conversation walked."""

    __slots__ = ("_chains", "_lock", "_sightings")

    def __init__(self) -> None:
        self._chains: dict[int, _Chain] = {}
        self._sightings: dict[int, tuple[ModelMessage, int]] = {}
        self._lock = threading.Lock()

    def worth_keeping(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether `messages` continue a conversation seen often enough that keeping it pays for its watches.

        A conversation is kept from its `SEEN_BEFORE_KEPT + 1`-th request on: a run of one or two requests (or a
        test asking one question) is keyed from scratch, at no cost beyond that.
        """
        if not messages:
            return False
        first = messages[0]
        with self._lock:
            found = self._chains.get(id(first))
            if found is not None and found.messages[0] is first:
                return True
            sightings = self._sightings
            seen = sightings.pop(id(first), None)
            count = seen[1] + 1 if seen is not None and seen[0] is first else 1
            if count > SEEN_BEFORE_KEPT:
                return True
            sightings[id(first)] = (first, count)  # held, so its id names no other object meanwhile
            while len(sightings) > SIGHTINGS:
                del sightings[next(iter(sightings))]
            return False

    def digest(self, messages: Sequence[ModelMessage], head: str, tail: str) -> tuple[str, list[JSONValue]]:
        """The sha256 of `head`, the messages' canonical texts and `tail`, and the messages' material.

        `messages` is not empty (`worth_keeping` says so of an empty history).
        """
        with self._lock:
            found = self._chain(messages, head)
            try:
                if found.head != head:
                    found.head = head
                    found.rehash(0)
                _extend(found, messages)
            except BaseException:
                # A message the walk refused (or an interrupt) may leave the chain half updated: forget it.
                del self._chains[id(messages[0])]
                raise
            state = found.states[-1].copy()
            state.update(tail.encode())
            return state.hexdigest(), found.materials.copy()

    def _chain(self, messages: Sequence[ModelMessage], head: str) -> _Chain:
        chains = self._chains
        first = id(messages[0])
        found = chains.pop(first, None)
        if found is None or found.messages[0] is not messages[0]:
            found = _Chain(head)
        chains[first] = found  # last: the most recently used
        while len(chains) > CHAINS:
            del chains[next(iter(chains))]
        return found


def _extend(found: _Chain, messages: Sequence[ModelMessage]) -> None:
    """Bring `found` to `messages`: keep the nodes that stand, walk the changed and the new ones."""
    shared = _shared(found.messages, messages)
    if shared < len(found.nodes):
        found.truncate(shared)
    if found.unchanged():
        if found.unwatched:
            _rewalk(found, list(found.unwatched))
    else:
        _rewalk(found, range(len(found.nodes)))
    walk = MaterialWalk()
    walk.call_ids = found.call_ids
    start = len(found.nodes)
    for index, (material, added) in enumerate(walk.each(messages, start, len(messages), at=_AT), start):
        found.append(_Node(messages[index], material, encode_normalised(material), added))
    found.rehash(start)


def _shared(held: list[ModelMessage], messages: Sequence[ModelMessage]) -> int:
    """How many leading messages are the very objects held, found by halving (each half checked at C speed)."""
    low, high = 0, min(len(held), len(messages))
    if all(map(is_, held[:high], messages[:high])):
        return high
    # The first `low` are the same; the first `high` are not.
    while high - low > 1:
        middle = (low + high) // 2
        if all(map(is_, held[low:middle], messages[low:middle])):
            low = middle
        else:
            high = middle
    return low


def _rewalk(found: _Chain, suspects: Iterable[int]) -> None:
    """Walk the suspect messages that changed again; keep what follows while its tool-call numbering stands."""
    rehash = len(found.nodes)
    for index in suspects:
        node = found.nodes[index]
        if _same(node.watch):
            continue
        walk = MaterialWalk()
        walk.call_ids = dict(islice(found.call_ids.items(), found.known[index - 1] if index else 0))
        ((material, added),) = walk.each(found.messages, index, index + 1, at=_AT)
        fresh = _Node(node.message, material, encode_normalised(material), added)
        if fresh.text != node.text:
            rehash = min(rehash, index)
        if fresh.added != node.added:
            # Every later tool-call id may be numbered otherwise: the rest is walked as new.
            found.truncate(index)
            found.call_ids = walk.call_ids
            found.append(fresh)
            break
        found.replace(index, fresh)
    found.rehash(min(rehash, len(found.states)))


def split_material(rest: dict[str, Any]) -> tuple[str, str]:
    """The canonical text of a request's material before its messages, and after them (`rest` holds the others)."""
    before = {name: rest[name] for name in rest if name < "messages"}
    after = {name: rest[name] for name in rest if name > "messages"}
    head = (encode_normalised(before)[:-1] + "," if before else "{") + _MESSAGES
    # Never empty: the model, its settings, tools and output are always keyed.
    tail = "]," + encode_normalised(after)[1:]
    return head, tail
