"""Verdicts of a regression run: passed, failed (an invariant was violated) or diverged (left the recording)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage

from anagrapheus.timeline import Divergence

__all__ = ["Conversation", "Exchange", "Invariant", "InvariantResult", "Verdict", "VerdictStatus"]

VerdictStatus = Literal["passed", "failed", "diverged"]
"""The three outcomes of a regression run."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """One turn as it was played: who was asked what, and what came back."""

    turn: int
    """The turn's number, from 1."""
    agent: str | None
    """The name of the agent that answered, when `build_agent` returned several."""
    prompt: str
    """What the agent was asked."""
    output: Any
    """The run's output."""
    messages: tuple[ModelMessage, ...]
    """The turn's new messages: requests, responses, tool calls and returns."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """The turns played so far, in order; what an invariant judges."""

    exchanges: tuple[Exchange, ...] = ()
    """Every turn played, the latest last."""

    def __len__(self) -> int:
        return len(self.exchanges)

    def __getitem__(self, index: int) -> Exchange:
        return self.exchanges[index]

    @property
    def last(self) -> Exchange:
        """The latest turn."""
        return self.exchanges[-1]

    @property
    def outputs(self) -> list[Any]:
        """Every turn's output, in order."""
        return [exchange.output for exchange in self.exchanges]

    def by(self, agent: str) -> list[Exchange]:
        """The turns one named agent answered."""
        return [exchange for exchange in self.exchanges if exchange.agent == agent]


Invariant = Callable[[Conversation], str | None]
"""A property of the conversation: returns why it is violated, or None while it holds."""

InvariantStatus = Literal["held", "violated", "not evaluated"]
"""What became of one invariant."""


@dataclass(frozen=True, slots=True)
class InvariantResult:
    """What one invariant said about the conversation."""

    name: str
    """The invariant function's name."""
    status: InvariantStatus
    """`held` over every turn, `violated` at `turn`, or `not evaluated` past a divergence or an earlier failure."""
    turn: int | None = None
    """Violated: the turn it was violated at. Otherwise the last turn it was checked on (None: never)."""
    why: str | None = None
    """The violation message the invariant returned."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a candidate fared against a recording: passed, failed or diverged; see `status`."""

    status: VerdictStatus
    """`passed`: every invariant held; `failed`: one was violated; `diverged`: the candidate left the recording."""
    on_miss: Literal["strict", "record"]
    """`strict`: a miss ends the run; `record`: misses were drawn from the real model."""
    turns: int
    """How many turns were to be played."""
    conversation: Conversation
    """The turns that were played."""
    invariants: tuple[InvariantResult, ...]
    """Each invariant's outcome, in the order given."""
    diverged_at: int | None = None
    """The turn at which the candidate first asked for something the recording has no pin for."""
    divergence: Divergence | None = None
    """The first pin the candidate missed and what moved; under `record` the miss was drawn instead."""
    drawn: int = field(default=0)
    """Under `record`: how many calls were drawn from the real model."""

    @property
    def policy(self) -> Literal["pinned", "live"]:
        """`on_miss` in the replay gate's words (`pinned` for `strict`, `live` for `record`), kept without a warning."""
        return "pinned" if self.on_miss == "strict" else "live"

    @property
    def passed(self) -> bool:
        """Every invariant held."""
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        """An invariant was violated."""
        return self.status == "failed"

    @property
    def diverged(self) -> bool:
        """The candidate left the recording (under `strict`)."""
        return self.status == "diverged"

    @property
    def violations(self) -> list[InvariantResult]:
        """The invariants that were violated."""
        return [result for result in self.invariants if result.status == "violated"]

    @property
    def exit_code(self) -> int:
        """The command-line exit code: 0 passed, 1 failed, 3 diverged."""
        return {"passed": 0, "failed": 1, "diverged": 3}[self.status]

    def describe(self) -> str:
        """Say in a few lines what happened, invariant by invariant."""
        played = f"{len(self.conversation)} of {self.turns} turn(s) played"
        if self.status == "diverged":
            lines = [f"DIVERGED at turn {self.diverged_at} ({played}, on_miss {self.on_miss})"]
        else:
            lines = [f"{self.status.upper()} ({played}, on_miss {self.on_miss})"]
        divergence = self.divergence
        if divergence is not None:
            if self.status != "diverged":
                lines.append(
                    f"  turn {self.diverged_at} left the recording; {self.drawn} call(s) drawn live from there"
                )
            lines.append(f"  no pin for {divergence.kind} {divergence.key} after {divergence.after_hits} hit(s)")
            if divergence.nearest_key is None:
                lines.append("  the recording has no comparable call of this kind")
            else:
                moved = ", ".join(divergence.moved) or "nothing the fingerprint can see"
                lines.append(f"  what moved against the nearest recorded call: {moved}")
            lines.extend(f"  {note}" for note in divergence.notes)
        for result in self.invariants:
            if result.status == "violated":
                lines.append(f"  [FAIL] {result.name}: turn {result.turn}: {result.why}")
            elif result.status == "held":
                lines.append(f"  [PASS] {result.name}")
            elif result.turn is None:
                lines.append(f"  [----] {result.name}: not evaluated (no turn finished)")
            else:
                lines.append(f"  [----] {result.name}: held through turn {result.turn}, not evaluated past it")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The verdict as JSON-shaped data, for `--json` and for CI annotations."""
        divergence = self.divergence
        return {
            "status": self.status,
            "on_miss": self.on_miss,
            # The replay gate's name and words for the same rule (a reference page's), beside on_miss.
            "policy": "pinned" if self.on_miss == "strict" else "live",
            "turns": self.turns,
            "played": len(self.conversation),
            "diverged_at": self.diverged_at,
            "divergence": None
            if divergence is None
            else {
                "key": divergence.key,
                "kind": divergence.kind,
                "after_hits": divergence.after_hits,
                "moved": list(divergence.moved),
                "nearest_key": divergence.nearest_key,
            },
            "drawn": self.drawn,
            "invariants": [{"name": r.name, "status": r.status, "turn": r.turn, "why": r.why} for r in self.invariants],
        }
