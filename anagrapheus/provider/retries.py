"""The retry rule: a run that retries a failed run of its unit resumes it, answered from its pins (issue #40).

The reference page's first promise: within one unit of work, a turn that failed halfway and is tried
again has the model calls it already made answered from their pins. The run rule (#34) gives every
new run keys of its own, so that a run after a finished one reaches the world again, as it does
unpinned; a retry is not such a run. A run that starts where an earlier run asked the same (the same
inputs under `Pinning`, the same first request under `PinnedModel` alone) and did not finish takes
that run's place: its keys, its id and times. The call that failed is drawn again (a retry after a
failure is a fresh draw, as `DrawSequence` keys it); the calls that succeeded are answered from their
pins. Each failed run is taken up by one retry; a retry that fails in turn is taken up by the next.

Taking a failed run's place is pinned (`RUN_RETRY`, keyed on what the runs asked and how many times
such a run was taken up before), so a replay, or a resume in another process, takes the same places;
a recording made before the rule holds no such pin, and its retries replay as the new runs they were.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateImportUsage]

from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = ["RUN_RETRY", "Retries", "inherited_failures", "noted_failure", "retry_key", "take_up"]

RUN_RETRY = "run_retry"
"""The pin kind that says a run took up the place of a failed run asked the same, keyed on what they asked."""


def retry_key(asked_as: str, taken: int) -> str:
    """The key of the `taken`th take-up of a failed run whose asking digests to `asked_as`."""
    return pin_key(RUN_RETRY, {"retry_of": asked_as, "n": taken})


@dataclass(slots=True)
class Retries:
    """Per resolver: the failures met under each key, and the runs that resumed a failed run's place."""

    failures: dict[str, int] = field(default_factory=dict[str, int])
    """Per key, how many of its draws failed in any run: a retry's next draw of it is the one after them."""
    retrying: set[str] = field(default_factory=set[str])
    """The ids of the runs that took up a failed run's place (they draw again what it failed on)."""
    taken: dict[str, int] = field(default_factory=dict[str, int])
    """Per asking digest, how many failed runs asked so were taken up: the next take-up's number."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_RETRIES: Attachment[Retries] = Attachment("the failures and retries of the resolver's runs")


def _retries(resolver: Resolver) -> Retries | None:
    return resolver.attached(_RETRIES, Retries)


def take_up(resolver: Resolver, run_id: str, asked_as: str) -> bool:
    """Whether the run `run_id` may take up a failed run's place whose asking digests to `asked_as`; pins it if so.

    A replay takes it up only where its recording says the recorded run did (a recording made before the rule
    replays its retries as new runs), or once it left its recording (`on_miss="record"`, drawing what it misses).
    A resolver that keeps no attachments cannot tell its runs apart: no.
    """
    retries = _retries(resolver)
    if retries is None:
        return False
    with retries.lock:
        taken = retries.taken.get(asked_as, 0)
        key = retry_key(asked_as, taken)
        if resolver.replays and not resolver.asked(key) and not _left_its_recording(resolver):
            return False
        retries.taken[asked_as] = taken + 1
        retries.retrying.add(run_id)
    answering = resolver.answering_position(key)
    if answering is not None:
        raw: JSONValue = {"retry_of": asked_as, "n": taken}
        answering.resolve(key, kind=RUN_RETRY, effect=lambda: raw, interpret=lambda held: held)
    return True


def _left_its_recording(resolver: Resolver) -> bool:
    """Whether a replay in record mode met its first miss: what follows is drawn, as a live run draws it."""
    return resolver.divergence is not None


def noted_failure(resolver: Resolver | None, key: str) -> None:
    """Count a failed draw of `key` (drawn, or answered from its pin), for the retries that resume its run."""
    retries = None if resolver is None else _retries(resolver)
    if retries is not None:
        with retries.lock:
            retries.failures[key] = retries.failures.get(key, 0) + 1


def inherited_failures(resolver: Resolver | None, key: str) -> int:
    """How many draws of `key` failed before, for the current run if it resumes a failed run's place; else 0."""
    retries = None if resolver is None else _retries(resolver)
    if retries is None or not retries.retrying:
        return 0
    run = get_current_run_context()
    if run is None or run.run_id not in retries.retrying:
        return 0
    return retries.failures.get(key, 0)
