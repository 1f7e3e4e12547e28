"""`anagrapheus rekey`: re-key a recording offline, when a pydantic-ai release moved the keys of the calls it holds."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic_ai import Agent

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.cli.sources import load_function, load_typed, open_source
from anagrapheus.errors import AnagrapheusError, PinMiss
from anagrapheus.testing.rekey import rekey_events

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `rekey`."""
    parser.add_argument("input", metavar="IN", help="the recording whose keys moved")
    parser.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="the pydantic-ai Agent it recorded")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the re-keyed recording to write")
    parser.add_argument(
        "--deps", metavar="MODULE:ATTR", help="a function of the recorded run (its .deps snapshot) giving the deps"
    )
    parser.add_argument("--force", action="store_true", help="write over OUT if it exists (never over IN)")


def run(args: argparse.Namespace) -> Outcome:
    """Re-key IN into OUT and report what moved."""
    target = Path(args.output)
    if target.exists() and target.resolve() == Path(args.input).resolve():
        raise BadInput("a rekey never writes over its own input: name another -o OUT", path=args.output)
    if target.exists() and not args.force:
        raise BadInput("exists; pass --force to write over it", path=args.output)
    agent = load_typed(args.agent, Agent, what="a pydantic-ai Agent", make=False)
    deps = None if args.deps is None else load_function(args.deps, what="a function of the recorded run")
    source = open_source(args.input)
    if source.header is None:
        raise BadInput("rekey reads a recording (a database has no header to keep)", path=args.input)
    try:
        report = rekey_events(
            source.events,
            agent,  # pyright: ignore[reportUnknownArgumentType]
            target,
            header=source.header,
            deps=deps,  # pyright: ignore[reportArgumentType]
        )
    except PinMiss as e:
        raise BadInput(f"a call the recording holds no answer for, by key or by kind: {e}", path=args.input) from e
    except AnagrapheusError as e:
        raise bad_input(e, path=args.input) from e
    text = f"wrote {target}: {report.describe()}"
    moved = [
        {"unit": pin.unit_id, "kind": pin.kind, "old": pin.old_key, "new": pin.new_key, "moved": list(pin.moved)}
        for pin in report.rekeyed
    ]
    return Outcome(Exit.OK, text, {"input": args.input, "output": str(target), "runs": report.runs, "rekeyed": moved})


COMMAND = Command(
    "rekey",
    help="re-key a recording offline when a pydantic-ai release moved its keys",
    description="Ask each recorded run of IN again of the agent MODULE:ATTR, answering every call from the"
    " recording: by its key where the key still matches, else from the recorded pin of the same kind in the order"
    " recorded, stored under the key the call has now. No model, tool or network is reached. The runs must be"
    " asked as recorded (the same prompts, rendered instructions, settings and outcome), or nothing is written."
    " Exit 0 with OUT written, 2 when IN cannot be re-keyed.",
    arguments=_arguments,
    run=run,
)
