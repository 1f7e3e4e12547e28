"""`anagrapheus regress`: judge a candidate agent against a recording: passed (0), failed (1) or diverged (3)."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.cli.sources import load_function
from anagrapheus.errors import AnagrapheusError, UsageError
from anagrapheus.testing import Verdict
from anagrapheus.testing.regress import OnMiss

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `regress`."""
    parser.add_argument("candidate", metavar="MODULE:FUNCTION", help="returns the candidate's Verdict")
    parser.add_argument("--recording", required=True, metavar="FILE", help="the recording to replay")
    parser.add_argument(
        "--on-miss",
        choices=("strict", "record"),
        default=None,
        help="strict: a miss is a divergence (default); record: misses are drawn from the real model",
    )
    # The replay gate's spelling of --on-miss (pinned is strict, live is record): a reference page's, kept as it is.
    parser.add_argument("--policy", choices=("pinned", "live"), default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> Outcome:
    """Run the candidate's regression and report its verdict."""
    candidate = load_function(args.candidate, what="a function")
    on_miss = _on_miss(args)
    try:
        verdict = candidate(args.recording, **_asked(candidate, args.candidate, on_miss))
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


def _on_miss(args: argparse.Namespace) -> OnMiss:
    """`--on-miss`, or what the replay gate's `--policy` spells; strict when neither is given."""
    if args.policy is None:
        return args.on_miss or "strict"
    if args.on_miss is not None:
        raise BadInput("give --on-miss or --policy, not both: --policy is the replay gate's spelling", path=args.policy)
    return "strict" if args.policy == "pinned" else "record"


def _asked(candidate: Callable[..., object], name: str, on_miss: OnMiss) -> dict[str, str]:
    """The keyword the candidate takes the miss rule by: `on_miss`, or the replay gate's `policy`."""
    signature = inspect.signature(candidate)
    try:
        signature.bind("recording", on_miss=on_miss)
    except TypeError as e:
        try:
            old = "pinned" if on_miss == "strict" else "live"
            signature.bind("recording", policy=old)
        except TypeError:
            raise BadInput(f"must take (recording, *, on_miss): {e}", path=name) from None
        return {"policy": old}
    return {"on_miss": on_miss}


COMMAND = Command(
    "regress",
    help="replay a recording against a candidate and judge it: passed, failed or diverged",
    description="Call MODULE:FUNCTION(recording, on_miss=...), a function of the project that runs"
    " anagrapheus.testing.regress for a candidate and returns its Verdict, and print the verdict. Exit 0 when"
    " every invariant held, 1 when one was violated, 3 when the candidate left the recording (under strict).",
    arguments=_arguments,
    run=run,
)
