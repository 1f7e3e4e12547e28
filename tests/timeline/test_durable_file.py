"""Replacing a recording durably: written beside its target, and only the leftovers of writers that died cleared."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from anagrapheus.timeline.recording import write_recording
from tests.timeline.sample_recording import DEAD_PID, HEADER


def test_the_next_write_clears_only_the_leftovers_of_writers_that_died(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        leftovers = {
            "dead writer": f".run.jsonl.{DEAD_PID}.abc.tmp",
            "live writer": f".run.jsonl.{sleeper.pid}.abc.tmp",
            "this process": f".run.jsonl.{os.getpid()}.abc.tmp",
            "no pid": ".run.jsonl.abc.tmp",
            "another recording": f".other.jsonl.{DEAD_PID}.abc.tmp",
            "not a temporary file": f".run.jsonl.{DEAD_PID}.abc.part",
        }
        for name in leftovers.values():
            (tmp_path / name).write_text("half a recording")
        write_recording(tmp_path / "run.jsonl", [], header=HEADER)
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {"run.jsonl", *leftovers.values()} - {leftovers["dead writer"]}
        # Asking whether the live writer is alive sent it no signal.
        sleeper.terminate()
        assert sleeper.wait() == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_leftover_of_another_users_writer_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root every process may be signalled; another user's live process answers with EPERM otherwise.
    def kill(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    leftover = tmp_path / f".run.jsonl.{DEAD_PID}.abc.tmp"
    leftover.write_text("half a recording")
    monkeypatch.setattr(os, "kill", kill)
    write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    assert leftover.exists()


def test_a_recording_is_written_beside_its_target_in_a_file_the_next_write_can_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What sits in the folder while the data reaches the disk: what a writer killed at that moment leaves.
    seen: list[list[str]] = []
    fsync = os.fsync

    def watched(fd: int) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", watched)
    write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    (temporary,) = seen[0]
    assert temporary.startswith(f".run.jsonl.{os.getpid()}.") and temporary.endswith(".tmp")
