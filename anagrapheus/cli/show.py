"""`anagrapheus show`: a recording's or a log's header, units, pins by kind, attempts, failures and divergences."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from anagrapheus.cli.commands import Command, add_unit_option
from anagrapheus.cli.report import Exit, Outcome, table
from anagrapheus.cli.sources import Source, add_registry_options, event_types, open_source, upcasts_of
from anagrapheus.provider.keying.request import MODEL_CALL
from anagrapheus.provider.usage import PinnedUsage, pinned_usage
from anagrapheus.timeline import PinPromoted, PinsAbandoned, ReplayDiverged
from anagrapheus.timeline.ages import UnitAge, unit_ages
from anagrapheus.timeline.recording import RECORDING_FORMAT

__all__ = ["COMMAND", "run"]

_WIDTH = 110


@dataclass
class _Unit:
    unit_id: str
    state: str = "committed"
    pins: int = 0
    attempts: int = 0
    kinds: Counter[str] = field(default_factory=Counter[str])
    usage: PinnedUsage = field(default_factory=PinnedUsage)
    age: UnitAge | None = None


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `show`."""
    parser.add_argument("path", help="a recording (.jsonl) or an anagrapheus SQLite database")
    add_unit_option(parser)
    add_registry_options(parser)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(f"{k}={_value(v) if isinstance(v, str) else json.dumps(v)}" for k, v in value.items())  # pyright: ignore[reportUnknownVariableType]
    return json.dumps(value)


def _wrapped(line: str) -> list[str]:
    # A header holds sentences; a terminal reads them better folded under their label.
    return textwrap.wrap(line, width=_WIDTH, subsequent_indent=" " * 17, break_on_hyphens=False) or [line]


def summarise(source: Source, args: argparse.Namespace) -> dict[str, Any]:
    """The facts `show` prints, as JSON-shaped data."""
    types, upcasts = event_types(args.events), upcasts_of(args.upcasts)
    units: dict[str, _Unit] = {}
    failures: list[dict[str, Any]] = []
    divergences: list[dict[str, Any]] = []
    for index, event in source.decoded(types, upcasts):
        if isinstance(event, PinPromoted):
            unit = units.setdefault(event.unit_id, _Unit(event.unit_id))
            unit.pins += 1
            unit.attempts += event.attempts
            unit.kinds[event.kind] += 1
            if event.kind == MODEL_CALL and not event.failed:
                unit.usage.add(pinned_usage(event.raw))  # pyright: ignore[reportArgumentType]
        elif isinstance(event, PinsAbandoned):
            units.setdefault(event.unit_id, _Unit(event.unit_id)).state = "abandoned"
            failures.append(
                {
                    "unit": event.unit_id,
                    "reason": event.reason,
                    "pins": len(event.pins),
                    "attempts": sum(pin.attempts for pin in event.pins),
                    "at": source.where(index),
                }
            )
        elif isinstance(event, ReplayDiverged):
            divergences.append(
                {
                    "unit": event.unit_id,
                    "kind": event.kind,
                    "key": event.key,
                    "after_hits": event.after_hits,
                    "moved": list(event.moved),
                    "at": source.where(index),
                }
            )
    for pin in source.scratch:
        unit = units.setdefault(pin.unit_id, _Unit(pin.unit_id, state="open"))
        unit.pins += 1
        unit.attempts += pin.attempts
        unit.kinds[pin.kind] += 1
    others = Counter(f"{e.namespace}:{e.type}" for e in source.events if e.namespace != "anagrapheus")
    total = PinnedUsage()
    ages = unit_ages(source.events)
    for unit in units.values():
        total.add(unit.usage)
        unit.age = ages.get(unit.unit_id)
    return {
        "path": str(source.path),
        "kind": source.kind,
        "header": None if source.header is None else source.header.model_dump(mode="json"),
        "events": len(source.events),
        "units": [
            {
                "unit": u.unit_id,
                "state": u.state,
                "pins": u.pins,
                "attempts": u.attempts,
                "kinds": dict(sorted(u.kinds.items())),
                "usage": u.usage.as_json(),
                "recorded_at": None if u.age is None or u.age.recorded_at is None else u.age.recorded_at.isoformat(),
                "age_days": None if u.age is None or u.age.age is None else u.age.age.days,
                "recorded": "unknown" if u.age is None else u.age.describe(),
            }
            for u in units.values()
        ],
        "usage": total.as_json(),
        "failures": failures,
        "divergences": divergences,
        "other_events": dict(sorted(others.items())),
    }


def render(facts: dict[str, Any]) -> str:
    """The facts as a readable report."""
    lines = [str(facts["path"])]
    if facts["header"] is None:
        lines.append(f"  format         anagrapheus event log (SQLite), {facts['events']} event(s)")
    else:
        lines.append(f"  format         {RECORDING_FORMAT}, {facts['events']} event(s)")
        for name, value in facts["header"].items():
            if value not in ({}, [], None, ""):
                lines.extend(_wrapped(f"  {name.replace('_', ' '):<14} {_value(value)}"))
    units: list[dict[str, Any]] = facts["units"]
    kinds = sorted({kind for unit in units for kind in unit["kinds"]})
    lines.append("")
    if units:
        rows = [
            [u["unit"], u["state"], u["pins"], u["attempts"], *[u["kinds"].get(k, 0) for k in kinds]] for u in units
        ]
        rows.append(["total", "", *[sum(int(row[i]) for row in rows) for i in range(2, 4 + len(kinds))]])
        lines.extend(table(["unit", "state", "pins", "attempts", *kinds], rows))
        lines.append("")
        lines.extend(_usage_table(units, facts["usage"]))
    else:
        lines.append("no units")
    lines.append("")
    failures: list[dict[str, Any]] = facts["failures"]
    lines.append(f"failures: {len(failures) or 'none'}")
    for failure in failures:
        lines.append(
            f"  {failure['unit']}: abandoned with {failure['pins']} pin(s), {failure['attempts']} attempt(s):"
            f" {failure['reason']} ({failure['at']})"
        )
    divergences: list[dict[str, Any]] = facts["divergences"]
    lines.append(f"divergences: {len(divergences) or 'none'}")
    for divergence in divergences:
        moved = ", ".join(divergence["moved"]) or "nothing the fingerprint can see"
        lines.append(
            f"  {divergence['unit']}: no pin for {divergence['kind']} {divergence['key']} after"
            f" {divergence['after_hits']} hit(s); moved: {moved} ({divergence['at']})"
        )
    others: dict[str, int] = facts["other_events"]
    if others:
        lines.append("other events: " + ", ".join(f"{name} {count}" for name, count in others.items()))
    return "\n".join(lines)


def _cost(usage: dict[str, Any]) -> str:
    """A unit's price as `show` prints it (the JSON's figures, worded as `PinnedUsage.describe_cost`)."""
    return PinnedUsage.from_json(usage).describe_cost()


def _usage_table(units: list[dict[str, Any]], total: dict[str, Any]) -> list[str]:
    """Each unit's date (the last instant its runs were given), model calls, tokens and price; then the file's."""
    rows: list[list[object]] = [[u["unit"], u["recorded"], *_figures(u["usage"])] for u in units]
    rows.append(["total", "", *_figures(total)])
    return table(["unit", "recorded", "model calls", "input tokens", "output tokens", "cost"], rows)


def _figures(usage: dict[str, Any]) -> list[object]:
    return [usage["model_calls"], usage["input_tokens"], usage["output_tokens"], _cost(usage)]


def run(args: argparse.Namespace) -> Outcome:
    """Show one recording or database."""
    facts = summarise(open_source(args.path, units=args.unit, seal="ignore", streamed=True), args)
    return Outcome(Exit.OK, render(facts), facts)


COMMAND = Command(
    "show",
    help="print a recording's or a database's header, units, pins, failures and divergences",
    description="Print the header (provenance included), then each unit with its pins by kind and attempts, its"
    " model calls' tokens and price (from pydantic-ai's price data; unpriced where it has none), then the failures"
    " (abandoned units) and the divergences (record-mode replays that left a recording).",
    arguments=_arguments,
    run=run,
)
