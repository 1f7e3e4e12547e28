"""The `anagrapheus` command on damaged, piped and read-only inputs: named errors and exit 2, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from anagrapheus.cli import main, sources
from anagrapheus.timeline import PinLedger, SQLiteEventStore, read_recording
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
    assert "same: 4 unit(s), 59 pin(s)" in out


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
    assert "same: 4 unit(s), 59 pin(s)" in done.stdout


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


# read-only folders

# The command run as an unprivileged user (as root nothing is read-only), after its imports.
AS_NOBODY = """
import os, sys
from anagrapheus.cli import main
os.setgid(65534); os.setuid(65534)
sys.exit(main(sys.argv[1:]))
"""


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *argv], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def read_only_folder() -> Iterator[Path]:
    """A folder under /tmp that an unprivileged user may read and not write, once its files are in (`seal`)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the command as another user")
    folder = Path(tempfile.mkdtemp(prefix="anagrapheus-ro-"))
    try:
        yield folder
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def seal(folder: Path) -> None:
    for file in folder.iterdir():
        file.chmod(0o444)
    folder.chmod(0o555)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.setgid(65534); os.setuid(65534); print(os.access(sys.argv[1], os.W_OK))",
            str(folder),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "False"


def log_with_commits_in_its_wal(folder: Path, *, shm: bool) -> Path:
    """40 committed units, 20 of them only in the write-ahead log: copied while the writer still has it open."""
    source = Path(tempfile.mkdtemp(prefix="anagrapheus-writer-"))
    try:
        with SQLiteEventStore(source / "log.db") as store:
            for n in range(1, 41):
                ledger = PinLedger(store, builtin_types(), unit_id=f"unit-{n}")
                ledger.resolve(f"k-{n}", kind="model_call", effect=lambda n=n: f"drawn {n}", interpret=str)
                ledger.commit()
                if n == 20:
                    with sqlite3.connect(source / "log.db") as checkpoint:
                        checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            names = ["log.db", "log.db-wal", *(["log.db-shm"] if shm else [])]
            for name in names:
                shutil.copy(source / name, folder / name)
    finally:
        shutil.rmtree(source)
    assert (folder / "log.db-wal").stat().st_size > 0
    seal(folder)
    return folder / "log.db"


def test_show_and_export_read_the_wal_of_a_log_in_a_read_only_folder(read_only_folder: Path) -> None:
    database = log_with_commits_in_its_wal(read_only_folder, shm=True)
    shown = as_nobody("show", "--json", str(database))
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["units"]) == 40
    checked = as_nobody("check", str(database))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok, 40 event(s)" in checked.stdout
    out = Path(tempfile.mkdtemp(prefix="anagrapheus-out-"))
    try:
        out.chmod(0o777)
        exported = as_nobody("export", str(database), "--unit", "unit-40", "-o", str(out / "unit-40.jsonl"))
        assert exported.returncode == 0, exported.stdout + exported.stderr
        exported_events = read_recording(out / "unit-40.jsonl").events
        assert exported_events and {e.payload_json()["unit_id"] for e in exported_events} == {"unit-40"}
    finally:
        shutil.rmtree(out)
    assert sorted(p.name for p in read_only_folder.iterdir()) == ["log.db", "log.db-shm", "log.db-wal"]


def test_a_wal_that_cannot_be_read_in_a_read_only_folder_is_refused_naming_it(read_only_folder: Path) -> None:
    database = log_with_commits_in_its_wal(read_only_folder, shm=False)
    for command in ("show", "check"):
        done = as_nobody(command, str(database))
        assert done.returncode == 2, done.stdout + done.stderr
        said = done.stdout + done.stderr
        assert f"its write-ahead log {database}-wal holds commits not yet in the main file" in said
        assert "Copy the database with its -wal file to a folder it can write" in said
    assert sorted(p.name for p in read_only_folder.iterdir()) == ["log.db", "log.db-wal"]


def test_a_checkpointed_log_in_a_read_only_folder_is_shown(read_only_folder: Path) -> None:
    database = small_log(read_only_folder / "log.db", units=3)
    seal(read_only_folder)
    shown = as_nobody("show", "--json", str(database))
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["units"]) == 3


def test_upcast_reads_a_pipe_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "in"
    os.mkfifo(fifo)
    # The writer opens the pipe itself: opening it here would wait for the reader, which comes only below.
    writer = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" "{RECORDING}" > "{fifo}"', HALVES])
    try:
        code, out, err = cli(capsys, "upcast", str(fifo), "-o", str(tmp_path / "out.jsonl"))
    finally:
        writer.wait(timeout=60)
    assert code == 0, out + err
    assert (tmp_path / "out.jsonl").read_bytes() == RECORDING.read_bytes()
