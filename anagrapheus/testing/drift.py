"""Drift: ask a recording's model calls again live and say, per call, what the provider now answers differently.

The world (tools, MCP servers, output functions) and the run's ids and clock are still answered from the
recording; each model request is drawn live, whatever the recording holds, into a ledger that is never
committed, and its answer is compared with the recorded one as runs are compared (`comparable`: no
timestamps, run ids or provider response ids). The recording is never written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from typing_extensions import override

from anagrapheus.provider.discovery import TOOLSET_INSTRUCTIONS, TOOLSET_TOOLS
from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.provider.outputs import OUTPUT_CALL
from anagrapheus.provider.tools import TOOL_CALL
from anagrapheus.testing.compare import comparable, first_difference
from anagrapheus.timeline import JSONValue, PinLedger, ReplayPins, Resolver
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.resolving.resolver import DelegatingResolver

__all__ = ["WORLD_KINDS", "CallDrift", "DriftPins", "DriftStatus", "drifted_calls"]

WORLD_KINDS = frozenset((TOOL_CALL, TOOLSET_TOOLS, TOOLSET_INSTRUCTIONS, OUTPUT_CALL))
"""The pin kinds that read the world (tools, MCP servers, output functions): answered only from pins."""

DriftStatus = Literal["same", "drifted", "new"]
"""A live model call against its recording: the same answer, another answer, or a request the recording lacks."""

_DETAIL_TYPES = "$anagrapheus.detail_types"
"""Beside a pinned response: the types of its provider details (how the answer is stored, not what it says)."""


@dataclass(frozen=True)
class CallDrift:
    """One model call of a unit asked live again: how its answer compares with the recorded one."""

    unit_id: str
    """The unit the call was recorded in."""
    position: int
    """Its place among the unit's model calls asked live, from 1."""
    key: str
    """The call's pin key."""
    status: DriftStatus
    """`same`, `drifted` (another answer to the same request) or `new` (a request the recording lacks)."""
    difference: str | None = None
    """For `drifted`: the first place the answers part (`result.parts[0].content: 'a' != 'b'`)."""

    def describe(self) -> str:
        """One line: `model_call #2: drifted: result.parts[0].content: ...`."""
        head = f"model_call #{self.position}: {self.status}"
        if self.status == "drifted":
            return f"{head}: {self.difference}"
        if self.status == "new":
            return f"{head}: a request the recording lacks (an earlier answer moved what the run asked next)"
        return head


class DriftPins(DelegatingResolver):
    """Draws every model request live through `live`; answers everything else from the recording's pins.

    A tool call, MCP discovery or output function the recording lacks is a miss (the world is never
    reached); a run id, clock or minted id it lacks is drawn live.
    """

    def __init__(self, pins: ReplayPins, live: PinLedger, *, world_kinds: frozenset[str] = WORLD_KINDS) -> None:
        self.pins = pins
        """The recording's pins."""
        self.live = live
        """Where the live model calls are drawn (and compared from); never committed."""
        self.world_kinds = world_kinds
        """The kinds answered only from pins."""

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        """Live for a model call; the recording for a key it holds or a kind of the world's; live for the rest."""
        if kind == MODEL_CALL:
            return self.live, key
        return (self.pins if key in self.pins or kind in self.world_kinds else self.live), key


def _answer(raw: JSONValue, *, provider_ids: bool) -> JSONValue:
    """A pinned answer as runs compare it: parsed from its ordered text, per-run fields dropped."""
    answer = read_ordered(raw)
    if isinstance(answer, dict):
        answer = {name: value for name, value in answer.items() if name != _DETAIL_TYPES}
    compared: JSONValue = comparable(answer, provider_ids=provider_ids)
    return compared


def drifted_calls(pins: ReplayPins, live: PinLedger, *, provider_ids: bool = False, since: int = 0) -> list[CallDrift]:
    """Compare the model calls `live` drew (after its first `since` pins) with what `pins` recorded for them."""
    calls: list[CallDrift] = []
    drawn = [pin for pin in live.pins() if pin.kind.split("!")[0] == MODEL_CALL]
    for position, pin in enumerate(drawn, start=1):
        if position <= since:
            continue
        recorded = pins.recorded(pin.key)
        if recorded is None:
            calls.append(CallDrift(live.unit_id, position, pin.key, "new"))
            continue
        now = json.loads(pin.raw_text)
        if pin.kind != MODEL_CALL:  # it failed now; the recording holds an answer
            difference = f"result: it failed now ({str(now)[:200]})"
        else:
            difference = first_difference(
                _answer(recorded, provider_ids=provider_ids), _answer(now, provider_ids=provider_ids), path="result"
            )
        calls.append(
            CallDrift(live.unit_id, position, pin.key, "same" if difference is None else "drifted", difference)
        )
    return calls
