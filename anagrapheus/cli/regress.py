"""`anagrapheus regress`: judge a candidate agent against a recording: passed (0), failed (1) or diverged (3)."""

from __future__ import annotations

import argparse
import inspect

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.cli.sources import load_function
from anagrapheus.errors import AnagrapheusError, UsageError
from anagrapheus.testing import Verdict

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `regress`."""
    parser.add_argument("candidate", metavar="MODULE:FUNCTION", help="returns the candidate's Verdict")
    parser.add_argument("--recording", required=True, metavar="FILE", help="the recording to replay")
    parser.add_argument(
        "--policy",
        choices=("pinned", "live"),
        default="pinned",
        help="pinned: a miss is a divergence (default); live: misses are drawn from the real model",
    )


def run(args: argparse.Namespace) -> Outcome:
    """Run the candidate's regression and report its verdict."""
    candidate = load_function(args.candidate, what="a function")
    try:
        inspect.signature(candidate).bind(args.recording, policy=args.policy)
    except TypeError as e:
        raise BadInput(f"must take (recording, *, policy): {e}", path=args.candidate) from None
    try:
        verdict = candidate(args.recording, policy=args.policy)
    except UsageError as e:
        raise BadInput(str(e), path=args.candidate) from e
    except AnagrapheusError as e:
        # The recording could not serve: unreadable, ambiguous, or of another provenance.
        raise bad_input(e, path=args.recording) from e
    if not isinstance(verdict, Verdict):
        raise BadInput(f"returned {type(verdict).__qualname__}, not a Verdict", path=args.candidate)
    text = f"regress {args.candidate} against {args.recording}\n{verdict.describe()}"
    data = {"candidate": args.candidate, "recording": args.recording, **verdict.to_json()}
    return Outcome(Exit(verdict.exit_code), text, data)


COMMAND = Command(
    "regress",
    help="replay a recording against a candidate and judge it: passed, failed or diverged",
    description="Call MODULE:FUNCTION(recording, policy=...), a function of the project that runs"
    " anagrapheus.testing.regress for a candidate and returns its Verdict, and print the verdict. Exit 0 when"
    " every invariant held, 1 when one was violated, 3 when the candidate left the recording (under pinned).",
    arguments=_arguments,
    run=run,
)
