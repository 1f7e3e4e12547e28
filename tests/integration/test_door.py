"""Validation at the door: the library never writes what its own reader refuses, and says why in a typed error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import RecordingError, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    RecordingHeader,
    SQLiteEventStore,
    pin_key,
    read_recording,
    write_recording,
)
from anagrapheus.timeline.recording import stream_recording

HEADER = RecordingHeader(description="d", recorded_with="r", rerecord="x")
K1 = pin_key("model_call", {"prompt": "one"})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schema_version", 0, "schema_version"),
        ("schema_version", True, "schema_version"),
        ("payload", "[1, 2]", "JSON object"),
        ("payload", '{"x": NaN}', "not JSON"),
        ("payload", "{", "not JSON"),
        ("namespace", "", "non-empty"),
    ],
)
def test_append_refuses_what_the_reader_would(store: SQLiteEventStore, field: str, value: Any, message: str) -> None:
    event = {"namespace": "app", "type": "note", "schema_version": 1, "payload": "{}", field: value}
    with pytest.raises(UsageError, match=message):
        store.append([PendingEvent(**event)])
    assert store.last_seq() == 0


def test_a_fingerprint_that_is_not_digest_strings_is_refused_before_the_effect(ledger: PinLedger) -> None:
    calls: list[int] = []
    with pytest.raises(UsageError, match="fingerprint"):
        ledger.resolve(K1, kind="model_call", effect=lambda: calls.append(1), interpret=str, fingerprint={"x": 12345})  # type: ignore[dict-item]
    assert calls == []
    assert ledger.pins() == []


def test_what_a_ledger_commits_reads_back(tmp_path: Path, store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    ledger.resolve(K1, kind="model_call", effect=lambda: {"n": 10**40}, interpret=dict, fingerprint={"x": "ab"})
    ledger.commit()
    path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)
    assert len(read_recording(path, registry=types).events) == 1


@pytest.mark.parametrize(("since", "limit"), [("x", None), (-1, None), (0, "3"), (0, 1.5)])
def test_read_refuses_bounds_that_are_not_seq_numbers(store: SQLiteEventStore, since: Any, limit: Any) -> None:
    with pytest.raises(UsageError):
        list(store.read(since=since, limit=limit))


def recording_with(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "run.jsonl"
    write_recording(path, [], header=HEADER)
    with path.open("a") as out:
        out.write(line + "\n")
    return path


def test_a_repeated_name_in_a_line_is_refused(tmp_path: Path) -> None:
    event = (
        '{"causation_id":null,"correlation_id":null,"created_at":"t","event_id":"e","namespace":"a",'
        '"payload":{"n":1,"n":2},"schema_version":1,"seq":1,"type":"t"}'
    )
    with pytest.raises(RecordingError, match="'n' appears twice") as caught:
        read_recording(recording_with(tmp_path, event))
    assert caught.value.line == 2


def test_a_line_over_the_limit_is_refused_unread_naming_it(tmp_path: Path) -> None:
    path = recording_with(tmp_path, '{"padding":"' + "x" * 5000 + '"}')
    with pytest.raises(RecordingError, match="longer than 4096 bytes") as caught:
        read_recording(path, max_line_bytes=4096)
    assert caught.value.line == 2
    with pytest.raises(RecordingError, match="not a stored event"):
        read_recording(path, max_line_bytes=6000)  # under the limit, read and judged on its content
    with pytest.raises(UsageError):
        stream_recording(path, max_line_bytes=0)


def test_a_huge_line_costs_the_limit_not_the_line(tmp_path: Path) -> None:
    path = recording_with(tmp_path, "x" * (64 * 1024 * 1024))
    probe = (
        "import resource, sys\n"
        "from anagrapheus.errors import RecordingError\n"
        "from anagrapheus.timeline import read_recording\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    read_recording(sys.argv[1], max_line_bytes=1 << 20)\n"
        "except RecordingError as e:\n"
        "    print(e.line, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
    line, grown_kib = map(int, done.stdout.split())
    assert line == 2
    assert grown_kib < 32 * 1024  # far below the 64 MiB line


@pytest.mark.parametrize("where", ["directory", "missing folder"])
def test_write_recording_os_errors_are_recording_errors_naming_the_path(tmp_path: Path, where: str) -> None:
    target = tmp_path if where == "directory" else tmp_path / "missing" / "run.jsonl"
    with pytest.raises(RecordingError) as caught:
        write_recording(target, [], header=HEADER)
    assert str(target) in str(caught.value)


def test_a_killed_writers_temporary_file_is_cleared_on_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "run.jsonl"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f".run.jsonl.{int(dead.stdout)}.abc123.tmp"
    orphan.write_text("half a recording")
    alive = tmp_path / f".run.jsonl.{os.getppid()}.def456.tmp"
    alive.write_text("a live writer's")
    write_recording(target, [], header=HEADER)
    assert not orphan.exists()
    assert alive.exists()
    assert json.loads(target.read_text().splitlines()[0])["description"] == "d"
