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

from collections.abc import Awaitable, Callable, Sequence

from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolver import Resolver

__all__ = ["delegated", "drawn_again"]

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


async def drawn_again(
    resolver: Resolver, key: str, *, within: Callable[[JSONValue], Sequence[str]], draw: Effect
) -> Effect | None:
    """On replay, run `draw` (the call's body) now when the recording under `key` says it delegated (`delegated`).

    Returns the effect to resolve `key` with, which gives what the body returned without running it again
    (the recording's pin answers the key all the same); None when the body was not run, and `key` is answered
    from its pin alone. `within` reads the keys a pin's result says its body asked.
    """
    if not resolver.replays:
        return None
    recorded = resolver.recorded(key)
    if recorded is None or not delegated(resolver, within(recorded)):
        return None
    raw = await draw()

    async def drawn() -> JSONValue:
        return raw

    return drawn


def _kind(key: str) -> str:
    """The kind a key names (`p1:<kind>:<digest>`)."""
    parts = key.split(":", 2)
    return parts[1] if len(parts) == 3 else ""
