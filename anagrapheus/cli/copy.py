"""`anagrapheus copy`: move a log between a SQLite file and a PostgreSQL schema, keeping seq, ids and times."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import refuse_foreign_database
from anagrapheus.errors import AnagrapheusError
from anagrapheus.timeline import copy_log, open_store
from anagrapheus.timeline.secrets import masked_dsn, masked_message
from anagrapheus.timeline.stores.opening import is_postgres
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore

if TYPE_CHECKING:
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `copy`."""
    parser.add_argument("source", metavar="SRC", help="the log to copy: a SQLite file or a postgresql:// URI")
    parser.add_argument("destination", metavar="DST", help="where to copy it: a SQLite file or a postgresql:// URI")
    parser.add_argument(
        "--schema", default="anagrapheus", help="the PostgreSQL schema, on either side (default anagrapheus)"
    )
    parser.add_argument("--source-schema", metavar="SCHEMA", help="the source's PostgreSQL schema, if it differs")
    parser.add_argument(
        "--destination-schema", metavar="SCHEMA", help="the destination's PostgreSQL schema, if it differs"
    )
    parser.add_argument("--batch", type=int, default=1000, help="events per transaction (default 1000)")


def _shown(address: str) -> str:
    """The address as it may be printed: no password in it (userinfo, `?password=`, keyword DSN) is ever shown."""
    return masked_dsn(address)


def _opened(address: str, *, schema: str, role: str) -> SQLiteEventStore | PostgresEventStore:
    """The store at `address`; one that cannot be opened is bad input, named without its password."""
    try:
        return open_store(address, schema=schema)
    except AnagrapheusError as e:
        raise BadInput(f"cannot open the {role} ({masked_message(str(e), address)})", path=_shown(address)) from e


def run(args: argparse.Namespace) -> Outcome:
    """Copy the log."""
    if not is_postgres(args.source) and not Path(args.source).is_file():
        # Opening a SQLite store creates its file: a mistyped source would copy an empty log.
        raise BadInput("no such log file", path=args.source)
    for address, role in ((args.source, "source"), (args.destination, "destination")):
        # Opening it as a store would add anagrapheus's tables to someone else's database.
        refuse_foreign_database(address, role=role)
    with ExitStack() as stores:
        source = stores.enter_context(_opened(args.source, schema=args.source_schema or args.schema, role="source"))
        destination = stores.enter_context(
            _opened(args.destination, schema=args.destination_schema or args.schema, role="destination")
        )
        try:
            before = destination.last_seq()
            copied = copy_log(source, destination, batch=args.batch)
            last = destination.last_seq()
        except AnagrapheusError as e:
            why = masked_message(masked_message(str(e), args.source), args.destination)
            raise BadInput(f"cannot copy into it ({why})", path=_shown(args.destination)) from e
    text = (
        f"copied {copied} event(s) from {_shown(args.source)} to {_shown(args.destination)}: seq {before + 1}..{last}"
    )
    if not copied:
        text = f"nothing to copy: {_shown(args.destination)} already holds {_shown(args.source)}'s {last} event(s)"
    return Outcome(Exit.OK, text, {"copied": copied, "first_seq": before + 1 if copied else None, "last_seq": last})


COMMAND = Command(
    "copy",
    help="copy a log between SQLite and PostgreSQL, keeping seq, event ids and times",
    description="Copy the events DST lacks from SRC, verbatim: seq, event ids, times and payloads. Each is a"
    " SQLite file or a postgresql:// URI (needs the postgres extra). DST must be empty or hold a prefix of SRC,"
    " so an interrupted copy resumes where it stopped. Scratch pins of open units are not copied.",
    arguments=_arguments,
    run=run,
)
