"""`anagrapheus diff`: two recordings, or a recording and a database's unit, compared pin by pin, unit by unit."""

from __future__ import annotations

import argparse
import difflib
from dataclasses import dataclass
from typing import Any

from anagrapheus.cli.commands import Command, add_unit_option
from anagrapheus.cli.report import Exit, Outcome
from anagrapheus.cli.sources import Source, add_registry_options, event_types, open_source, upcasts_of
from anagrapheus.provider.capability import ATTEMPT_TIMES
from anagrapheus.provider.run_clock import RUN_CLOCK, RUN_ID, RUN_PLACE
from anagrapheus.testing.compare import comparable, first_difference
from anagrapheus.timeline import JSONValue, PinPromoted, canonical_json, moved_fields
from anagrapheus.timeline.ordered import read_ordered

__all__ = ["COMMAND", "run"]

_VOLATILE_KINDS = frozenset({RUN_ID, RUN_CLOCK, ATTEMPT_TIMES})
"""Pins whose whole result is drawn from the clock or the id source: two runs of one unchanged agent differ in
their values but never in their shape (how many instants a run clock holds)."""


@dataclass(frozen=True, slots=True)
class _Pin:
    position: int
    """Its place in its unit's draw order, from 1."""
    at: str
    """Where it sits: `file:line`, or `file (seq N)`."""
    key: str
    kind: str
    compared: JSONValue
    """The result as runs compare it: volatile fields dropped, tool call ids renumbered (a volatile pin: its shape)."""
    compared_text: str
    fingerprint: dict[str, str] | None


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `diff`."""
    parser.add_argument("a", metavar="A", help="a recording or an anagrapheus SQLite database")
    parser.add_argument("b", metavar="B", help="a recording or an anagrapheus SQLite database")
    add_unit_option(parser)
    parser.add_argument(
        "--all",
        action="store_true",
        help="compare the ids a provider gives each response (provider_response_id) too: they differ on every call",
    )
    add_registry_options(parser)


def _pins(source: Source, args: argparse.Namespace) -> dict[str, list[_Pin]]:
    """Each unit's pins in draw order, units in the order they first appear."""
    units: dict[str, list[_Pin]] = {}
    places: dict[str, int] = {}
    for index, event in source.decoded(event_types(args.events), upcasts_of(args.upcasts)):
        if not isinstance(event, PinPromoted):
            continue
        pins = units.setdefault(event.unit_id, [])
        # An answer pinned as ordered text is compared by what it says.
        raw: JSONValue = read_ordered(event.raw)  # pyright: ignore[reportArgumentType]
        compared: JSONValue = _shape(raw) if event.kind in _VOLATILE_KINDS else comparable(raw, provider_ids=args.all)
        key = event.key
        if event.kind == RUN_PLACE:
            # Keyed on a digest of the run's inputs, which names the runs its history came from by their ids: two
            # recordings of one unchanged agent place their runs alike, in order, at the same numbered places.
            places[event.unit_id] = places.get(event.unit_id, 0) + 1
            key = f"{RUN_PLACE} #{places[event.unit_id]}"
            at_place = raw.get("run") if isinstance(raw, dict) else None
            compared = at_place if type(at_place) is int else _shape(at_place)
        pins.append(
            _Pin(
                position=len(pins) + 1,
                at=source.where(index),
                key=key,
                kind=event.kind,
                compared=compared,
                compared_text=canonical_json(compared),
                fingerprint=event.fingerprint,
            )
        )
    return units


def _shape(value: JSONValue) -> JSONValue:
    """The value with each list item replaced by its type's name: what stays of a volatile pin's result."""
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__


def _entry(
    change: str, a: _Pin | None, b: _Pin | None, *, moved: list[str] | None = None, result: str | None = None
) -> dict[str, Any]:
    kind = a.kind if a is not None else b.kind if b is not None else ""
    sides = [None if pin is None else {"position": pin.position, "key": pin.key, "at": pin.at} for pin in (a, b)]
    return {"change": change, "kind": kind, "a": sides[0], "b": sides[1], "moved": moved or [], "result": result}


def _changed(a: _Pin, b: _Pin) -> dict[str, Any]:
    if a.key == b.key:
        # The same request drew another answer: say where the results part.
        return _entry("changed", a, b, result=first_difference(a.compared, b.compared, path="result"))
    moved = moved_fields(b.fingerprint, a.fingerprint) if a.fingerprint and b.fingerprint else []
    return _entry("changed", a, b, moved=moved)


def _compare(a_pins: list[_Pin], b_pins: list[_Pin]) -> list[dict[str, Any]]:
    """The changes that turn A's pins into B's, in draw order."""
    changes: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(a=[p.key for p in a_pins], b=[p.key for p in b_pins], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs = zip(a_pins[i1:i2], b_pins[j1:j2], strict=True)
            changes.extend(_changed(a, b) for a, b in pairs if a.compared_text != b.compared_text)
            continue
        # Pins of one kind pair up in order: a call that moved, rather than one pin removed and another added.
        unpaired = list(b_pins[j1:j2])
        for a in a_pins[i1:i2]:
            partner = next((b for b in unpaired if b.kind == a.kind), None)
            if partner is None:
                changes.append(_entry("removed", a, None))
                continue
            cut = unpaired.index(partner)
            changes.extend(_entry("added", None, b) for b in unpaired[:cut])
            unpaired = unpaired[cut + 1 :]
            changes.append(_changed(a, partner))
        changes.extend(_entry("added", None, b) for b in unpaired)
    return changes


def _line(change: dict[str, Any]) -> list[str]:
    a, b = change["a"], change["b"]
    if change["change"] == "removed":
        return [f"  - {change['kind']} #{a['position']} {a['key']} ({a['at']})"]
    if change["change"] == "added":
        return [f"  + {change['kind']} #{b['position']} {b['key']} ({b['at']})"]
    lines = [f"  ~ {change['kind']} #{a['position']} ({a['at']} -> {b['at']})"]
    if change["result"] is not None:
        lines.append(f"      same request, another result: {change['result']}")
    else:
        moved = ", ".join(change["moved"]) or "nothing the fingerprints can see"
        lines.append(f"      {a['key']} -> {b['key']}")
        lines.append(f"      what moved: {moved}")
    return lines


def run(args: argparse.Namespace) -> Outcome:
    """Compare A and B."""
    a_source, b_source = (
        open_source(args.a, units=args.unit, seal="ignore"),
        open_source(args.b, units=args.unit, seal="ignore"),
    )
    a_units, b_units = _pins(a_source, args), _pins(b_source, args)
    units: list[dict[str, Any]] = []
    for unit in [*a_units, *(u for u in b_units if u not in a_units)]:
        changes = _compare(a_units.get(unit, []), b_units.get(unit, []))
        units.append(
            {
                "unit": unit,
                "in": "both" if unit in a_units and unit in b_units else "a" if unit in a_units else "b",
                "changes": changes,
            }
        )
    differing = [u for u in units if u["changes"]]
    lines = [f"--- {args.a}", f"+++ {args.b}"]
    for unit in differing:
        only = {"a": " (only in A)", "b": " (only in B)", "both": ""}[unit["in"]]
        lines.append(f"unit {unit['unit']}{only}: {len(unit['changes'])} change(s)")
        for change in unit["changes"]:
            lines.extend(_line(change))
    pins = sum(len(p) for p in a_units.values())
    if differing:
        lines.append(f"differ: {len(differing)} of {len(units)} unit(s)")
    else:
        lines.append(f"same: {len(units)} unit(s), {pins} pin(s)")
    data = {"a": args.a, "b": args.b, "same": not differing, "units": units}
    return Outcome(Exit.FAILED if differing else Exit.OK, "\n".join(lines), data)


COMMAND = Command(
    "diff",
    help="compare two recordings (or a recording and a database's units) pin by pin",
    description="For each unit, list the pins added, removed and changed, in draw order; for a changed call,"
    " say what moved in the request (or, for the same request, where the result differs). Exit 0 when the"
    " two are the same, 1 when they differ.",
    arguments=_arguments,
    run=run,
)
