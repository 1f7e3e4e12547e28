"""The repeat rule: the nth asking of one key within one agent run is a call of its own, as it is unpinned.

A key names what was asked, so one run asking the same thing again (a polling loop, a tool with a side
effect called twice, sampling the same prompt three times) would be answered from the first asking's pin.
Unpinned, each asking reaches the world. So the occurrence of a key within a run joins its identity: the
first asking keeps the key it always had (so recordings made before the rule keep their keys), and an
asking made after the run's earlier answers to that key arrived takes a key of its own for occurrence n.

Askings still in flight together share occurrence n, and so one draw, unless they are twins: identical
calls in one model response (parallel tool calls) each run unpinned, so the kth twin after the first is keyed
apart (`twin_key`), whatever order their answers arrive in (issue #34); a single call keeps its key. A run is
pydantic-ai's agent run (its `RunContext`, found with `get_current_run_context()`). Outside an agent run
there is no run to count in, and askings are shared as before.

The run rule: each agent run asks as a run of its own (issue #34). Unpinned, a second run asking what the
first asked (the same SMS, the same sample, the same balance for another user) reaches the world again; so
each run past the first in its unit asks under keys of its own (`run_key`), and never takes another run's
live answer. Under `Pinning` a run is its position among the runs of its unit, in the order they started (its
pinned `run_id` says which); without it, runs are told apart in the order they first ask a key. Only a run
that resumes one (the same id, drawn again from its pin after a crash, or given again with
`agent.run(..., run_id=...)`) is answered from that run's pins. The first run keeps the keys it always had.
A recording made before the rule answered a later run from the first asking's pin: where it holds no run's
own pin, that pin answers, as long as its unit asked it more times than the replay has taken it.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

from pydantic_ai import RunContext
from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateImportUsage]

from anagrapheus.provider.retries import take_up
from anagrapheus.provider.run_clock import run_position
from anagrapheus.timeline.canonical import asking_key
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = ["Asking", "ask", "run_key", "twin_key"]

_lock = threading.Lock()
_Counts = dict[tuple[str | None, str, int | str], int]
"""Per run id, asked key and the place it is asked as, the highest occurrence whose answer has arrived."""

# Per run: the run's usage object (one per run unless a caller passes its own, and gone with the run) holds its
# counts. Held by the object's id (a usage is unhashable) and dropped when it is collected, before its id can be
# reused, so a finished run leaves nothing behind. Process-wide because the askings of one run come through every
# `Pinning`, `PinnedModel` and `pinned_tool` it reaches, and a run's usage is the one object they all see; nothing
# to tear down.
_arrived: dict[int, _Counts] = {}


def occurrence_key(key: str, *, kind: str, occurrence: int) -> str:
    """The key of the `occurrence`th asking of `key` in one run: `key` itself for the first (`asking_key`)."""
    return asking_key(kind, key, occurrence=occurrence)


def run_key(key: str, *, kind: str, ordinal: int | str) -> str:
    """The key `key` is asked under by the run at `ordinal` in its unit (its place, or its id): `key` for the first."""
    return asking_key(kind, key, run=ordinal)


@dataclass(slots=True)
class _Askers:
    """Per resolver: which runs asked each key, in the order they first asked it, and how often a replay took it."""

    runs: dict[str, dict[str, int]] = field(default_factory=dict[str, dict[str, int]])
    """Per key, each run that asked it (by id) to its place among them, in the order they first asked."""
    taken: dict[str, int] = field(default_factory=dict[str, int])
    first: dict[str, str] = field(default_factory=dict[str, str])
    """Per run (by id), the first key it asked: what a retry of it asks first too."""
    resumes: dict[str, str] = field(default_factory=dict[str, str])
    """Per run that took up a failed run's place (the retry rule), the run whose keys it asks under."""
    failing: dict[str, dict[str, None]] = field(default_factory=dict[str, dict[str, None]])
    """Per first key, the runs that asked it first and whose last asking failed, oldest first: a retry's to take up."""


_ASKERS: Attachment[_Askers] = Attachment("the runs that asked each key")


_Placed = tuple[int | str, _Askers | None, _Askers | None, int | None]
"""A run's place for one key, the askers that tell it apart (no `Pinning`), and, where the resolver asked numbers
the run, its askers and how many times its recording asked the key of that place (else None: not looked up)."""


def _run_place(key: str, *, kind: str, resolver: Resolver, run: RunContext[object]) -> _Placed:
    """The place among its unit's runs that `run` asks `key` as: the first run's (0) keeps the key (the run rule).

    Also the askers that tell the run apart, in the order runs first ask, when no `Pinning` numbered it: its
    failed askings are then what says it failed (the retry rule). And, where `resolver` numbers the run itself
    (it picks no unit per run), its askers and how many times its recording asked the key of the run's place:
    the asking counts itself in with them rather than looking each up again.
    """
    run_id = run.run_id
    if run_id is None:
        return 0, None, None, None
    numbering = resolver
    server = resolver.serves_each_run
    if server is not None:
        # The run's unit is picked per run: its runs are numbered, and its askers kept, by the unit's own resolver.
        numbering = server.ledger_for(run)
    held = numbering.attachments
    if held is None:
        return 0, None, None, None
    askers = held.get(_ASKERS, _Askers)
    # A run a `Pinning` numbered is told by its position, in the order the runs started, so runs asking at once
    # keep their keys whichever asks first. Without one, the runs are told apart in the order they first ask.
    place = run_position(numbering, run_id, held=held)
    told_apart = askers if place is None else None
    if place is None:
        as_run = _as_run(key, resolver=numbering, askers=askers, run_id=run_id)
        with _lock:
            runs = askers.runs.setdefault(key, {})
            place = runs.setdefault(as_run, len(runs))
    place, asked = _recorded_before(key, place, kind=kind, resolver=numbering, askers=askers)
    if numbering is not resolver:
        return place, told_apart, None, None
    return place, told_apart, askers, asked


def _as_run(key: str, *, resolver: Resolver, askers: _Askers, run_id: str) -> str:
    """The run whose keys `run_id` asks under: its own, or the failed run asked the same it resumes (the retry rule).

    Without `Pinning` a run is known to have failed when a pinned call of its raised and it asked nothing after;
    a run whose first asking is a failed run's first takes that run's place, once.
    """
    with _lock:
        resumed = askers.resumes.get(run_id)
        if resumed is not None:
            _went_on(askers, resumed)
            return resumed
        if run_id in askers.first:
            _went_on(askers, run_id)
            return run_id
        askers.first[run_id] = key
        waiting = askers.failing.get(key) or {}
        failed = next(iter(waiting), None)
        if failed is not None:
            del waiting[failed]
    if failed is None:
        return run_id
    if not take_up(resolver, run_id, key):
        with _lock:
            askers.failing[key] = {failed: None, **askers.failing.get(key, {})}
        return run_id
    with _lock:
        askers.resumes[run_id] = failed
    return failed


def _went_on(askers: _Askers, run: str) -> None:
    """A run that asks again after a failure went on (pydantic-ai retried, a fallback answered): it did not fail."""
    askers.failing.get(askers.first[run], {}).pop(run, None)


def _failed(askers: _Askers, run_id: str) -> None:
    """Note that the run's last asking failed: unless it asks again, a retry asked the same takes up its place."""
    with _lock:
        run = askers.resumes.get(run_id, run_id)
        first = askers.first.get(run)
        if first is not None:
            askers.failing.setdefault(first, {})[run] = None


def _placed_key(key: str, *, kind: str, place: int | str) -> str:
    """The first asking's key of `key` by the run at `place`: `key` itself for the first run, not looked up."""
    return key if place == 0 else asking_key(kind, key, run=place)


def _recorded_before(
    key: str, place: int | str, *, kind: str, resolver: Resolver, askers: _Askers
) -> tuple[int | str, int]:
    """The place a replay answers a run's asking as, and how many times its recording asked that place's key.

    Its own place, unless its recording holds no pin under the run's key. A recording made before the rule
    answered a later run from the first asking's pin; runs started at once from threads may start in another
    order than they were recorded in; a replay of several units at once cannot tell one unit's runs from
    another's. In each case the run's asking is answered from the first recorded run's pin of the same call not
    yet taken as often as its unit asked it; past that, it is a miss.
    """
    asked = resolver.asked(_placed_key(key, kind=kind, place=place))
    if asked or not resolver.replays:
        return place, asked  # its own pin, or no recording to look through
    for candidate in range(_RUNS_LOOKED_AT):
        own = asking_key(kind, key, run=candidate)
        recorded = resolver.asked(own)
        if recorded > askers.taken.get(own, 0):
            return candidate, recorded
    return place, asked


_RUNS_LOOKED_AT = 64
"""How many runs' pins of one call a replay looks through for one its run can take."""


def _took(resolver: Resolver, key: str, askers: _Askers | None) -> None:
    """Count one asking answered under `key`, which the recording `resolver` replays asked (it says so: `asked`)."""
    if askers is None:
        askers = resolver.attached(_ASKERS, _Askers)
        if askers is None:
            return
    with _lock:
        askers.taken[key] = askers.taken.get(key, 0) + 1


def twin_key(key: str, *, kind: str, twin: int, resolver: Resolver) -> str:
    """The key of the `twin`th call identical to an earlier one in the same model response: `key` for the first.

    A recording made before twins were told apart answered them all from the first one's pin: where it holds no
    twin's own pin but says its unit asked `key` more than `twin` times, that pin answers, as it did.
    """
    if twin == 0:
        return key
    own = asking_key(kind, key, twin=twin)
    if not resolver.asked(own) and resolver.asked(key) > twin:
        return key
    return own


@dataclass(slots=True)
class Asking:
    """One asking of a key in a run: the key it is resolved under, and a way to say its answer arrived."""

    key: str
    """The key to resolve: the asked key for a first asking (or outside a run), else the occurrence's own."""
    _asked: str
    _place: int | str
    _occurrence: int
    _counts: _Counts | None
    _run_id: str | None
    _askers: _Askers | None = None
    """What tells the run apart without `Pinning`, in the order runs first ask: a failed asking is noted there."""

    def arrived(self) -> None:
        """Count the answer in: the run's next asking of the same key is the next occurrence."""
        if self._counts is None:
            return
        with _lock:
            slot = (self._run_id, self._asked, self._place)
            self._counts[slot] = max(self._counts.get(slot, 0), self._occurrence)

    def failed(self) -> None:
        """Note that the asking raised: the run failed, unless it asks again (a retry then takes up its place)."""
        if self._askers is not None and self._run_id is not None:
            _failed(self._askers, self._run_id)


def ask(
    key: str,
    *,
    kind: str,
    resolver: Resolver,
    ctx: RunContext[object] | None = None,
    per_run: bool = True,
) -> Asking:
    """Number one asking of `key` in the current agent run (`ctx`, else pydantic-ai's current run context).

    With `per_run=False` (the opt-out), or outside an agent run, every asking is the first, as before the rule.
    Under replay of a recording made before the rule, whose repeats were answered from the first asking's
    pin, an occurrence with no pin of its own is answered from the first one's, as long as the recording
    says its unit asked the key at least that many times (a pin's `attempts`); past that it is a miss.
    """
    run = ctx if ctx is not None else get_current_run_context()
    # A context made by hand (a test calling a tool directly, say) may carry no run's usage: no run to count in.
    usage: object = getattr(run, "usage", None)
    if not per_run or run is None or usage is None:
        return Asking(key, key, 0, 1, None, None)
    place, told_apart, askers, asked = _run_place(key, kind=kind, resolver=resolver, run=run)
    with _lock:
        counts = _arrived.get(id(usage))
        if counts is None:
            counts = _arrived[id(usage)] = {}
            weakref.finalize(usage, _arrived.pop, id(usage), None)
        occurrence = counts.get((run.run_id, key, place), 0) + 1
    # The key this asking is resolved under, and how many times the recording asked it: `_run_place` looked up the
    # first asking's (`asked`, where `resolver` numbers the run), so a first asking asks the recording once.
    if occurrence == 1:
        own = _placed_key(key, kind=kind, place=place)
        recorded = resolver.asked(own) if asked is None else asked
    else:
        own = asking_key(kind, key, run=place, occurrence=occurrence)
        recorded = resolver.asked(own)
        if not recorded:
            # A recording made before the repeat rule answered repeats from the first asking's pin, while it lasts.
            first = _placed_key(key, kind=kind, place=place)
            first_recorded = resolver.asked(first) if asked is None else asked
            if first_recorded >= occurrence:
                own, recorded = first, first_recorded
    if recorded:
        _took(resolver, own, askers)
    # Told apart without `Pinning` (which sees how its runs end), a run's failure is seen where a pinned call raises.
    return Asking(own, key, place, occurrence, counts, run.run_id, told_apart)
