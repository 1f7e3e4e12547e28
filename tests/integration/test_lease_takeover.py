"""A unit held by a worker that died on another host (a container restarted under a new hostname) is freed, and resumed.

Real processes: each worker fakes its host name before it imports anagrapheus, which reads it once at import.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import UnitBusy
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinPromoted, SQLiteEventStore

WORKER = """
import socket, sys, time
socket.gethostname = lambda: sys.argv[2]
from anagrapheus.errors import UnitBusy
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
store = SQLiteEventStore(sys.argv[1], unit_wait=0.3)
ledger = PinLedger(store, EventTypeRegistry(), unit_id="shared")
if sys.argv[3] == "draw":
    print(ledger.resolve("k-paid", kind="model_call", effect=lambda: "paid once", interpret=str), flush=True)
    print("holding", flush=True)
    time.sleep(120)
drawn = []
def effect():
    drawn.append("ran")
    return "paid twice"
try:
    print(ledger.resolve("k-paid", kind="model_call", effect=effect, interpret=str))
except UnitBusy:
    print("busy")
    sys.exit(3)
print(ledger.resolve("k-next", kind="model_call", effect=lambda: "new", interpret=str))
ledger.commit()
print("effects run:", len(drawn))
"""


def holding(database: Path, host: str) -> subprocess.Popen[str]:
    """A worker on `host` that drew one paid pin in unit `shared` and holds the unit."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(database), host, "draw"], stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "paid once"
    assert worker.stdout.readline().strip() == "holding"
    return worker


def resume(database: Path, host: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WORKER, str(database), host, "resume"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def stop(worker: subprocess.Popen[str]) -> None:
    worker.kill()
    worker.wait()
    if worker.stdout is not None:
        worker.stdout.close()


def test_a_worker_restarted_under_a_new_hostname_resumes_its_unit_once_unlocked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "log.db"
    worker = holding(database, "container-1a2b")
    try:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        stop(worker)
    # Another host's lease cannot be checked from here, so the restarted worker is refused...
    refused = resume(database, "container-9f8e")
    assert (refused.returncode, refused.stdout.strip()) == (3, "busy"), refused.stderr
    with SQLiteEventStore(database) as store:
        held = store.lease_holder("shared")
        assert held is not None and (held.unit_id, held.host, held.pid) == ("shared", "container-1a2b", worker.pid)
    # ...until the lease is freed, naming whose it was.
    # The command in this process: a third host, neither the dead worker's nor the restarted one's.
    assert main(["unlock", str(database), "--unit", "shared"]) == 0
    assert capsys.readouterr().out.strip() == f"unit shared: freed the lease of pid {worker.pid} on host container-1a2b"
    resumed = resume(database, "container-9f8e")
    assert resumed.returncode == 0, resumed.stderr
    # The paid pin in scratch answers: nothing is drawn again.
    assert resumed.stdout.splitlines() == ["paid once", "new", "effects run: 0"]
    types = EventTypeRegistry()
    with SQLiteEventStore(database, read_only=True) as store:
        pins = [types.decode(event) for event in store.read(type="pin_promoted")]
        assert [(pin.key, pin.raw) for pin in pins if isinstance(pin, PinPromoted)] == [
            ("k-paid", "paid once"),
            ("k-next", "new"),
        ]
        assert store.unit_outcome("shared") == "committed"


def test_a_holder_alive_on_this_host_is_not_freed_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "log.db"
    worker = holding(database, socket.gethostname())
    try:
        with SQLiteEventStore(database, unit_wait=0.2) as store:
            with pytest.raises(UnitBusy):
                store.break_lease("shared")
            code = main(["unlock", str(database), "--unit", "shared"])
            out = capsys.readouterr().out
            assert code == 1
            assert out.strip() == (
                f"unit shared: held by a process alive on this host (pid {worker.pid}); stop it first, or pass --force"
            )
            code = main(["unlock", str(database), "--unit", "shared", "--force", "--json"])
            report = json.loads(capsys.readouterr().out)
            assert code == 0
            assert report["freed"] == [{"unit": "shared", "host": socket.gethostname(), "pid": worker.pid}]
            assert store.lease_holder("shared") is None
            # This store takes the unit over, with the pin the worker drew.
            ledger = PinLedger(store, EventTypeRegistry(), unit_id="shared")
            assert ledger.resolve("k-paid", kind="model_call", effect=lambda: "paid twice", interpret=str) == (
                "paid once"
            )
            # Its own lease can be freed too, and is taken again at the next draw.
            own = store.lease_holder("shared")
            assert own is not None and own.pid == os.getpid()
            assert store.break_lease("shared") == own
            assert store.lease_holder("shared") is None
            ledger.resolve("k-more", kind="model_call", effect=lambda: "more", interpret=str)
            assert store.lease_holder("shared") == own
            ledger.commit()
    finally:
        stop(worker)


def test_unlock_with_nothing_to_free_or_nothing_to_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "log.db"
    with SQLiteEventStore(database) as store:
        assert store.break_lease("nobody") is None
        assert store.lease_holder("nobody") is None
    assert main(["unlock", str(database), "--unit", "nobody"]) == 0
    assert capsys.readouterr().out.strip() == "unit nobody: no lease to free"
    assert main(["unlock", str(tmp_path / "typo.db"), "--unit", "x"]) == 2
    assert "no such log file" in capsys.readouterr().err
    (tmp_path / "notes.db").write_text("not a database\n" * 20, encoding="utf-8")
    assert main(["unlock", str(tmp_path / "notes.db"), "--unit", "x"]) == 2
    assert "cannot read the database" in capsys.readouterr().err
    (tmp_path / "empty.db").touch()
    assert main(["unlock", str(tmp_path / "empty.db"), "--unit", "x"]) == 2
    assert "not an anagrapheus event log" in capsys.readouterr().err
    assert (tmp_path / "empty.db").read_bytes() == b""


def test_unlock_a_log_made_by_a_newer_anagrapheus_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "log.db"
    SQLiteEventStore(database).close()
    with sqlite3.connect(database) as connection:
        connection.execute("INSERT INTO anagrapheus_migrations (name, applied_at) VALUES ('9999_future', 'now')")
    assert main(["unlock", str(database), "--unit", "x"]) == 2
    assert "migrated by a newer anagrapheus" in capsys.readouterr().err
