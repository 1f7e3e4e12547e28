"""The `anagrapheus` command on damaged, piped and read-only inputs: named errors and exit 2, never a hang or a traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from anagrapheus.cli import main, sources
from anagrapheus.timeline import PinLedger, SQLiteEventStore
from examples.negotiation.runs import RECORDING
from tests.cli_fixtures import builtin_types


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def small_log(path: Path, *, units: int = 1) -> Path:
    """A log of `units` committed units of two pins each."""
    with SQLiteEventStore(path) as store:
        for n in range(1, units + 1):
            ledger = PinLedger(store, builtin_types(), unit_id=f"unit-{n}")
            for key in ("k1", "k2"):
                ledger.resolve(f"{key}-{n}", kind="model_call", effect=lambda n=n: f"drawn {n}", interpret=str)
            ledger.commit()
    return path


def with_payload(path: Path, seq: int, payload: str) -> Path:
    """Alter one event's payload behind the store's back (the log's triggers forbid it through anagrapheus)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("DROP TRIGGER events_append_only_update")
        connection.execute("UPDATE events SET payload = ? WHERE seq = ?", (payload, seq))
        connection.commit()
    finally:
        connection.close()
    return path


# check


@pytest.mark.parametrize(
    ("payload", "said"),
    [("{not json", "payload is not JSON"), ("[1, 2]", "payload is not a JSON object")],
    ids=["not-json", "not-an-object"],
)
def test_check_names_an_event_whose_payload_is_corrupt_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: str, said: str
) -> None:
    path = with_payload(small_log(tmp_path / "log.db"), 2, payload)
    code, out, err = cli(capsys, "check", str(path))
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert f"{path} (seq 2): [events] corrupt event at seq 2: {said}" in out
    assert "event type anagrapheus:pin_promoted" in out


# pipes

# Writes a file to stdout in two halves with a pause between, so a reader that stops at the first chunk is caught.
HALVES = """
import sys, time
data = open(sys.argv[1], "rb").read()
half = len(data) // 2
sys.stdout.buffer.write(data[:half]); sys.stdout.flush()
time.sleep(0.2)
sys.stdout.buffer.write(data[half:]); sys.stdout.flush()
"""


def test_a_fifo_no_process_writes_to_is_refused_after_a_bounded_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "PIPE_WAIT", 0.2)
    fifo = tmp_path / "nobody-writes"
    os.mkfifo(fifo)
    for command in (["show"], ["check"], ["diff", str(RECORDING)]):
        code, out, err = cli(capsys, *command, str(fifo))
        assert code == 2, out + err
        assert "a pipe no process opened for writing within 0.2 s; start the command that writes it first" in out + err
        assert str(fifo) in out + err


def test_a_fifo_whose_writer_comes_later_is_read_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "later"
    os.mkfifo(fifo)
    script = (
        "import time, subprocess, sys; time.sleep(0.3);"
        f" subprocess.run([sys.executable, '-c', {HALVES!r}, {str(RECORDING)!r}], stdout=open({str(fifo)!r}, 'wb'))"
    )
    writer = subprocess.Popen([sys.executable, "-c", script])
    try:
        code, out, err = cli(capsys, "diff", str(fifo), str(RECORDING))
    finally:
        writer.wait(timeout=60)
    assert code == 0, out + err
    assert "same: 4 unit(s), 51 pin(s)" in out


def test_diff_reads_a_process_substitution_whole(tmp_path: Path) -> None:
    # What `anagrapheus diff <(cat rec) rec` does: the command reads /dev/fd/N, a pipe a process writes to.
    read_end, write_end = os.pipe()
    try:
        feeder = subprocess.Popen([sys.executable, "-c", HALVES, str(RECORDING)], stdout=write_end)
        os.close(write_end)
        write_end = -1
        done = subprocess.run(
            [sys.executable, "-m", "anagrapheus", "diff", f"/dev/fd/{read_end}", str(RECORDING)],
            pass_fds=(read_end,),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        feeder.wait(timeout=60)
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same: 4 unit(s), 51 pin(s)" in done.stdout


def test_a_database_through_a_pipe_is_refused_naming_the_file_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = small_log(tmp_path / "log.db")
    fifo = tmp_path / "db-pipe"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f'cat "{database}" > "{fifo}"'])
    try:
        code, out, err = cli(capsys, "show", str(fifo))
    finally:
        writer.wait(timeout=60)
    assert code == 2, out + err
    assert "a SQLite database cannot be read through a pipe; name the database file" in err
