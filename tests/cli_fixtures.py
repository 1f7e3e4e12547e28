"""Files the command-line tests run on: the committed negotiation, files derived from it, and small logs."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.recording.deltas import expanded
from anagrapheus.timeline.recording.lines import checked_entries, stored_event
from examples.negotiation.runs import DEFAULT_SEED, RECORDING, record_negotiation


def _unsealed(lines: list[str]) -> list[str]:
    """The lines with the seal taken out of the header's details, the rest of it byte for byte as it was."""
    header = json.loads(lines[0])
    seal = json.dumps({"seal": header["details"]["seal"]}, separators=(",", ":"))[1:-1]
    return [lines[0].replace(seal + ",", "", 1), *lines[1:]]


def whole_fingerprints(lines: list[str]) -> list[str]:
    """The lines with every event written whole (a version 2 file), the header as it was but for its version.

    Each fingerprint written as a delta is whole, each compact line holds all its fields, each history its responses:
    an edit to a line then stays its own (a delta's edit would move every later fingerprint of its kind in its unit,
    which is built upon it) and changes the field as a whole line holds it.
    """
    end = "\n" if lines[0].endswith("\n") else ""
    # A file with every event whole is one of the version before deltas, as a reader before them reads it.
    whole = [re.sub(r',"version":[34]}', ',"version":2}', lines[0], count=1)]
    numbered = ((number, line.rstrip("\n")) for number, line in enumerate(lines[1:], start=2))
    entries = ((number, fields) for number, _, fields in checked_entries(numbered, "negotiation"))
    for number, fields in expanded(entries, "negotiation"):
        event = stored_event(fields, where="negotiation", line=number)
        whole.append(canonical_json(event.to_json()) + end)
    return whole


# The committed negotiation, unsealed and its fingerprints whole: the files derived from it are edited by hand, and
# the tests on them are about what a command says of the edit. What the seal says of one is tested in
# tests/cli/test_reseal.py; the deltas a reader expands, in tests/timeline/recording/test_deltas.py.
NEGOTIATION_LINES = whole_fingerprints(_unsealed(RECORDING.read_text(encoding="utf-8").splitlines(keepends=True)))


def builtin_types() -> EventTypeRegistry:
    return EventTypeRegistry()


def rewritten(tmp: Path, name: str, line: int, change: dict[str, object]) -> Path:
    """A copy of the negotiation with line `line`'s payload fields replaced."""
    lines = list(NEGOTIATION_LINES)
    event = json.loads(lines[line - 1])
    event["payload"].update(change)
    lines[line - 1] = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    path = tmp / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


def with_one_more_event(
    path: Path, like_line: int, *, payload: dict[str, object] | None = None, **envelope: object
) -> Path:
    """The negotiation with one event appended (seq 99): a copy of line `like_line`, its fields replaced."""
    event = json.loads(NEGOTIATION_LINES[like_line - 1])
    event.update(seq=99, event_id="019b8d62-91f0-7000-8000-000000000099", **envelope)
    if payload is not None:
        event["payload"].update(payload)
    path.write_text("".join(NEGOTIATION_LINES) + json.dumps(event, sort_keys=True) + "\n", encoding="utf-8")
    return path


def model_call_lines() -> list[int]:
    """The lines of the negotiation that hold model-call pins."""
    return [n for n, text in enumerate(NEGOTIATION_LINES, start=1) if n > 1 and '"kind":"model_call"' in text]


def negotiation_database(path: Path) -> Path:
    """Hold the scripted negotiation live (seed 2022) into the database at `path`, and keep it."""
    asyncio.run(record_negotiation(path.with_suffix(".jsonl"), seed=DEFAULT_SEED, database=path))
    return path


class Counting:
    """A scripted model that says `text` and counts how often it is reached."""

    def __init__(self, text: str, name: str = "counting") -> None:
        self.text = text
        self.calls = 0
        self.model = FunctionModel(self._reply, model_name=name)

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=[TextPart(self.text)])


def units_database(path: Path) -> Path:
    """A log with one committed unit, one abandoned unit and one unit left open."""
    types = builtin_types()
    with SQLiteEventStore(path) as store:
        for unit, prompt, settle in (
            ("support-1", "Where is order 7?", "commit"),
            ("support-2", "Cancel order 8.", "abandon"),
            ("support-3", "Refund order 9.", "open"),
        ):
            ledger = PinLedger(store, types, unit_id=unit)
            Agent(PinnedModel(Counting(f"Answer to: {prompt}").model, ledger)).run_sync(prompt)
            if settle == "commit":
                ledger.commit()
            elif settle == "abandon":
                ledger.abandon(reason="the customer hung up")
    return path
