"""Keys of a growing conversation at the cost of its new messages: each message's material and text are kept.

pydantic-ai re-sends the same message objects on every request of a run, with new ones appended. The walk of a
message is kept beside a *watch*: every object the walk read, with the getter that reads what the walk read of
it. A later request whose messages are the same objects, each watch reading the very same values, reuses the
material, the text and the hash state after that message; a message changed in place is walked again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from itertools import chain, islice
from operator import attrgetter, call, is_
from typing import Any, Final, cast

from pydantic_ai.messages import ModelMessage

from anagrapheus.provider.keying.material import RequestRest, layout_reads, walk_messages
from anagrapheus.provider.keying.rest import KeptRest, split_material
from anagrapheus.timeline.canonical import JSONValue, encode_normalised, sha256_empty, sha256_hex

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

    def __init__(self) -> None:
        self.nodes: list[_Node] = []
        self.messages: list[ModelMessage] = []
        self.materials: list[JSONValue] = []
        self.states: list[Any] = []  # sha256 of the head and the texts up to and including each node
        self.head = ""  # never a request's head (see `split_material`): a new chain is hashed from its first node
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
        if start == len(self.nodes):
            return
        if start:
            state = self.states[start - 1].copy()
        else:
            state = sha256_empty()
            state.update(self.head.encode())
        for index in range(start, len(self.nodes)):
            if index:
                state.update(b",")
            state.update(self.nodes[index].text.encode())
            self.states.append(state.copy())


class KeyedHistory:
    """Keys the messages of requests, reusing what an earlier request of the same conversation walked."""

    __slots__ = ("_chains", "_lock", "_rest", "_sightings")

    def __init__(self) -> None:
        self._chains: dict[int, _Chain] = {}
        self._sightings: dict[int, tuple[ModelMessage, int]] = {}
        self._lock = threading.Lock()
        # The rest of the last request: the next one, whose rest reads the very same, is not walked again.
        self._rest = KeptRest()

    def material(self, messages: Sequence[ModelMessage], rest: RequestRest) -> tuple[str, dict[str, Any]]:
        """A request's material (`walk_request`), and the sha256 of its canonical text.

        A conversation is kept from its `SEEN_BEFORE_KEPT + 1`-th request on: a run of one or two requests (or a
        test asking one question) is walked from scratch, with no watches, and hashed whole.
        """
        with self._lock:
            found = self._kept(messages)
            if found is not None:
                try:
                    return _extended(found, messages, rest, self._rest)
                except BaseException:
                    # A message the walk refused (or an interrupt) may leave the chain half updated: forget it.
                    del self._chains[id(messages[0])]
                    raise
        walk, _, walked = walk_messages(messages, (), 0)
        material, head, tail = self._rest.walked(walk, rest)
        listed = [each for each, _ in walked]
        material["messages"] = listed
        # The material's canonical text, as `pin_key` writes it: the text around the messages, and their list's.
        text = head + encode_normalised(listed)[1:-1] + tail
        return sha256_hex(text), material

    def _kept(self, messages: Sequence[ModelMessage]) -> _Chain | None:
        """The chain `messages` continue, the most recently used from now; None while not worth keeping."""
        if not messages:
            return None
        first = messages[0]
        chains = self._chains
        found = chains.pop(id(first), None)
        if found is None or found.messages[0] is not first:
            sightings = self._sightings
            seen = sightings.pop(id(first), None)
            count = seen[1] + 1 if seen is not None and seen[0] is first else 1
            if count <= SEEN_BEFORE_KEPT:
                sightings[id(first)] = (first, count)  # held, so its id names no other object meanwhile
                while len(sightings) > SIGHTINGS:
                    del sightings[next(iter(sightings))]
                return None
            found = _Chain()
        chains[id(first)] = found  # last: the most recently used
        while len(chains) > CHAINS:
            del chains[next(iter(chains))]
        return found


def _extended(
    found: _Chain, messages: Sequence[ModelMessage], rest: RequestRest, kept: KeptRest
) -> tuple[str, dict[str, Any]]:
    """Bring `found` to `messages` (keep the nodes that stand, walk the changed and new ones) and hash the request."""
    shared = _shared(found.messages, messages)
    if shared < len(found.nodes):
        found.truncate(shared)
    suspects = found.unwatched if found.unchanged() else range(len(found.nodes))
    # Those a watch cannot vouch for, each walked again numbering the tool-call ids before it as the chain does.
    again = [
        (index, found.known[index - 1] if index else 0) for index in suspects if not _same(found.nodes[index].watch)
    ]
    start = len(found.nodes)
    walk, walked_again, walked = walk_messages(messages, again, start, numbered=found.call_ids)
    stale = len(found.states)
    for (index, _), (fresh, added) in zip(again, walked_again, strict=True):
        node = found.nodes[index]
        text = encode_normalised(fresh)
        if added != node.added:
            # Every later tool-call id may be numbered otherwise: the messages from here on are walked as new (rare).
            found.truncate(index)
            walk, _, walked = walk_messages(messages, (), index, numbered=found.call_ids)
            start = index
            break
        if text != node.text:
            stale = min(stale, index)
        found.replace(index, _Node(node.message, fresh, text, added))
    # The rest after every message, numbering any tool-call ids of its own after theirs (then dropped, below).
    material, head, tail = kept.walked(walk, rest)
    known = found.known[-1] if found.known else 0
    for index, (fresh, added) in enumerate(walked, start):
        found.append(_Node(messages[index], fresh, encode_normalised(fresh), added))
        known += len(added)
    if len(found.call_ids) > known:
        # The rest numbered ids of its own after the messages': they are this request's, not the conversation's.
        found.call_ids = dict(islice(found.call_ids.items(), known))
    if head != found.head:
        found.head = head
        stale = 0
    found.rehash(min(stale, start))
    state = found.states[-1].copy()
    state.update(tail.encode())
    material["messages"] = found.materials.copy()
    return state.hexdigest(), material


def _shared(held: list[ModelMessage], messages: Sequence[ModelMessage]) -> int:
    """How many leading messages are the very objects held, found by halving (each half checked at C speed)."""
    low, high = 0, min(len(held), len(messages))
    # (`map` stops at the shorter list: the first `high` of each, compared without copying them.)
    if all(map(is_, held, messages)):
        return high
    # The first `low` are the same; the first `high` are not.
    while high - low > 1:
        middle = (low + high) // 2
        if all(map(is_, held[low:middle], messages[low:middle])):
            low = middle
        else:
            high = middle
    return low
