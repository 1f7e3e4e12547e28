"""`anagrapheus reseal`: accept a recording's lines as they stand, saying which changed since it was sealed."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.errors import AnagrapheusError
from anagrapheus.timeline import canonical_json, read_recording, write_recording
from anagrapheus.timeline.provenance import stamping_or_default
from anagrapheus.timeline.recording.compact import compact_line
from anagrapheus.timeline.recording.deltas import FingerprintDeltas, holds_deltas, holds_references
from anagrapheus.timeline.recording.responses import ResponseReferences
from anagrapheus.timeline.recording.seal import Sealer, seal_changes

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `reseal`."""
    parser.add_argument("path", metavar="PATH", help="the recording to seal as it stands")
    parser.add_argument("--dry-run", action="store_true", help="say what would be accepted, and write nothing")


def run(args: argparse.Namespace) -> Outcome:
    """Reseal PATH, after listing what the new seal accepts."""
    path = Path(args.path)
    if not path.is_file():
        raise BadInput("no such recording file", path=args.path)
    try:
        recording = read_recording(path, provenance="ignore", seal="ignore")
    except AnagrapheusError as e:
        raise bad_input(e, path=args.path) from e
    # The lines as `write_recording` writes them: canonical, so what is listed is what the new seal holds.
    # The file keeps its form: fingerprints as deltas in a version 3 file (and responses referred to, lines compact,
    # in a version 4 one), whole in an older one (which an older anagrapheus still reads), so what is listed is what
    # changed by hand, never the format.
    compact = holds_deltas(path)
    referring = compact and holds_references(path)
    sealer = Sealer()
    deltas = FingerprintDeltas()
    references = ResponseReferences(stamping_or_default(None).stamped_fields)
    for line, event in enumerate(recording.events, start=2):
        text = canonical_json(event.to_json())
        text = deltas.line(text) if compact else text
        sealer.add(event.correlation_id, compact_line(references.line(text)) if referring else text, line=line)
    # A seal that cannot be read (None under "ignore") accepts nothing: the file is sealed afresh, as unsealed.
    changes = seal_changes(recording.seal, sealer)
    data: dict[str, object] = {"path": args.path, "accepted": changes, "written": False}
    if not changes:
        return Outcome(Exit.OK, f"{args.path}: the seal holds; nothing to accept, nothing written", data)
    text = [f"{args.path}: accepting", *(f"  {change}" for change in changes)]
    if args.dry_run:
        return Outcome(Exit.OK, "\n".join([*text, "nothing written (--dry-run)"]), data)
    try:
        # The file keeps its permissions: a recording committed to a repository is usually readable by all.
        write_recording(
            path,
            recording.events,
            header=recording.header,
            mode=stat.S_IMODE(os.stat(path).st_mode),
            fingerprint_deltas=compact,
            compact_lines=referring,
        )
    except AnagrapheusError as e:
        raise bad_input(e, path=args.path) from e
    data["written"] = True
    return Outcome(Exit.OK, "\n".join([*text, f"sealed {path}"]), data)


COMMAND = Command(
    "reseal",
    help="seal a recording as it stands, listing the lines changed since it was sealed",
    description="Accept a recording's lines as they stand: list, per unit, the lines edited, added or deleted since"
    " it was last sealed (or that it was unsealed), then write it again with a new seal. A seal makes a hand edit"
    " visible to `check` and replay; it is not a signature, and anyone can reseal, so review what this lists."
    " Exit 0; 2 when PATH cannot be read as a recording.",
    arguments=_arguments,
    run=run,
)
