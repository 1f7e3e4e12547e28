"""Where the folder cannot be written, a WAL with commits is read through its -shm file, or refused: never skipped.

As root every folder can be written, so these tests make the store see the folder as a read-only mount shows it
(`os.access(folder, W_OK)` false); `cli/test_cli_faults.py` runs the same cases for real as an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import StoreError
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.stores import sqlite as sqlite_module


@pytest.fixture
def unwritable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A folder the store sees as a read-only mount: W_OK is refused there, as access(2) refuses it on one."""
    folder = tmp_path / "mounted"
    folder.mkdir()
    real = os.access

    def access(path: str | os.PathLike[str], mode: int, **kwargs: object) -> bool:
        if Path(path) == folder and mode & os.W_OK:
            return False
        return real(path, mode, **kwargs)  # pyright: ignore[reportArgumentType]

    monkeypatch.setattr(sqlite_module.os, "access", access)
    return folder


def copied_while_open(folder: Path, tmp_path: Path, *, shm: bool, units: int = 40) -> Path:
    """`units` committed units, the later half only in the WAL, copied into `folder` while the writer has it open."""
    source = tmp_path / "writer"
    source.mkdir()
    with SQLiteEventStore(source / "log.db") as store:
        for n in range(1, units + 1):
            ledger = PinLedger(store, EventTypeRegistry(), unit_id=f"unit-{n}")
            ledger.resolve(f"k-{n}", kind="model_call", effect=lambda n=n: f"drawn {n}", interpret=str)
            ledger.commit()
            if n == units // 2:
                with sqlite3.connect(source / "log.db") as checkpoint:
                    checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for name in ["log.db", "log.db-wal", *(["log.db-shm"] if shm else [])]:
            shutil.copy(source / name, folder / name)
    return folder / "log.db"


def test_a_wal_with_its_shm_is_read_whole(unwritable: Path, tmp_path: Path) -> None:
    database = copied_while_open(unwritable, tmp_path, shm=True)
    assert "immutable" not in sqlite_module.read_only_uri(database)
    with SQLiteEventStore(database, read_only=True) as store:
        assert store.last_seq() == 40


def test_a_wal_without_its_shm_is_refused_naming_it(
    unwritable: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = copied_while_open(unwritable, tmp_path, shm=False)
    with pytest.raises(StoreError, match=f"its write-ahead log {database}-wal holds commits not yet in the main file"):
        SQLiteEventStore(database, read_only=True)
    assert main(["show", str(database)]) == 2
    err = capsys.readouterr().err
    assert f"bad input: {database}: its write-ahead log {database}-wal holds commits" in err
    assert "PRAGMA wal_checkpoint(TRUNCATE)" in err


def test_a_log_with_no_wal_to_read_is_opened_as_immutable(unwritable: Path) -> None:
    with SQLiteEventStore(unwritable / "log.db") as store:
        PinLedger(store, EventTypeRegistry(), unit_id="unit-1").commit()
    assert not (unwritable / "log.db-wal").exists()  # checkpointed and removed at close
    assert sqlite_module.read_only_uri(unwritable / "log.db").endswith("?mode=ro&immutable=1")
    with SQLiteEventStore(unwritable / "log.db", read_only=True) as store:
        assert store.unit_outcome("unit-1") == "committed"
