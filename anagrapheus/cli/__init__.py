"""The `anagrapheus` command: inspect, compare, check, reseal, export, rerun, rekey, upcast, copy, unlock, view.

Every command takes `--json`, and they share exit codes: 0 ok, 1 failed (a difference or a
violated check or invariant), 2 bad input (naming the file and line), 3 diverged.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from anagrapheus.cli import (
    check,
    copy,
    diff,
    entropy,
    export,
    regress,
    rekey,
    rerun,
    reseal,
    show,
    unlock,
    upcast,
    view,
)
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input, emit
from anagrapheus.errors import AnagrapheusError, UnresolvedName

__all__ = ["Exit", "main", "parser"]

# Each command module declares its subcommand; a new command is one more module here.
COMMANDS = tuple(
    module.COMMAND
    for module in (show, diff, check, reseal, export, upcast, regress, rerun, rekey, copy, unlock, view, entropy)
)


def parser() -> argparse.ArgumentParser:
    """The `anagrapheus` argument parser, with every subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print a JSON report on stdout instead of text")
    root = argparse.ArgumentParser(
        prog="anagrapheus",
        description="Inspect, compare, validate, export, upcast and copy anagrapheus recordings and event logs, and"
        " judge candidate agents against recordings. Exit codes: 0 ok, 1 failed (a difference, a violated check"
        " or invariant), 2 bad input (names the file and line), 3 diverged.",
    )
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands.add_parser, common)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code."""
    args = parser().parse_args(argv)
    try:
        outcome: Outcome = args.run(args)
    except BadInput as e:
        outcome = e.outcome()
    except UnresolvedName as e:
        # A MODULE:ATTR that does not import, or is not what the option takes: bad input, named as given.
        outcome = BadInput(e.message, path=e.spec).outcome()
    except AnagrapheusError as e:
        # A refusal the command did not word itself (a tampered file read deep inside, say): still bad input,
        # typed and on one line with exit 2, never a traceback with exit 1, which means "a run failed" (issue #35).
        given = (getattr(args, name, None) for name in ("source", "input", "path", "database"))
        outcome = bad_input(e, path=next((str(path) for path in given if isinstance(path, str)), ".")).outcome()
    return emit(outcome, as_json=args.json)
