"""`anagrapheus export`: committed units of a production log, written as a recording to replay in tests."""

from __future__ import annotations

import argparse
import shlex

from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import open_source, unit_of
from anagrapheus.errors import AnagrapheusError, SecretInRecording
from anagrapheus.timeline import RecordingHeader, SecretPolicy, pin_events, write_recording

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:  # pyright: ignore[reportPrivateUsage]
    """Register `export`."""
    parser = commands.add_parser(
        "export",
        parents=[common],
        help="write committed units of a log as a recording (a regression fixture)",
        description="Write the pins of committed units of a database (or of a recording) as a recording with a"
        " header. A unit still open or abandoned has no committed pins and is refused.",
    )
    parser.add_argument("source", metavar="DB", help="an anagrapheus SQLite database (or a recording)")
    parser.add_argument("--unit", action="append", required=True, metavar="ID", help="a unit to export (repeatable)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the recording to write")
    parser.add_argument("--description", help="what run the recording holds (header)")
    parser.add_argument("--recorded-with", help="how the run was recorded (header)")
    parser.add_argument("--rerecord", help="the command that records it again (header)")
    parser.add_argument(
        "--redact",
        action="store_true",
        help="write credential-shaped strings as placeholders instead of refusing (a replay sees the placeholders)",
    )
    parser.add_argument(
        "--model", action="append", default=[], metavar="ROLE=ID", help="the model id behind a role (header)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Outcome:
    """Export the units."""
    source = open_source(args.source, units=args.unit)
    kept = list(pin_events(source.events, with_inputs=True))
    pins = [event for event in kept if event.type == "pin_promoted"]
    pinned = {unit_of(event) for event in pins}
    for unit in args.unit:
        if unit in pinned:
            continue
        why = "it has no committed pins"
        if any(pin.unit_id == unit for pin in source.scratch):
            why = "it is still open (its pins are in scratch): commit it first"
        elif any(unit_of(event) == unit for event in source.events):
            why = "it was abandoned, so its pins were never committed"
        raise BadInput(f"cannot export unit {unit}: {why}", path=args.source)
    models: dict[str, str] = {}
    for pair in args.model:
        role, equals, model_id = pair.partition("=")
        if not equals or not role or not model_id:
            raise BadInput("expected --model ROLE=ID", path=pair)
        models[role] = model_id
    units = " ".join(f"--unit {shlex.quote(unit)}" for unit in args.unit)
    header = RecordingHeader(
        description=args.description or f"Unit(s) {', '.join(args.unit)} of the log {source.path.name}.",
        recorded_with=args.recorded_with
        or f"Exported from the event log {source.path.name} by `anagrapheus export`: the pins are what the"
        " application drew when it ran these units.",
        rerecord=args.rerecord
        or f"anagrapheus export {shlex.quote(str(args.source))} {units} -o {shlex.quote(args.output)}",
        models=models,
        details={"exported_from": source.path.name, "units": list(args.unit)},
    )
    try:
        written = write_recording(args.output, kept, header=header, redact=SecretPolicy() if args.redact else None)
    except SecretInRecording as e:
        raise BadInput(f"{e}; or export with --redact", path=args.source) from e
    except (OSError, AnagrapheusError) as e:
        raise BadInput(f"cannot write the recording ({e})", path=args.output) from e
    runs = len(kept) - len(pins)
    text = (
        f"wrote {written}: {len(pins)} pin(s) and {runs} run(s)' inputs of {len(args.unit)} unit(s) from {source.path}"
    )
    return Outcome(Exit.OK, text, {"output": str(written), "units": list(args.unit), "pins": len(pins), "runs": runs})
