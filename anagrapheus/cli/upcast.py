"""`anagrapheus upcast`: rewrite an old recording at the current schema versions, byte-stable."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from pathlib import Path

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import add_registry_options, event_types, open_source, upcasts_of
from anagrapheus.errors import AnagrapheusError
from anagrapheus.timeline import StoredEvent, write_recording
from anagrapheus.timeline.recording.deltas import holds_deltas, holds_references

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `upcast`."""
    parser.add_argument("input", metavar="IN", help="the recording to read")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the recording to write (may be IN)")
    add_registry_options(parser)


def run(args: argparse.Namespace) -> Outcome:
    """Upcast IN into OUT."""
    types, upcasts = event_types(args.events), upcasts_of(args.upcasts)
    # Read once: a recording given through a pipe cannot be read a second time.
    source = open_source(args.input)
    if source.header is None:
        raise BadInput(
            "upcast rewrites recordings; a log is never rewritten (upcasts apply when it is read)", path=args.input
        )
    events: list[StoredEvent] = []
    moved: Counter[str] = Counter()
    for line, stored in enumerate(source.events, start=2):
        try:
            event = types.decode(stored, upcasts=upcasts)
        except AnagrapheusError as e:
            raise BadInput(str(e), path=args.input, line=line) from e
        if stored.schema_version == type(event).schema_version:
            events.append(stored)  # current already: its bytes stay as they are
            continue
        encoded = types.encode(event)
        events.append(dataclasses.replace(stored, schema_version=encoded.schema_version, payload=encoded.payload))
        moved[f"{stored.namespace}:{stored.type} v{stored.schema_version}->v{encoded.schema_version}"] += 1
    try:
        # Upcasting keeps the header, provenance included: what made the pins is still what made them.
        # A recording keeps its form: fingerprints whole in one an older reader reads (before version 3), responses
        # copied in one before version 4.
        recorded = source.kind == "recording" and Path(args.input).is_file()
        whole = recorded and not holds_deltas(Path(args.input))
        copied = recorded and not holds_references(Path(args.input))
        written = write_recording(
            args.output,
            events,
            header=source.header,
            fingerprint_deltas=not whole,
            compact_lines=not whole and not copied,
        )
    except (OSError, AnagrapheusError) as e:
        raise BadInput(f"cannot write the recording ({e})", path=args.output) from e
    steps = ", ".join(f"{name} x{count}" for name, count in sorted(moved.items())) or "none were old"
    text = f"wrote {written}: {sum(moved.values())} of {len(events)} event(s) upcast ({steps})"
    return Outcome(
        Exit.OK,
        text,
        {"input": args.input, "output": str(written), "events": len(events), "upcast": dict(sorted(moved.items()))},
    )


COMMAND = Command(
    "upcast",
    help="rewrite a recording with every event at its current schema version",
    description="Rewrite a recording with every old event upcast to its current schema version. Events already"
    " current keep their bytes, so upcasting a current recording, or upcasting twice, changes nothing.",
    arguments=_arguments,
    run=run,
)
