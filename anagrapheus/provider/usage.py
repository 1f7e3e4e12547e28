"""What the model calls pinned in a recording or log used: their tokens, and the price pydantic-ai puts on them.

A pinned response keeps the cost its run was given (the provider's, or pydantic-ai's estimate from its
genai-prices table when the response was drawn); a response pinned without one is priced now from the
same table, and one whose model the table does not know is counted as unpriced, never as free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from anagrapheus.errors import AnagrapheusError
from anagrapheus.provider.compat import fill_response_cost
from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.provider.model import response_from_raw
from anagrapheus.timeline import EventTypeRegistry, JSONValue, PinPromoted, StoredEvent
from anagrapheus.timeline.events import events_of

__all__ = ["PinnedUsage", "pinned_usage", "usage_by_unit"]


@dataclass
class PinnedUsage:
    """The model calls of some pins, their tokens, and their price where pydantic-ai's price data has it."""

    model_calls: int = 0
    """How many model-call pins answered (failed draws aside: they used no tokens the response reports)."""
    input_tokens: int = 0
    """The input tokens their responses report."""
    output_tokens: int = 0
    """The output tokens their responses report."""
    cost: Decimal = Decimal(0)
    """The price of the priced calls, in US dollars."""
    unpriced: dict[str, int] = field(default_factory=dict[str, int])
    """Each model the price data does not know (its name as the response gives it), with how many calls it made."""

    def add(self, other: PinnedUsage) -> None:
        """Count `other`'s calls, tokens and price in with these."""
        self.model_calls += other.model_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost += other.cost
        for model, calls in other.unpriced.items():
            self.unpriced[model] = self.unpriced.get(model, 0) + calls

    @property
    def priced_calls(self) -> int:
        """How many of the calls have a price."""
        return self.model_calls - sum(self.unpriced.values())

    def describe_cost(self) -> str:
        """The price as a reader wants it: `$0.0123`, `unpriced (scripted-eu)`, both (some calls priced), or `-`."""
        models = ", ".join(sorted(self.unpriced))
        if not self.model_calls:
            return "-"
        if not self.unpriced:
            return f"${self.cost:.4f}"
        if self.priced_calls == 0:
            return f"unpriced ({models})"
        return f"${self.cost:.4f} + {sum(self.unpriced.values())} unpriced ({models})"

    def spared_line(self, tests: int) -> str:
        """The pytest plugin's summary line: what the replays of `tests` tests answered from their recordings."""
        cost = "" if not self.model_calls else f"; cost not spent: {self.describe_cost()}"
        return (
            f"anagrapheus: {tests} test(s) replayed {self.model_calls} model call(s) from their recordings:"
            f" {self.input_tokens} input and {self.output_tokens} output tokens not drawn{cost}"
        )

    @classmethod
    def from_json(cls, figures: Mapping[str, Any]) -> PinnedUsage:
        """The usage `as_json` gave."""
        return cls(
            model_calls=figures["model_calls"],
            input_tokens=figures["input_tokens"],
            output_tokens=figures["output_tokens"],
            cost=Decimal(str(figures["cost_usd"] or 0)),
            unpriced=dict(figures["unpriced"]),
        )

    def as_json(self) -> dict[str, JSONValue]:
        """The figures as JSON: `cost_usd` is None when no call is priced."""
        return {
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": float(self.cost) if self.priced_calls else None,
            "unpriced": dict(sorted(self.unpriced.items())),
        }


def pinned_usage(raw: JSONValue) -> PinnedUsage:
    """The usage of one model-call pin's answer: its tokens, and its price (the pinned one, else priced now)."""
    try:
        response = response_from_raw(raw)
    except (ValueError, AnagrapheusError):
        # Not a response (a suspended job's marker, say): a call whose usage the pin does not say.
        return PinnedUsage(model_calls=1, unpriced={"unknown": 1})
    usage = PinnedUsage(
        model_calls=1, input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens
    )
    fill_response_cost(response)  # never overwrites the cost the run was given
    if response.usage.cost is None:
        usage.unpriced[response.model_name or "unknown"] = 1
    else:
        usage.cost = Decimal(str(response.usage.cost))
    return usage


def usage_by_unit(events: Iterable[StoredEvent], *, skip: Iterable[str] = ()) -> dict[str, PinnedUsage]:
    """Each unit's model-call usage, units in the order they first appear; pins whose key is in `skip` left out."""
    skipped = frozenset(skip)
    registry = EventTypeRegistry()
    units: dict[str, PinnedUsage] = {}
    for stored in events_of(events, PinPromoted):
        pin = PinPromoted.read(stored, registry)
        if pin.kind != MODEL_CALL or pin.failed or pin.key in skipped:
            continue
        units.setdefault(pin.unit_id, PinnedUsage()).add(pinned_usage(pin.raw))  # pyright: ignore[reportArgumentType]
    return units
