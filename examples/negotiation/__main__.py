"""Run the negotiation demo: replay the committed recording offline (default), record anew, or show a divergence."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import sys
from pathlib import Path

from anagrapheus import AnagrapheusError, cli
from anagrapheus.testing.miss import write_miss
from examples.negotiation.candidates import CANDIDATES
from examples.negotiation.runs import (
    DEFAULT_SEED,
    PROVIDERS,
    RECORDING,
    ProviderUnavailable,
    ReplayReport,
    record_negotiation,
    replay_negotiation,
)
from examples.negotiation.talks import TREATY, RoundConcluded


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _glossed(field: str) -> str:
    """A fingerprint field name, with what it means in this negotiation."""
    name = field.lstrip("+-")
    if name == "messages[0]":
        return f"{field} (the round's prompt)"
    if name.startswith("messages["):
        return f"{field} (a later message of the run: a tool call or its result)"
    if name == "model":
        return f"{field} (the model's id)"
    return field


def _print_round(outcome: RoundConcluded) -> None:
    print(f"Round {outcome.round}: the {outcome.topic}")
    print(f"  EU: {outcome.eu}")
    print(f"  UK: {outcome.uk}")


def _print_replay(report: ReplayReport) -> None:
    models = report.recording.header.models
    for outcome in report.rounds:
        _print_round(outcome)
    print()
    if report.rounds:
        print(f"Treaty {TREATY!r}: entity id {report.rounds[0].treaty_id}, re-established from the recording")
    if report.diverged is not None:
        diverged = report.diverged
        divergence = diverged.divergence
        model = models.get(diverged.party.code, "?")
        print(
            f"Diverged in round {diverged.round_no}, at the {diverged.party.code} negotiator ({model}),"
            f" after {divergence.after_hits} pin(s) of that round were replayed:"
        )
        print(f"  no pin for this {divergence.kind}: {divergence.key}")
        if divergence.nearest_key is not None:
            moved = ", ".join(_glossed(field) for field in divergence.moved) or "nothing the fingerprint can see"
            print(f"  what moved against the nearest recorded call: {moved}")
        for note in divergence.notes:
            print(f"  {note}")
        print("  Strict replay stopped before reaching the model. To record the changed run, use --record.")
    calls = ", ".join(f"{model_id} {count}" for model_id, count in report.model_calls.items())
    print(f"Pins answered from the recording: {report.hits}")
    print(f"Model calls: {sum(report.model_calls.values())} ({calls}); world readings: {report.world_readings}")


def _write_view(recording: Path, report: ReplayReport, page: Path) -> None:
    """Write `anagrapheus view`'s page of the recording, showing the divergence when the replay left it."""
    command = ["view", str(recording), "-o", str(page)]
    if report.diverged is not None:
        miss = write_miss(report.diverged.divergence, page.with_suffix(".miss.json"), recording=recording)
        command += ["--miss", str(miss)]
    with contextlib.redirect_stdout(io.StringIO()):
        cli.main(command)
    print(f"Wrote {_shown(page)}: open it in a browser (j/k move between pins, d jumps to the divergence)")


DEFAULT_MIN_SHARE = 0.8
"""`--evals` fails (exit 1) when a candidate passes an evaluator on fewer than this share of the cases."""


def _share(text: str) -> float:
    """A share from 0 to 1, as `--min-share` takes it."""
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError(f"a share from 0 to 1 (0.8 is 80%), not {text!r}")
    return share


def _evals(path: Path, min_share: float) -> int:
    """Score the two candidate pairs over the recording's runs, with pydantic-evals, the world pinned; gate them."""
    from anagrapheus.evals import below
    from examples.negotiation.evals import evaluate

    try:
        scored = evaluate(path)
    except AnagrapheusError as e:
        print(f"cannot evaluate: {e}", file=sys.stderr)
        return 2
    print(f"Scoring two candidate negotiators on {_shown(path)}: one case per recorded run, the world pinned.")
    failing: list[str] = []
    for name, result in scored.items():
        passed = ", ".join(f"{evaluator} {share:.0%}" for evaluator, share in result.passed.items())
        failures = len(result.report.failures)
        print(f"  {name:<12} {len(result.report.cases)} case(s) scored, {failures} failed to run: {passed}")
        low = below(result.report, min_share)
        if low:
            failing.append(f"{name} ({', '.join(f'{evaluator} {share:.0%}' for evaluator, share in low.items())})")
    if failing:
        print(f"Below the threshold of {min_share:.0%} (--min-share): {'; '.join(failing)}")
        return 1
    print(f"Every candidate passed every evaluator on at least {min_share:.0%} of the cases (--min-share).")
    return 0


def _fork(path: Path) -> int:
    """Fork the UK's turn of round 2 onto the hard-line model and show where it left the recording."""
    from examples.negotiation.evals import fork_round_two

    try:
        forked = fork_round_two(path)
    except AnagrapheusError as e:
        print(f"cannot fork: {e}", file=sys.stderr)
        return 1
    print(f"Forked unit {forked.origin} after the UK's first answer, onto scripted-uk-hardliner:")
    print(f"  new unit {forked.unit_id}: {forked.replayed} pin(s) answered from the recording, then live")
    print(f"  UK: {forked.result.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.negotiation",
        description="A four-round EU-UK fisheries negotiation, pinned with anagrapheus. By default the committed"
        " recording is replayed offline, strictly, into a fresh database: no model and no network is reached.",
    )
    parser.add_argument("--recording", type=Path, default=None, help=f"the recording file (default {RECORDING})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true", help="hold the negotiation live and rewrite the recording")
    mode.add_argument(
        "--diverge", action="store_true", help="reword one prompt, replay strictly, and show where and what moved"
    )
    mode.add_argument(
        "--regress",
        action="store_true",
        help="judge three candidate negotiators against the recording: passed, failed, diverged",
    )
    mode.add_argument(
        "--evals",
        action="store_true",
        help="score two candidate negotiators with pydantic-evals on the pinned world (installed beside)",
    )
    parser.add_argument(
        "--min-share",
        type=_share,
        default=DEFAULT_MIN_SHARE,
        metavar="SHARE",
        help="with --evals: the share of cases (0 to 1) each candidate must pass with each evaluator, else exit 1"
        f" (default {DEFAULT_MIN_SHARE})",
    )
    mode.add_argument(
        "--fork",
        action="store_true",
        help="replay the UK's turn of round 2 to its first answer, then go on live on another model, into a new unit",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of a scripted recording's world and ids")
    parser.add_argument(
        "--provider",
        choices=sorted(PROVIDERS),
        help="with --record: real models through this provider (needs its extra and API key)",
    )
    parser.add_argument(
        "--view",
        type=Path,
        metavar="PAGE",
        help="after a replay, write a page of it (with --diverge, of where it left the recording) to open in a browser",
    )
    parser.add_argument("--eu-model", help="with --provider: the EU negotiator's model name")
    parser.add_argument("--uk-model", help="with --provider: the UK negotiator's model name")
    args = parser.parse_args(argv)
    if args.provider and not args.record:
        parser.error("--provider only applies to --record; a replay never reaches a provider")

    if args.record:
        default = RECORDING if args.provider is None else RECORDING.with_name(f"negotiation-{args.provider}.jsonl")
        path: Path = args.recording or default
        who = "scripted models, offline" if args.provider is None else f"{args.provider} models"
        print(f"Recording the negotiation with {who} into {_shown(path)}")
        try:
            asyncio.run(
                record_negotiation(
                    path,
                    seed=args.seed,
                    provider=args.provider,
                    eu_model=args.eu_model,
                    uk_model=args.uk_model,
                    on_round=_print_round,
                )
            )
        except ProviderUnavailable as e:
            print(e, file=sys.stderr)
            return 2
        except Exception as e:  # a provider error, say: the round was abandoned and the old file stands
            print(f"recording failed: {type(e).__name__}: {e}; {_shown(path)} was not written", file=sys.stderr)
            return 1
        print(f"Wrote {_shown(path)}; replay it with: python -m examples.negotiation --recording {_shown(path)}")
        return 0

    path = args.recording or RECORDING
    if args.regress:
        print(f"Judging three candidates against {_shown(path)}, offline: the talks' invariants after every turn.")
        for name, candidate in CANDIDATES.items():
            try:
                verdict = candidate(path)
            except AnagrapheusError as e:
                print(f"cannot replay: {e}", file=sys.stderr)
                return 1
            print()
            print(f"$ anagrapheus regress examples.negotiation.candidates:{name} --recording {_shown(path)}")
            print(verdict.describe())
            print(f"(exit {verdict.exit_code})")
        return 0
    if args.evals:
        return _evals(path, args.min_share)
    if args.fork:
        return _fork(path)
    how = "with the UK's round-3 prompt reworded" if args.diverge else "strictly"
    print(f"Replaying {_shown(path)} {how}, into a fresh database: no model, no network.")
    try:
        report = asyncio.run(replay_negotiation(path, diverge=args.diverge))
    except AnagrapheusError as e:
        print(f"cannot replay: {e}", file=sys.stderr)
        return 1
    print(f"Recorded with: {report.recording.header.recorded_with}")
    print()
    _print_replay(report)
    if args.view is not None:
        _write_view(path, report, args.view)
    if report.diverged is not None and not args.diverge:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
