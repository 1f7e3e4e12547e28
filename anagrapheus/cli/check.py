"""`anagrapheus check`: validate recordings (format, events, unambiguous keys, provenance, no secrets, seal)."""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import Source, add_registry_options, event_types, open_source, upcasts_of
from anagrapheus.errors import AnagrapheusError, CorruptEvent, ProvenanceMismatch, SealBroken
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinPromoted,
    ProvenanceWarning,
    SecretFinding,
    SecretScanner,
    UpcastRegistry,
)
from anagrapheus.timeline.ages import expired, unit_ages
from anagrapheus.timeline.canonical import stored_json
from anagrapheus.timeline.provenance import check_provenance

__all__ = ["CHECKS", "COMMAND", "Check", "CheckContext", "Problem", "run"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing a check found wrong, with the exit code it deserves and where it is."""

    code: Exit
    """`Exit.BAD_INPUT` for what cannot be read or trusted, `Exit.FAILED` for a violated rule, `Exit.OK` for a note."""
    message: str
    """What is wrong."""
    line: int | None = None
    """The recording line (None for a database event or the whole file)."""
    seq: int | None = None
    """The event's seq, for a database."""


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What checks may need besides the source: the event types and upcasts to decode with."""

    types: EventTypeRegistry
    """The built-in event types and the application's."""
    upcasts: UpcastRegistry | None
    """The application's upcasts."""
    max_age: timedelta | None = None
    """With `--max-age`: how long ago a unit may have been recorded."""


Check = Callable[[Source, CheckContext], Iterable[Problem]]
"""One validation over a readable source."""


def _at(source: Source, index: int) -> dict[str, Any]:
    line = source.line(index)
    return {"line": line, "seq": None if line is not None else source.events[index].seq}


def events_decode(source: Source, context: CheckContext) -> Iterable[Problem]:
    """Every event decodes into its registered type, old versions upcast to the current one."""
    for index, stored in enumerate(source.events):
        try:
            context.types.decode(stored, upcasts=context.upcasts)
        except AnagrapheusError as e:
            hint = "; pass the application's types with --events MODULE:NAME" if "unknown event type" in str(e) else ""
            if isinstance(e, CorruptEvent):
                hint = (
                    f" (event type {stored.namespace}:{stored.type}; its row was altered outside anagrapheus,"
                    " or the file is damaged)"
                )
            yield Problem(Exit.BAD_INPUT, f"{e}{hint}", **_at(source, index))


# A pin key's scheme: `p1` in `p1:model_call:<sha256>`. A key of another shape (a resolver's own) has none.
_SCHEME = re.compile(r"(p[0-9]+):")


def keys_unambiguous(source: Source, context: CheckContext) -> Iterable[Problem]:
    """No key is pinned with different results, nor under two key schemes, so the file can answer every key it holds."""
    first: dict[bytes, tuple[int, str, bytes]] = {}
    schemes: dict[str, int] = {}
    for index, stored in enumerate(source.events):
        try:
            event = context.types.decode(stored, upcasts=context.upcasts)
        except AnagrapheusError:
            continue  # reported by events_decode
        if not isinstance(event, PinPromoted):
            continue
        scheme = _SCHEME.match(event.key)
        if scheme is not None:
            schemes.setdefault(scheme.group(1), index)
        # Digests of the key and the result, not their texts, and each unit's id once: a large recording's pins are
        # not held all at once.
        raw = hashlib.blake2b(stored_json(event.raw).encode(), digest_size=16).digest()
        key = hashlib.blake2b(event.key.encode(), digest_size=16).digest()
        seen = first.setdefault(key, (index, sys.intern(event.unit_id), raw))
        if seen[2] != raw:
            where = source.where(seen[0])
            yield Problem(
                Exit.FAILED,
                f"ambiguous key {event.key}: unit {event.unit_id} pinned a different result than unit {seen[1]}"
                f" ({where}); replay one unit at a time, or re-record",
                **_at(source, index),
            )
    if len(schemes) > 1:
        # Replay asks under one scheme: the pins of every other could never answer.
        (one, at), *others = sorted(schemes.items(), key=lambda item: item[1])
        named = ", ".join(f"{scheme} (first at {source.where(index)})" for scheme, index in others)
        yield Problem(
            Exit.BAD_INPUT,
            f"pins mix key schemes: {one} (first at {source.where(at)}) and {named}. A replay asks under one scheme,"
            " so the other's pins never answer: record the run again, or keep one scheme's pins per file",
            **_at(source, others[0][1]),
        )


def sealed(source: Source, context: CheckContext) -> Iterable[Problem]:
    """A recording is sealed (its lines were checked against the seal as it was read); an unsealed one is noted."""
    if source.kind == "recording" and not source.sealed:
        yield Problem(
            Exit.OK,
            "unsealed: a line edited by hand would pass unnoticed; seal it as it stands with `anagrapheus reseal`",
            line=1,
        )


def no_secrets(source: Source, context: CheckContext) -> Iterable[Problem]:
    """No credential-shaped string (what `write_recording` refuses) in the header or any event."""
    scanner = SecretScanner()
    findings: list[tuple[int | None, SecretFinding]] = []
    if source.header is not None:
        findings.extend((None, finding) for finding in scanner.scan(source.header.model_dump(mode="json")))
    for index, stored in enumerate(source.events):
        try:
            line = stored.to_json()
        except CorruptEvent:
            continue  # a payload that does not parse is reported by events_decode, naming its seq and type
        findings.extend((index, finding) for finding in scanner.scan(line, seq=stored.seq))
    for index, finding in findings:
        where = {"line": 1, "seq": None} if index is None else _at(source, index)
        yield Problem(Exit.FAILED, f"{finding.describe()}; redact or re-record it before committing", **where)


def provenance_compatible(source: Source, context: CheckContext) -> Iterable[Problem]:
    """The header's provenance fits this installation: same key scheme and call policy (else 2); versions noted."""
    if source.header is None or source.header.provenance is None:
        return  # a database, or a version 1 recording made before provenance was stamped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_provenance(
                source.header.provenance, path=str(source.path), rerecord=source.header.rerecord, check="warn"
            )
        except ProvenanceMismatch as e:
            yield Problem(Exit.BAD_INPUT, str(e).removeprefix(f"{source.path}:1: "), line=1)
    for warning in caught:
        if issubclass(warning.category, ProvenanceWarning):
            yield Problem(Exit.OK, str(warning.message).removeprefix(f"{source.path}: "), line=1)


def recent_enough(source: Source, context: CheckContext) -> Iterable[Problem]:
    """With `--max-age`: no unit recorded longer ago (by the instants its runs were given); unknown dates noted."""
    if context.max_age is None:
        return
    ages = unit_ages(source.events)
    for unit, when in expired(ages, context.max_age).items():
        yield Problem(Exit.FAILED, f"unit {unit} was recorded {when}: older than --max-age {context.max_age.days} days")
    unknown = [unit for unit, age in ages.items() if age.recorded_at is None]
    if unknown:
        yield Problem(Exit.OK, f"no recorded date (no run clock pinned) for unit(s) {', '.join(unknown)}: not judged")


CHECKS: list[tuple[str, Check]] = [
    ("events", events_decode),
    ("keys", keys_unambiguous),
    ("provenance", provenance_compatible),
    ("secrets", no_secrets),
    ("seal", sealed),
    ("age", recent_enough),
]
"""The checks run after the format check, by name; a new check is one more entry."""


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `check`."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="recordings or anagrapheus SQLite databases")
    parser.add_argument(
        "--max-age",
        type=float,
        metavar="DAYS",
        help="fail (exit 1) when a unit was recorded longer ago than DAYS (by the instants its runs were given)",
    )
    add_registry_options(parser)


def _report(path: str, problems: list[tuple[str, Problem]], events: int | None) -> dict[str, Any]:
    worst = max((problem.code for _, problem in problems), default=Exit.OK)  # a note (OK) changes nothing
    return {
        "path": path,
        "status": {Exit.OK: "ok", Exit.FAILED: "failed", Exit.BAD_INPUT: "bad input"}[worst],
        "events": events,
        "problems": [
            {"check": name, "code": int(p.code), "line": p.line, "seq": p.seq, "message": p.message}
            for name, p in problems
        ],
    }


def check_path(path: str, context: CheckContext) -> dict[str, Any]:
    """Run the format check, then every check in `CHECKS`, on one file."""
    try:
        source = open_source(path, streamed=True)
    except BadInput as e:
        # Named as the error names it: a URI without its password. A line that no longer matches the seal is
        # the seal's finding: nothing else is said of a file that cannot be trusted.
        check = "seal" if isinstance(e.__cause__, SealBroken) else "format"
        return _report(e.path, [(check, Problem(Exit.BAD_INPUT, e.message, line=e.line, seq=e.seq))], None)
    problems = [(name, problem) for name, check in CHECKS for problem in check(source, context)]
    return _report(path, problems, len(source.events))


def run(args: argparse.Namespace) -> Outcome:
    """Check every path; the exit code is the worst found."""
    max_age = None if args.max_age is None else timedelta(days=args.max_age)
    context = CheckContext(types=event_types(args.events), upcasts=upcasts_of(args.upcasts), max_age=max_age)
    reports = [check_path(path, context) for path in args.paths]
    lines: list[str] = []
    worst = Exit.OK
    for report in reports:
        problems: list[dict[str, Any]] = report["problems"]
        if not any(problem["code"] != Exit.OK for problem in problems):
            run_checks = [name for name, _ in CHECKS if name != "age" or max_age is not None]
            checks = ", ".join(["format", *run_checks])
            lines.append(f"{report['path']}: ok, {report['events']} event(s) ({checks})")
        for problem in problems:
            worst = max(worst, Exit(problem["code"]))
            where = report["path"]
            if problem["line"] is not None:
                where += f":{problem['line']}"
            elif problem["seq"] is not None:
                where += f" (seq {problem['seq']})"
            note = "note: " if problem["code"] == Exit.OK else ""
            lines.append(f"{where}: [{problem['check']}] {note}{problem['message']}")
    # Bad input outranks a violated rule: a file that cannot be trusted says nothing about its rules.
    return Outcome(
        worst, "\n".join(lines), {"status": reports[0]["status"] if len(reports) == 1 else None, "files": reports}
    )


COMMAND = Command(
    "check",
    help="validate recordings: format, events decode and upcast, no ambiguous keys, provenance, no secrets, seal, age",
    description="Validate recordings (or databases). Exit 2 when one cannot be read or trusted (naming the file"
    " and line: a line that no longer matches the recording's seal, pins under two key schemes, an incompatible"
    " provenance too), 1 when one breaks a rule (an ambiguous key, a credential), 0 when all are sound. Another"
    " anagrapheus or pydantic-ai version than the recording's, or a recording without a seal, is a note. With"
    " --max-age DAYS, a unit recorded longer ago fails too.",
    arguments=_arguments,
    run=run,
)
