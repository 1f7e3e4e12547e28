"""Delegation on replay: a tool or output function whose body handed work to another agent runs again.

pydantic-ai's multi-agent patterns run an agent inside a tool (delegation) or inside an output function
(hand-off), with `usage=ctx.usage`. Answered from its pin alone, such a call would give the run its result while
the delegate's run never happened: the app would never see its messages, nor anything the body did with them. So
a replay runs the body of a call whose recording says it asked model requests of the same pins, and the
delegate's requests are answered from their pins, as every request of a replay is. The call itself is still
answered from its pin, so the run is given what it was given live. A body that asked no model request (a tool
reading a database) is answered from its pin alone, as before: its effects are not done again.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence

from anagrapheus.errors import AnagrapheusError
from anagrapheus.provider.failures import did_before_failing, failed_having_done
from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.provider.outputs import DELEGATED, Delegated, delegated_of, delegated_raw
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = ["delegated", "failed_again", "failed_having_delegated", "ran_again"]

Effect = Callable[[], Awaitable[JSONValue]]


def delegated(resolver: Resolver, within: Sequence[str]) -> bool:
    """Whether a replay runs again the body of a call that asked the keys `within` when it was recorded.

    Only a body that asked a model request (an agent it ran, or a model it called), and only when the replay holds
    every model request it asked: a delegate pinned elsewhere (another ledger) is answered by the call's pin, as
    before. The runs' positions it asked (their ids and clocks) are keyed on the unit, so a unit recorded anew from
    a replay holds its own: a replay answers those whichever unit they came from, and they are not looked for.
    """
    if not resolver.replays:
        return False
    requests = [key for key in within if _kind(key) == MODEL_CALL]
    return bool(requests) and all(resolver.asked(key) for key in requests)


async def ran_again(resolver: Resolver, key: str, within: Sequence[str], draw: Effect) -> bool:
    """On replay, run `draw` (the body of the call `key` answered) again if its pin says it delegated (`within`).

    Called once the call's pin answered: what the body returns now is dropped, the pin's answer is the run's.
    Whatever the body raises is raised: it returned when it was recorded, so the replay has left the recording.
    """
    if not (delegated(resolver, within) and _first_answer(resolver, key)):
        return False
    await draw()
    return True


def failed_having_delegated(error: BaseException, did: Delegated) -> None:
    """Note on a drawn call's `error` what its body did to the run before it raised, so its failure's pin keeps it."""
    kept = delegated_raw(did)
    if kept is not None:
        failed_having_done(error, kept)


async def failed_again(resolver: Resolver, key: str, error: BaseException, draw: Effect) -> Delegated:
    """A call answered on replay with its pinned failure: what its body did to the run before it raised, live.

    A body that delegated (`delegated`) runs again, its delegate answered from its pins, and whatever it raises
    gives way to the pinned failure; nothing is then left to do to the run. Otherwise the body does not run, and
    what the failure's pin says it did (its delegate's usage, its runs) is returned, for the caller to do.
    """
    did = did_before_failing(error)
    done = Delegated() if did is None else delegated_of({DELEGATED: did})
    if not (delegated(resolver, done.within) and _first_answer(resolver, key)):
        return done
    try:
        await draw()
    except AnagrapheusError:
        raise  # a miss inside the delegate: the replay has left its recording, and says so
    except Exception:  # it failed again, as live: the pinned failure is what the run is given
        pass
    return Delegated()


_RAN_AGAIN: Attachment[set[str]] = Attachment("the keys whose delegating bodies a replay ran again")
_lock = threading.Lock()


def _first_answer(resolver: Resolver, key: str) -> bool:
    """Whether the replay answers `key` for the first time: its body ran once live, when it was drawn.

    A call asked again and answered from the first asking's pin (`dedupe_repeats`) did not run its body again
    live, so a replay runs it once too, and does what its pin says it did the other times, as live did. A
    resolver that keeps nothing for the layers above never runs it.
    """
    ran = resolver.attached(_RAN_AGAIN, set[str])
    if ran is None:
        return False
    with _lock:
        if key in ran:
            return False
        ran.add(key)
        return True


def _kind(key: str) -> str:
    """The kind a key names (`p1:<kind>:<digest>`)."""
    parts = key.split(":", 2)
    return parts[1] if len(parts) == 3 else ""
