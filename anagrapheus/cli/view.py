"""`anagrapheus view`: one self-contained HTML page of a recording or a log, and of where a run left it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from anagrapheus.cli.commands import Command, add_unit_option
from anagrapheus.cli.diff import run as run_diff
from anagrapheus.cli.page import Change, PinView, UnitView, render_page
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.cli.sources import Source, add_registry_options, event_types, open_source, upcasts_of
from anagrapheus.errors import AnagrapheusError
from anagrapheus.testing.miss import read_miss
from anagrapheus.timeline import JSONValue, PinPromoted, PinsAbandoned, ReplayDiverged
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.resolving.failures import stored_kind

__all__ = ["COMMAND", "MAX_PINS", "run", "units_of"]

MAX_PINS = 10_000
"""The pins a page of a whole recording shows by default (`--max-pins`): as many as a browser opens in under 2 s
(`benchmarks/view.py`). The rest are counted, unit by unit, so a page stays about 25 MB whatever the recording's
size. A `--unit` page shows all of its units' pins."""


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `view`."""
    parser.add_argument("path", nargs="?", help="a recording (.jsonl) or an anagrapheus SQLite database")
    add_unit_option(parser)
    parser.add_argument("--against", metavar="B", help="show how B's pins differ from PATH's")
    parser.add_argument(
        "--miss", metavar="MISS.json", help="a miss file (the pytest plugin writes one beside a recording that missed)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write the page (default: PATH + .html)")
    parser.add_argument(
        "--max-pins",
        type=int,
        default=MAX_PINS,
        metavar="N",
        help=f"a page of the whole recording shows its first N pins and counts the rest (default {MAX_PINS:,});"
        " --unit pages show every pin",
    )
    add_registry_options(parser)


def units_of(source: Source, args: argparse.Namespace, *, budget: int | None = None) -> list[UnitView]:
    """Each unit of `source` with its pins in draw order, units in the order they first appear.

    Past `budget` pins, a unit's further pins are counted (`UnitView.elided`), not shown.
    """
    units: dict[str, UnitView] = {}
    shown = 0
    for index, event in source.decoded(event_types(args.events), upcasts_of(args.upcasts)):
        if isinstance(event, PinPromoted):
            unit = units.setdefault(event.unit_id, UnitView(event.unit_id))
            if budget is not None and shown >= budget:
                unit.elided += 1
                continue
            shown += 1
            # An answer pinned as ordered text is shown by what it says.
            raw: JSONValue = read_ordered(event.raw)  # pyright: ignore[reportArgumentType]
            unit.pins.append(
                PinView(
                    unit=event.unit_id,
                    position=len(unit.pins) + unit.elided + 1,
                    kind=event.kind,
                    key=event.key,
                    attempts=event.attempts,
                    failed=event.failed,
                    raw=raw,
                    fingerprint=event.fingerprint,
                    at=source.where(index),
                    created_at=source.events[index].created_at,
                )
            )
        elif isinstance(event, PinsAbandoned):
            unit = units.setdefault(event.unit_id, UnitView(event.unit_id))
            unit.state, unit.reason = "abandoned", event.reason
        elif isinstance(event, ReplayDiverged):
            said = f"{event.kind} {event.key} after {event.after_hits} hit(s); moved: {', '.join(event.moved) or '-'}"
            units.setdefault(event.unit_id, UnitView(event.unit_id)).diverged.append(said)
    for pin in sorted(source.scratch, key=lambda p: (p.unit_id, p.draw_no)):
        unit = units.setdefault(pin.unit_id, UnitView(pin.unit_id, state="open"))
        try:
            raw = read_ordered(json.loads(pin.raw_text))
        except ValueError:
            # A damaged database (or one another tool wrote): said, typed, with exit 2, never a traceback (issue #35).
            raise BadInput(
                f"the scratch pin {pin.key} of open unit {pin.unit_id} is not JSON: the database is damaged",
                path=str(source.path),
            ) from None
        unit.pins.append(_scratch_pin(pin.unit_id, len(unit.pins) + 1, pin.kind, pin.key, pin.attempts, raw))
    return list(units.values())


def _scratch_pin(unit: str, position: int, kind: str, key: str, attempts: int, raw: JSONValue) -> PinView:
    kind, failed = stored_kind(kind)
    return PinView(
        unit=unit,
        position=position,
        kind=kind,
        key=key,
        attempts=attempts,
        failed=failed,
        raw=raw,
        fingerprint=None,
        at="scratch",
    )


def _changes(args: argparse.Namespace, a: list[UnitView], b: list[UnitView]) -> list[Change]:
    """`anagrapheus diff`'s changes, with the pins on both sides to show."""
    # As `diff` compares them by default: without the ids a provider gives each response.
    compared = run_diff(argparse.Namespace(**{**vars(args), "a": args.path, "b": args.against, "all": False}))
    pins = [{(u.unit_id, p.position): p for u in side for p in u.pins} for side in (a, b)]
    changes: list[Change] = []
    for unit in compared.data["units"]:
        for entry in unit["changes"]:
            sides: list[PinView | None] = [
                None if entry[name] is None else pins[i][(unit["unit"], entry[name]["position"])]
                for i, name in enumerate(("a", "b"))
            ]
            changes.append(
                Change(unit["unit"], entry["change"], sides[0], sides[1], tuple(entry["moved"]), entry["result"])
            )
    return changes


def _nearest(units: list[UnitView], key: str | None) -> PinView | None:
    return next((pin for unit in units for pin in unit.pins if pin.key == key), None) if key else None


def run(args: argparse.Namespace) -> Outcome:
    """Write the page and say where."""
    miss, recording = None, None
    if args.miss is not None:
        try:
            miss, recording = read_miss(args.miss)
        except AnagrapheusError as e:
            raise bad_input(e, path=args.miss) from e
    path: str | None = args.path or recording
    if path is None:
        raise BadInput("name a recording or a database to view (or a --miss file that names its recording)", path=".")
    if args.against is not None and miss is not None:
        raise BadInput("--against and --miss show two different divergences: give one of them", path=path)
    output = Path(args.output or f"{path}.html")
    for given in (path, args.against, args.miss):
        # A page written over the log or recording it shows would destroy it (issue #35): refused before reading.
        if given is not None and output.exists() and output.resolve() == Path(given).resolve():
            raise BadInput("view never writes over its own input: name another -o FILE", path=str(output))
    if args.max_pins < 1:
        raise BadInput(f"--max-pins must be a positive number of pins, not {args.max_pins}", path=path)
    source = open_source(path, units=args.unit, seal="ignore")
    # A page of the whole file shows its first pins and counts the rest; --against compares every pin.
    budget = None if args.unit or args.against is not None else args.max_pins
    units = units_of(source, args, budget=budget)
    header: dict[str, Any] | None = source.header.model_dump(mode="json") if source.header is not None else None
    changes: list[Change] | None = None
    title = f"anagrapheus: {path}"
    if args.against is not None:
        changes = _changes(args, units, units_of(open_source(args.against, units=args.unit, seal="ignore"), args))
        title = f"anagrapheus: {path} against {args.against}"
    page = render_page(
        title=title,
        header=header,
        units=units,
        miss=miss,
        nearest=_nearest(units, miss.nearest_key) if miss is not None else None,
        changes=changes,
        labels=(path, args.against or ""),
    )
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as e:
        raise BadInput(f"cannot write the page ({e.strerror or e})", path=str(output)) from e
    pins = sum(len(u.pins) + u.elided for u in units)
    elided = sum(u.elided for u in units)
    differing = bool(changes) or miss is not None
    data = {
        "path": path,
        "output": str(output),
        "units": len(units),
        "pins": pins,
        "shown": pins - elided,
        "differences": len(changes or []),
    }
    text = f"wrote {output}: {len(units)} unit(s), {pins} pin(s)"
    if elided:
        text += f" (the first {pins - elided} shown, --max-pins {args.max_pins}; a unit's page: --unit UNIT)"
    if changes is not None:
        text += f", {len(changes)} difference(s) against {args.against}"
    if miss is not None:
        text += f", the divergence of {args.miss}"
    # The page is written either way; the code says whether it shows a difference, as `diff` does.
    return Outcome(Exit.FAILED if differing and changes is not None else Exit.OK, text, data)


COMMAND = Command(
    "view",
    help="write one self-contained HTML page of a recording or a database, or of a divergence",
    description="Write a page that opens from file:// with no network: the header and provenance, each unit"
    " with its state, each pin as its call rendered (model responses with their text, tool calls and"
    " thinking; tool results; failures), and what was asked. With --against, the pins that differ side by side"
    " with the moved fields highlighted; with --miss, where a strict replay left the recording.",
    arguments=_arguments,
    run=run,
)
