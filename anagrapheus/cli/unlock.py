"""`anagrapheus unlock`: free the lease of a unit whose worker is gone, so the unit can be resumed."""

from __future__ import annotations

import argparse
from pathlib import Path

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import is_log
from anagrapheus.errors import StoreError, UnitBusy
from anagrapheus.timeline import SQLiteEventStore

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `unlock`."""
    parser.add_argument("database", metavar="DB", help="an anagrapheus SQLite database")
    parser.add_argument("--unit", action="append", required=True, metavar="ID", help="a unit to free (repeatable)")
    parser.add_argument(
        "--force", action="store_true", help="free it even from a process alive on this host (two workers may draw)"
    )


def run(args: argparse.Namespace) -> Outcome:
    """Free the units' leases."""
    if not Path(args.database).is_file():
        raise BadInput("no such log file", path=args.database)
    if not is_log(Path(args.database)):
        raise BadInput("not an anagrapheus event log: it has no leases to free", path=args.database)
    lines: list[str] = []
    freed: list[dict[str, object]] = []
    code = Exit.OK
    try:
        with SQLiteEventStore(args.database) as store:
            for unit in args.unit:
                try:
                    held = store.break_lease(unit, force=args.force)
                except UnitBusy:
                    held = store.lease_holder(unit)
                    where = f" (pid {held.pid})" if held is not None else ""
                    lines.append(
                        f"unit {unit}: held by a process alive on this host{where}; stop it first, or pass --force"
                    )
                    code = Exit.FAILED
                    continue
                if held is None:
                    lines.append(f"unit {unit}: no lease to free")
                    continue
                freed.append({"unit": unit, "host": held.host, "pid": held.pid})
                lines.append(f"unit {unit}: freed the lease of pid {held.pid} on host {held.host}")
    except StoreError as e:
        raise BadInput(str(e).removeprefix(f"{args.database}: "), path=args.database) from e
    return Outcome(code, "\n".join(lines), {"freed": freed})


COMMAND = Command(
    "unlock",
    help="free the lease of a unit whose worker is gone (a container restarted under a new host name)",
    description="Free the lease a worker holds on an open unit of a SQLite log, so another worker can resume"
    " it with the pins already drawn. A lease left by a process that died on this host is taken over without"
    " this; one left on another host cannot be checked, and stands until it is freed here. A holder alive on"
    " this host is refused (exit 1) unless --force.",
    arguments=_arguments,
    run=run,
)
