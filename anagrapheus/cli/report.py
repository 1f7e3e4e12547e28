"""What a command reports: an exit code, text for people, the same facts as JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TextIO

from anagrapheus.errors import AnagrapheusError, CorruptEvent, RecordingError

__all__ = ["BadInput", "Exit", "Outcome", "bad_input", "emit", "table"]


class Exit(IntEnum):
    """The exit codes every command shares."""

    OK = 0
    """Same, valid, passed."""
    FAILED = 1
    """A difference, or a violated check or invariant."""
    BAD_INPUT = 2
    """Unreadable, corrupt, an unknown version or an incompatible provenance; the file and line are named."""
    DIVERGED = 3
    """The candidate left the recording."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A command's result: its exit code, its text report and its JSON report."""

    code: Exit
    """The exit code."""
    text: str
    """The report for a terminal."""
    data: dict[str, Any] = field(default_factory=dict[str, Any])
    """The same report as JSON-shaped data, for `--json`."""
    error: bool = False
    """Whether the text is an error message (written to stderr) rather than the report."""


class BadInput(AnagrapheusError):
    """An input cannot be used: the message names the file and, where there is one, the line."""

    def __init__(self, message: str, *, path: str, line: int | None = None, seq: int | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        if seq is not None and line is None:
            where += f" (seq {seq})"
        super().__init__(f"{where}: {message}")
        self.message = message
        self.path = path
        self.line = line
        self.seq = seq

    def outcome(self) -> Outcome:
        """The exit-2 outcome reporting it."""
        data = {"status": "bad input", "path": self.path, "line": self.line, "seq": self.seq, "error": self.message}
        return Outcome(Exit.BAD_INPUT, f"bad input: {self}", data, error=True)


def bad_input(error: AnagrapheusError, *, path: str, line: int | None = None) -> BadInput:
    """Turn a library error about `path` into `BadInput`, keeping the line or seq it names."""
    if isinstance(error, BadInput):
        return error
    if isinstance(error, RecordingError):
        prefix = f"{error.path}:{error.line}: " if error.line is not None else f"{error.path}: "
        message = str(error).removeprefix(prefix)
        return BadInput(message, path=error.path, line=error.line if error.line is not None else line)
    seq = error.seq if isinstance(error, CorruptEvent) else getattr(error, "seq", None)
    return BadInput(str(error), path=path, line=line, seq=seq if isinstance(seq, int) else None)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], *, indent: str = "") -> list[str]:
    """Lay rows out in columns: text left-aligned, numbers right-aligned."""
    cells = [list(header), *[[str(cell) for cell in row] for row in rows]]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(header))]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines: list[str] = []
    for line in cells:
        parts = [cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(line, widths, numeric, strict=True)]
        lines.append((indent + "  ".join(parts)).rstrip())
    return lines


def emit(outcome: Outcome, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Write the outcome (JSON on stdout, or text: errors on stderr) and return its exit code."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr
    if as_json:
        stdout.write(json.dumps({"exit_code": int(outcome.code), **outcome.data}, indent=2, ensure_ascii=False) + "\n")
    elif outcome.error:
        stderr.write(outcome.text.rstrip("\n") + "\n")
    else:
        stdout.write(outcome.text.rstrip("\n") + "\n")
    return int(outcome.code)
