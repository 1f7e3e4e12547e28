"""The repeat rule: the nth asking of one key within one agent run is a call of its own, as it is unpinned.

A key names what was asked, so one run asking the same thing again (a polling loop, a tool with a side
effect called twice, sampling the same prompt three times) would be answered from the first asking's pin.
Unpinned, each asking reaches the world. So the occurrence of a key within a run joins its identity: the
first asking keeps the key it always had (so recordings made before the rule keep their keys), and an
asking made after the run's earlier answers to that key arrived takes a key of its own for occurrence n.

Askings still in flight together share occurrence n, and so one draw, unless they are twins: identical
calls in one model response (parallel tool calls) each run unpinned, so the kth twin after the first is keyed
apart (`twin_key`), whatever order their answers arrive in (issue #34); a single call keeps its key. A run is
pydantic-ai's agent run (its `RunContext`, found with `get_current_run_context()`): a retried run in
the same unit counts from 1 again, so it is answered from the pins of the run it retries. Outside an
agent run there is no run to count in, and askings are shared as before.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from pydantic_ai import RunContext
from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateImportUsage]

from anagrapheus.timeline.canonical import pin_key
from anagrapheus.timeline.resolver import PinResolver, asked

__all__ = ["Asking", "ask", "twin_key"]

_lock = threading.Lock()
# Per run: the run's usage object (one per run unless a caller passes its own, and gone with the run) holds, per
# run id and key, the highest occurrence whose answer has arrived. Held by the object's id (a usage is unhashable) and
# dropped when it is collected, before its id can be reused, so a finished run leaves nothing behind. Process-wide
# because the askings of one run come through every `Pinning`, `PinnedModel` and `pinned_tool` it reaches, and a
# run's usage is the one object they all see; nothing to tear down.
_arrived: dict[int, dict[tuple[str | None, str], int]] = {}


def occurrence_key(key: str, *, kind: str, occurrence: int) -> str:
    """The key of the `occurrence`th asking of `key` in one run: `key` itself for the first."""
    if occurrence == 1:
        return key
    return pin_key(kind, {"occurrence_of": key, "occurrence": occurrence})


def twin_key(key: str, *, kind: str, twin: int, resolver: PinResolver) -> str:
    """The key of the `twin`th call identical to an earlier one in the same model response: `key` for the first.

    A recording made before twins were told apart answered them all from the first one's pin: where it holds no
    twin's own pin but says its unit asked `key` more than `twin` times, that pin answers, as it did.
    """
    if twin == 0:
        return key
    own = pin_key(kind, {"twin_of": key, "twin": twin})
    if not asked(resolver, own) and asked(resolver, key) > twin:
        return key
    return own


@dataclass(slots=True)
class Asking:
    """One asking of a key in a run: the key it is resolved under, and a way to say its answer arrived."""

    key: str
    """The key to resolve: the asked key for a first asking (or outside a run), else the occurrence's own."""
    _asked: str
    _occurrence: int
    _counts: dict[tuple[str | None, str], int] | None
    _run_id: str | None

    def arrived(self) -> None:
        """Count the answer in: the run's next asking of the same key is the next occurrence."""
        if self._counts is None:
            return
        with _lock:
            slot = (self._run_id, self._asked)
            self._counts[slot] = max(self._counts.get(slot, 0), self._occurrence)


def ask(
    key: str,
    *,
    kind: str,
    resolver: PinResolver,
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
        return Asking(key, key, 1, None, None)
    with _lock:
        counts = _arrived.get(id(usage))
        if counts is None:
            counts = _arrived[id(usage)] = {}
            weakref.finalize(usage, _arrived.pop, id(usage), None)
        occurrence = counts.get((run.run_id, key), 0) + 1
    own = occurrence_key(key, kind=kind, occurrence=occurrence)
    if own != key and not asked(resolver, own) and asked(resolver, key) >= occurrence:
        own = key
    return Asking(own, key, occurrence, counts, run.run_id)
