"""A tool call whose caller was cancelled live: on replay, that same asking is delivered as cancelled.

pydantic-ai cancels the tool calls beside one that raised. Live, a cancelled call's return never reaches the failed
run's messages, even when its result is pinned (a sync body that ran to its end, a draw cancelled while its pin was
written). Replayed, its pin answers at once, so the failed run would hold a return the live one did not, and the
run's later pins (its clock) would be asked under other keys. So the live cancellation is pinned beside the call's
own pin, under a key of its own naming the call's key and which asking of it (in its unit) was cancelled; the call's
key and its answer to other askings are untouched. Replayed, that asking waits to be cancelled, as it was; a later
asking of the key (the retry) is answered from the pin. A recording without such a pin replays as before.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from dataclasses import dataclass, field

from anagrapheus.errors import AnagrapheusError
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = [
    "CANCELLED_ASKING",
    "UnpinnedCancellationWarning",
    "cancelled_asking_key",
    "cancelled_live",
    "counted_asking",
    "delivered_as_live",
]

CANCELLED_ASKING = "cancelled_asking"
"""The kind of the pin saying that an asking of a call's key was cancelled live (its value: whether it was answered)."""

TURNS_AWAITED = 200
"""How many event-loop turns a replayed asking cancelled live waits for its cancellation before it is answered.

The sibling whose failure cancels it is answered from its pin too, so its cancellation comes within a few turns;
the bound keeps a replay that went elsewhere from hanging: past it, the asking is answered as any other.
"""

_lock = threading.Lock()


class UnpinnedCancellationWarning(UserWarning):
    """Emitted when a tool call's asking was cancelled live and the pin saying so could not be taken.

    The cancellation still reaches the caller; a replay of that recording does not deliver the asking as cancelled,
    so it may leave the recording there.
    """


@dataclass(slots=True)
class _Askings:
    """Per resolver: how many times each tool call's key was asked in its unit."""

    counts: dict[str, int] = field(default_factory=dict[str, int])


_ASKINGS: Attachment[_Askings] = Attachment("how many times each tool call's key was asked")


def counted_asking(resolver: Resolver, key: str) -> int:
    """Count one asking of `key` through `resolver`: its number (1 for the first); 0 where the resolver keeps none."""
    askings = resolver.attached(_ASKINGS, _Askings)
    if askings is None:
        return 0
    with _lock:
        number = askings.counts[key] = askings.counts.get(key, 0) + 1
    return number


def cancelled_asking_key(key: str, number: int) -> str:
    """The key of the pin saying that the `number`th asking of `key` in its unit was cancelled live."""
    return pin_key(CANCELLED_ASKING, {"asking_of": key, "n": number}, normalised=True)


def cancelled_live(resolver: Resolver, key: str, number: int, *, answered: bool) -> None:
    """Pin that the `number`th asking of `key` was cancelled live: `answered` once its answer came, else before.

    Answered, the asking took the call's pin (its body ran to its end and was pinned), so the pin's `attempts` count
    it; cancelled before, it took none. Held by the ledger and written with the unit's next store step, from the
    cancelled task, which awaits nothing. A replay that holds it takes it (counted as used, adopted by a new unit); a
    strict one that does not pins nothing.
    """
    if number == 0:
        return
    marker = cancelled_asking_key(key, number)
    answering = resolver.answering_position(marker)
    if answering is None:
        return
    # The cancellation is what the caller goes on with: a unit that can no longer take the pin does not replace it,
    # but says so, as nothing else would (a cancelled sibling's error is dropped by pydantic-ai's task group).
    try:
        answering.resolve_held(marker, kind=CANCELLED_ASKING, effect=lambda: answered, interpret=_answered)
    except AnagrapheusError as e:
        warnings.warn(
            f"anagrapheus: asking {number} of {key} was cancelled live, and the pin saying so was not taken ({e!r});"
            " a replay of this recording does not deliver that asking as cancelled",
            UnpinnedCancellationWarning,
            stacklevel=3,
        )


async def delivered_as_live(resolver: Resolver, key: str, number: int, *, answered: bool) -> bool:
    """On replay, an asking that was cancelled live waits to be cancelled (raising it), for a bounded time.

    Asked before the call's pin is taken (`answered=False`) and after (`answered=True`), it waits where live was
    cancelled, so the asking takes the pin exactly when live did and a recording made again from the replay counts
    the same `attempts`. Cancelled, the asking's cancellation path takes the pin saying so (`cancelled_live`), where
    live pinned it, so that recording holds its pins in the same order. Not cancelled within `TURNS_AWAITED` turns
    of the event loop (the replay went elsewhere), or once the replay has left its recording, it returns and the
    asking is answered from its pin as any other; that pin is then left unused, for the replay to report the
    difference (`ReplayPins.unused`).

    Returns whether the recording holds a pin saying this asking was cancelled live, either side of its answer: where
    it holds none, the caller asks no more (each asking costs the marker's key, on every replayed tool call).
    """
    if number == 0 or not resolver.replays or resolver.divergence is not None:
        return False
    marker = cancelled_asking_key(key, number)
    if not resolver.asked(marker):
        return False  # not cancelled live (or recorded before such askings were pinned)
    if _answered(resolver.recorded(marker)) is answered:
        for _ in range(TURNS_AWAITED):
            await asyncio.sleep(0)
    return True


def _answered(raw: JSONValue) -> bool:
    return raw is True
