"""`anagrapheus export`: committed units of a production log, written as a recording to replay in tests."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import keyword
import re
import shlex
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from pydantic_ai import Agent

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.cli.sources import load_object, load_typed, open_source, unit_of
from anagrapheus.deprecation import deprecated_option
from anagrapheus.errors import AnagrapheusError, SecretInRecording
from anagrapheus.provider.inputs import recorded_runs
from anagrapheus.provider.run_clock import RUN_CLOCK, RUN_ID, RUN_PLACE, RUN_POSITIONS, place_key, placed_as
from anagrapheus.timeline import (
    DEFAULT_RULES,
    PinPromoted,
    RecordingHeader,
    SecretRule,
    SecretScanner,
    StoredEvent,
    write_recording,
)
from anagrapheus.timeline.canonical import JSONValue, pin_key, stored_json
from anagrapheus.timeline.events import RunInputs, events_of

__all__ = ["COMMAND", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `export`."""
    parser.add_argument("source", metavar="DB", help="an anagrapheus SQLite database (or a recording)")
    parser.add_argument("--unit", action="append", required=True, metavar="ID", help="a unit to export (repeatable)")
    parser.add_argument("-o", "--output", metavar="FILE", help="the recording to write (not with --as-test)")
    parser.add_argument(
        "--as-test",
        metavar="PATH",
        help="write a pytest test module at PATH asking each recorded run again of --agent, and each unit's"
        " recording where the pytest plugin looks for it (recordings/<module>/<test>.jsonl beside PATH)",
    )
    parser.add_argument("--agent", metavar="MODULE:ATTR", help="the agent the test asks (with --as-test)")
    parser.add_argument(
        "--deps", metavar="MODULE:ATTR", help="a function of the recorded run giving its deps (with --as-test)"
    )
    parser.add_argument("--description", help="what run the recording holds (header)")
    parser.add_argument("--recorded-with", help="how the run was recorded (header)")
    parser.add_argument("--rerecord", help="the command that records it again (header)")
    parser.add_argument(
        "--redact",
        action="store_true",
        help="write credential-shaped strings as placeholders instead of refusing (a replay sees the placeholders)",
    )
    parser.add_argument(
        "--redact-rule",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="with --redact (implied): also write what REGEX matches as [redacted:NAME:n] (repeatable): an e-mail,"
        " a customer number; a group named `secret` narrows what is replaced",
    )
    parser.add_argument(
        "--redact-scanner",
        metavar="MODULE:NAME",
        help="with --redact (implied): redact by this SecretScanner (or a function making one) instead of the"
        " default rules",
    )
    # The old spelling of --redact-scanner, kept for one release with a warning ("policy" is the call policy's).
    parser.add_argument("--redact-policy", metavar="MODULE:NAME", help=argparse.SUPPRESS)
    parser.add_argument(
        "--model", action="append", default=[], metavar="ROLE=ID", help="the model id behind a role (header)"
    )
    parser.add_argument(
        "--force", action="store_true", help="with --as-test, write over a test module or recording that exists"
    )


def _redaction(args: argparse.Namespace) -> SecretScanner | None:
    """The scanner `--redact`, `--redact-rule` and `--redact-scanner` ask for; None to refuse a secret."""
    named = args.redact_scanner
    if args.redact_policy is not None:
        if named is not None:
            raise BadInput("give --redact-scanner alone: --redact-policy is its old name", path=args.redact_policy)
        deprecated_option("--redact-policy", "--redact-scanner")
        named = args.redact_policy
    if named is not None:
        if args.redact_rule:
            raise BadInput("give --redact-rule or --redact-scanner, not both: add the rules to the scanner", path=named)
        return load_typed(named, SecretScanner, what="a SecretScanner")
    rules: list[SecretRule] = []
    for given in args.redact_rule:
        name, equals, pattern = given.partition("=")
        if not equals or not name or not pattern:
            raise BadInput("expected --redact-rule NAME=REGEX", path=given)
        try:
            rules.append(SecretRule(name, pattern))
        except re.error as e:
            raise BadInput(f"not a regular expression ({e})", path=given) from e
    if rules:
        return SecretScanner((*DEFAULT_RULES, *rules))
    return SecretScanner() if args.redact else None


def run(args: argparse.Namespace) -> Outcome:
    """Export the units."""
    args.redaction = _redaction(args)
    source = open_source(args.source, units=args.unit)
    kept = list(events_of(source.events, PinPromoted, RunInputs))
    pins = [event for event in kept if event.type == "pin_promoted"]
    pinned = {unit_of(event) for event in pins}
    for unit in args.unit:
        if unit in pinned:
            continue
        why = "it has no committed pins"
        if any(pin.unit_id == unit for pin in source.scratch):
            why = "it is still open (its pins are in scratch): commit it first"
        elif any(unit_of(event) == unit for event in source.events):
            why = "it was abandoned, so its pins were never committed"
        raise BadInput(f"cannot export unit {unit}: {why}", path=args.source)
    models: dict[str, str] = {}
    for pair in args.model:
        role, equals, model_id = pair.partition("=")
        if not equals or not role or not model_id:
            raise BadInput("expected --model ROLE=ID", path=pair)
        models[role] = model_id
    if args.as_test is not None:
        return as_test(args, source.path.name, kept, models)
    if args.output is None:
        raise BadInput(
            "name the recording to write with -o FILE (or write a test with --as-test PATH)", path=args.source
        )
    units = " ".join(f"--unit {shlex.quote(unit)}" for unit in args.unit)
    header = RecordingHeader(
        description=args.description or f"Unit(s) {', '.join(args.unit)} of the log {source.path.name}.",
        recorded_with=args.recorded_with
        or f"Exported from the event log {source.path.name} by `anagrapheus export`: the pins are what the"
        " application drew when it ran these units.",
        rerecord=args.rerecord
        or f"anagrapheus export {shlex.quote(str(args.source))} {units} -o {shlex.quote(args.output)}",
        models=models,
        details={"exported_from": source.path.name, "units": list(args.unit)},
    )
    try:
        written = write_recording(args.output, kept, header=header, redact=args.redaction)
    except SecretInRecording as e:
        raise BadInput(f"{e}; or export with --redact", path=args.source) from e
    except (OSError, AnagrapheusError) as e:
        raise BadInput(f"cannot write the recording ({e})", path=args.output) from e
    runs = len(kept) - len(pins)
    text = f"wrote {written}: {len(pins)} pin(s) of {len(args.unit)} unit(s) from {source.path}"
    if runs:
        text += f", with the inputs of {runs} run(s)"
    return Outcome(Exit.OK, text, {"output": str(written), "units": list(args.unit), "pins": len(pins), "runs": runs})


# Every text that comes from the log or the command line (a unit id, a description, a path) enters the generated
# module as a literal written by `repr`, never pasted into code: a unit id is data, whatever it holds (issue #35).
_TEST_MODULE = """{docstring}

from __future__ import annotations

import pytest

import {module} as _source
from anagrapheus.testing import RecordingSession
from anagrapheus.testing.rerun import ask_recorded_runs

AGENT = _source.{attribute}
{agent_doc}
{deps_line}
"""

_MODULE_DOC = """{description}

Written by `{command}`.
The pytest plugin replays each recording strictly: a call it lacks fails the test naming what moved, and an
output other than the recorded one fails it too. Record it again with --anagrapheus=record (the recording keeps
its runs' inputs), or run the export again.
"""

_TEST_FUNCTION = """

@pytest.mark.anagrapheus(path="{{test_dir}}/recordings/{{module}}/{{name}}.jsonl")
def {name}(anagrapheus: RecordingSession) -> None:
    {docstring}
    assert ask_recorded_runs(anagrapheus.path, AGENT{deps_argument}) == {runs}
"""


def _test_names(units: list[str], shown: Callable[[str], str]) -> dict[str, str]:
    """Each unit's test function name: its id's identifier characters, with a digest where two would collide.

    A unit id `shown` redacts (it holds a credential) is named by its digest alone: the name is a file name too.
    """
    names = {
        unit: "test_" + (re.sub(r"[^A-Za-z0-9_]", "_", unit).strip("_") or "unit")
        if shown(unit) == unit
        else f"test_unit_{hashlib.sha256(unit.encode()).hexdigest()[:16]}"
        for unit in units
    }
    taken = Counter(names.values())
    for unit, name in names.items():
        if taken[name] > 1 or not name.isidentifier() or keyword.iskeyword(name):
            # `chat-1`, `chat_1` and `chat.1` would be one test and one recording: each keeps its own.
            names[unit] = f"{name}_{hashlib.sha256(unit.encode()).hexdigest()[:8]}"
    return names


def _spec(spec: str) -> tuple[str, str]:
    """`MODULE:ATTR` split, after checking that it imports (so both are Python names)."""
    load_object(spec)
    module, _, attribute = spec.partition(":")
    return module, attribute


def as_test(args: argparse.Namespace, log_name: str, kept: list[StoredEvent], models: dict[str, str]) -> Outcome:
    """Write the test module at `--as-test` and each unit's recording where the pytest plugin looks for it."""
    if args.agent is None:
        raise BadInput("--as-test needs --agent MODULE:ATTR, the agent the test asks again", path=args.as_test)
    if args.output is not None:
        raise BadInput("--as-test writes the recordings where the plugin looks: leave out -o", path=args.output)
    load_typed(args.agent, Agent, what="a pydantic-ai Agent", make=False)
    module, attribute = _spec(args.agent)
    deps_module = deps_attribute = None
    if args.deps is not None:
        deps_module, deps_attribute = _spec(args.deps)
    target = Path(args.as_test)
    if target.suffix != ".py" or not target.stem.isidentifier():
        raise BadInput("the test module must be a .py file named as a Python module (test_*.py)", path=args.as_test)
    command = shlex.join(["anagrapheus", "export", str(args.source)] + [f"--unit={unit}" for unit in args.unit])
    command += f" --agent {args.agent} --as-test {shlex.quote(args.as_test)}"
    if args.deps is not None:
        command += f" --deps {args.deps}"
    description = args.description or f"Unit(s) {', '.join(args.unit)} of the log {log_name}, as a regression test."
    # Under --redact the generated module and its file names are redacted as the recordings are (issue #35).
    redactor = None if args.redaction is None else cast("SecretScanner", args.redaction).redactor()

    def shown(text: str) -> str:
        return text if redactor is None else redactor.redact_text(text)

    text = _TEST_MODULE.format(
        docstring=repr(shown(_MODULE_DOC.format(description=description, command=command))),
        module=module,
        attribute=attribute,
        agent_doc=repr(f"The agent asked again: `{args.agent}`."),
        # A module import and an attribute path: `ATTR` may be dotted (`recorded_deps.__name__`), as `--agent` may.
        deps_line=""
        if deps_module is None
        else f"import {deps_module} as _deps_source\n\nDEPS = _deps_source.{deps_attribute}\n",
    )
    names = _test_names(list(args.unit), shown)
    planned: list[tuple[str, list[StoredEvent], int, Path]] = []
    for unit in args.unit:
        events = [event for event in kept if unit_of(event) == unit]
        if shown(unit) != unit:
            # The id itself is a secret: the unit is written under an alias that holds none, so a replay of the
            # redacted file finds its own unit (its run ids and times are keyed on it) instead of a placeholder.
            events = aliased(events, unit, f"unit-{hashlib.sha256(unit.encode()).hexdigest()[:16]}")
        runs = len(recorded_runs(events))
        if not runs:
            raise BadInput(
                f"unit {unit} holds no recorded run inputs: record it under Pinning(record_inputs=True)",
                path=args.source,
            )
        recording = target.parent / "recordings" / target.stem / f"{names[unit]}.jsonl"
        planned.append((unit, events, runs, recording))
        text += _TEST_FUNCTION.format(
            name=names[unit],
            docstring=repr(
                shown(f"Unit {unit}: its {runs} recorded run(s), asked again of the agent with the world pinned.")
            ),
            runs=runs,
            deps_argument="" if deps_module is None else ", deps=DEPS",
        )
    try:
        compile(text, str(target), "exec")
    except (SyntaxError, ValueError) as e:  # pragma: no cover - every text above is a literal or a checked name
        raise BadInput(f"the generated test does not compile ({e})", path=args.as_test) from e
    # Nothing is written over an existing file unless asked: `--as-test tests/conftest.py` must not replace it.
    for existing in [target, *(recording for *_, recording in planned)]:
        if existing.is_file() and not args.force:
            raise BadInput("exists; pass --force to write over it", path=str(existing))
    written: list[str] = []
    for unit, events, _, recording in planned:
        header = RecordingHeader(
            description=f"Unit {unit} of the log {log_name}: its pins and its runs' inputs.",
            recorded_with=f"Exported from the event log {log_name}: the pins are what the application drew.",
            rerecord=command,
            models=models,
            details={"exported_from": log_name, "units": [unit]},
        )
        _write(recording, events, header, redact=args.redaction, source=args.source)
        written.append(str(recording))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as e:
        raise BadInput(f"cannot write the test ({e.strerror or e})", path=args.as_test) from e
    report = f"wrote {target} and {len(written)} recording(s): {', '.join(written)}"
    return Outcome(Exit.OK, report, {"test": str(target), "recordings": written, "units": list(args.unit)})


def aliased(events: list[StoredEvent], unit: str, alias: str) -> list[StoredEvent]:
    """`events` of `unit` as those of `alias`: their ids, and the keys of the pins keyed on the unit's positions."""
    runs = sum(1 for event in events if event.type == PinPromoted.event_type and _payload(event).get("kind") == RUN_ID)
    stamps = sum(1 for event in events if _payload(event).get("kind") == RUN_CLOCK)
    named = _named_positions(events)
    renamed: list[StoredEvent] = []
    for event in events:
        payload = _payload(event)
        if payload.get("unit_id") == unit:
            payload["unit_id"] = alias
        if event.type == PinPromoted.event_type and payload.get("kind") in RUN_POSITIONS:
            payload["key"] = _position_key(payload, unit, alias, runs=runs, stamps=stamps, named=named)
        renamed.append(
            dataclasses.replace(
                event,
                correlation_id=alias if event.correlation_id == unit else event.correlation_id,
                payload=stored_json(payload),
            )
        )
    return renamed


def _named_positions(events: list[StoredEvent]) -> list[str]:
    """The positions of a unit's runs that are not numbers: the ids of runs their callers named, runs placed apart."""
    found: dict[str, None] = {}
    for event in events:
        payload = _payload(event)
        if event.type == RunInputs.event_type and isinstance(run_id := payload.get("run_id"), str):
            found[run_id] = None
        raw: object = payload.get("raw")
        if payload.get("kind") == RUN_PLACE and isinstance(raw, dict):
            position = cast(dict[str, object], raw).get("run")
            if isinstance(position, str):
                found[position] = None
    return list(found)


def _payload(event: StoredEvent) -> dict[str, Any]:
    payload: object = json.loads(event.payload)
    return cast(dict[str, Any], payload) if isinstance(payload, dict) else {}


def _position_key(payload: dict[str, Any], unit: str, alias: str, *, runs: int, stamps: int, named: list[str]) -> str:
    """The key of a pin keyed on a position in `unit` (a run's id, clock or place), keyed on the same one in `alias`.

    The position is not stored, only its digest: it is found among the positions the unit's pins can hold. A
    place says what it is keyed on besides the unit.
    """
    key, kind = str(payload.get("key")), payload.get("kind")
    raw: object = payload.get("raw")
    if kind == RUN_PLACE:
        placed = placed_as(cast(JSONValue, raw))
        if placed is not None and place_key(unit, *placed) == key:
            return place_key(alias, *placed)
        raise BadInput(f"a {kind} pin of unit {alias} is keyed on no place it says it holds", path=alias)
    positions: list[int | str] = [*range(runs + 1), *named]
    candidates: list[dict[str, Any]]
    if kind == RUN_ID:
        candidates = [{"run": run} for run in positions]
    else:
        slots = len(json.loads(raw)) if isinstance(raw, str) else len(cast(list[Any], raw or []))
        candidates = [{"run": run, "stamp": stamp, "slots": slots} for run in positions for stamp in range(stamps + 1)]
    for position in candidates:
        if pin_key(str(kind), {"unit": unit, **position}) == key:
            return pin_key(str(kind), {"unit": alias, **position})
    raise BadInput(f"a {kind} pin of unit {alias} is keyed on no position it can hold", path=alias)


def _write(
    path: Path, events: list[StoredEvent], header: RecordingHeader, *, redact: SecretScanner | None, source: str
) -> None:
    """Write one recording, refusing a secret unless asked to redact it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_recording(path, events, header=header, redact=redact)
    except SecretInRecording as e:
        raise BadInput(f"{e}; or export with --redact", path=source) from e
    except (OSError, AnagrapheusError) as e:
        raise BadInput(f"cannot write the recording ({e})", path=str(path)) from e


COMMAND = Command(
    "export",
    help="write committed units of a log as a recording (a regression fixture)",
    description="Write the pins of committed units of a database (or of a recording) as a recording with a"
    " header. A unit still open or abandoned has no committed pins and is refused.",
    arguments=_arguments,
    run=run,
)
