"""`anagrapheus rerun`: ask a recording's runs again of an agent, from their recorded inputs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic_ai import Agent

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome, bad_input
from anagrapheus.cli.sources import Source, load_function, load_typed, open_source
from anagrapheus.errors import AnagrapheusError, UsageError
from anagrapheus.testing.rerun import rerun_events
from anagrapheus.testing.trials import trial_events
from anagrapheus.timeline.provenance import check_provenance

T = TypeVar("T")

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `rerun`."""
    parser.add_argument("source", metavar="FILE_OR_DB", help="a recording or an anagrapheus SQLite database")
    parser.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="the pydantic-ai Agent to ask")
    parser.add_argument("--unit", metavar="ID", help="the unit whose runs to ask again (default: every unit)")
    parser.add_argument(
        "--live-model", action="store_true", help="draw model requests live; the world is still answered from pins"
    )
    parser.add_argument(
        "--drift",
        action="store_true",
        help="draw every model request live (the world still from pins) and say, per call, what the provider now"
        " answers differently; the recording is left as it is (exit 0 unchanged, 1 drifted)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="with --drift: compare the ids a provider gives each response (provider_response_id) too",
    )
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="ask each recorded run N times with the model live (the world from pins) and report the share whose"
        " outcome (output and tool calls) is the recorded one",
    )
    parser.add_argument(
        "--min-share",
        type=float,
        metavar="SHARE",
        help="with --trials: exit 1 when a run holds in fewer than this share (0 to 1) of its trials",
    )
    parser.add_argument(
        "--deps", metavar="MODULE:ATTR", help="a function of the recorded run (its .deps snapshot) giving the deps"
    )


def run(args: argparse.Namespace) -> Outcome:
    """Re-run the recorded runs and report each."""
    agent = load_typed(args.agent, Agent, what="a pydantic-ai Agent", make=False)
    deps: object = None
    if args.deps is not None:
        deps = load_function(args.deps, what="a function of the recorded run")
    source = open_source(args.source, units=[args.unit] if args.unit else ())
    if args.trials is not None:
        return _trials(args, source, agent, deps)
    outcomes = _asked(
        args,
        source,
        lambda: rerun_events(
            source.events,
            agent,  # pyright: ignore[reportUnknownArgumentType]
            unit=args.unit,
            live_model=args.live_model,
            deps=deps,  # pyright: ignore[reportArgumentType]
            drift=args.drift,
            provider_ids=args.all,
        ),
    )
    statuses = {outcome.status for outcome in outcomes}
    failed = bool(statuses & {"failed", "drifted"})
    code = Exit.FAILED if failed else Exit.DIVERGED if "diverged" in statuses else Exit.OK
    how = "with the model live" if args.live_model else "strictly replayed"
    if args.drift:
        how = "every model call live against its recorded answer, the world from pins"
    lines = [f"rerun {args.source} against {args.agent}, {how}: {len(outcomes)} run(s)"]
    lines += [f"  {outcome.describe()}" for outcome in outcomes]
    if args.drift:
        calls = [call for outcome in outcomes for call in outcome.calls]
        moved = sum(1 for call in calls if call.status != "same")
        verdict = "drifted" if "drifted" in statuses else "unchanged"
        lines.append(f"{verdict}: {moved} of {len(calls)} model call(s) answered otherwise; the recording is as it was")
    runs: list[dict[str, Any]] = [
        {
            "unit": outcome.unit_id,
            "run_id": outcome.run_id,
            "status": outcome.status,
            "moved": list(outcome.moved),
            "detail": outcome.detail,
            "calls": [
                {"position": call.position, "key": call.key, "status": call.status, "difference": call.difference}
                for call in outcome.calls
            ],
        }
        for outcome in outcomes
    ]
    return Outcome(code, "\n".join(lines), {"source": args.source, "agent": args.agent, "runs": runs})


def _asked(args: argparse.Namespace, source: Source, ask: Callable[[], T]) -> T:
    """Check the recording's provenance, then `ask` it again; what either refuses is bad input (exit 2)."""
    try:
        if source.header is not None:
            # As `check` and replay refuse them: pins keyed under another scheme or call policy answer nothing here.
            check_provenance(source.header.provenance, path=args.source, rerecord=source.header.rerecord)
        return ask()
    except UsageError as e:
        raise BadInput(str(e), path=args.source) from e
    except AnagrapheusError as e:
        raise bad_input(e, path=args.source) from e


def _trials(args: argparse.Namespace, source: Source, agent: object, deps: object) -> Outcome:
    """`--trials N`: each recorded run asked N times live, the share that held, gated by `--min-share`."""
    if args.min_share is not None and not 0 <= args.min_share <= 1:
        raise BadInput(f"--min-share is a share from 0 to 1, not {args.min_share}", path=args.source)
    outcomes = _asked(
        args,
        source,
        lambda: trial_events(
            source.events,
            agent,  # pyright: ignore[reportArgumentType]
            times=args.trials,
            unit=args.unit,
            deps=deps,  # pyright: ignore[reportArgumentType]
        ),
    )
    lines = [
        f"trials of {args.source} against {args.agent}: {len(outcomes)} run(s), {args.trials} trial(s) each,"
        " the model live, the world from pins"
    ]
    lines += [f"  {outcome.describe()}" for outcome in outcomes]
    held = sum(outcome.matched for outcome in outcomes)
    asked = sum(outcome.trials for outcome in outcomes)
    lines.append(f"held: {held} of {asked} trial(s) ({held / asked:.0%}) gave the recorded outcome")
    low = [o for o in outcomes if args.min_share is not None and o.share < args.min_share]
    if low:
        lines.append(f"below --min-share {args.min_share:.0%}: {len(low)} run(s)")
    runs: list[dict[str, Any]] = [
        {
            "unit": o.unit_id,
            "run_id": o.run_id,
            "trials": o.trials,
            "matched": o.matched,
            "share": o.share,
            "other": o.other,
        }
        for o in outcomes
    ]
    data = {
        "source": args.source,
        "agent": args.agent,
        "trials": args.trials,
        "min_share": args.min_share,
        "runs": runs,
    }
    return Outcome(Exit.FAILED if low else Exit.OK, "\n".join(lines), data)


COMMAND = Command(
    "rerun",
    help="ask each recorded run of a unit again of an agent, from its recorded inputs",
    description="Ask each recorded run of a unit (or of every unit) again of the agent MODULE:ATTR, from the"
    " prompt and history the recording holds, strictly replayed (nothing reaches the model or the world), or"
    " with --live-model the model drawn live and the tools and MCP servers still answered from pins. Each run"
    " is same, diverged (what moved) or failed. Exit 0 when every run is the same, 3 when one diverged, 1 when"
    " one failed. With --drift, every model request is drawn live and its answer compared with the recorded one,"
    " per call: exit 0 unchanged, 1 drifted; nothing is written. With --trials N, each run is asked N times live"
    " and the share whose outcome (output, tool calls) is the recorded one reported; --min-share gates it.",
    arguments=_arguments,
    run=run,
)
