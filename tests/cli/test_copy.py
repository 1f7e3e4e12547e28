"""`anagrapheus copy SRC DST`: a log moved between SQLite files and PostgreSQL schemas, seq, ids and times kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.timeline import PendingEvent, SQLiteEventStore, StoredEvent


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def a_log(path: Path, n: int = 7) -> list[StoredEvent]:
    with SQLiteEventStore(path) as store:
        for i in range(n):
            store.append([PendingEvent(namespace="app", type="said", schema_version=1, payload=f'{{"i":{i}}}')])
        return list(store.read())


def test_copy_between_sqlite_files_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = a_log(tmp_path / "a.db")
    code, out, _ = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--json")
    assert code == 0
    assert json.loads(out) == {"exit_code": 0, "copied": 7, "first_seq": 1, "last_seq": 7}
    with SQLiteEventStore(tmp_path / "b.db") as copied:
        assert list(copied.read()) == events
    code, out, _ = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "b.db"))
    assert (code, out.strip()) == (
        0,
        f"nothing to copy: {tmp_path / 'b.db'} already holds {tmp_path / 'a.db'}'s 7 event(s)",
    )


def test_copy_into_a_log_that_is_not_a_prefix_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_log(tmp_path / "a.db")
    a_log(tmp_path / "b.db", n=2)  # different event ids
    code, _, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "b.db"))
    assert code == 2
    assert "not a prefix" in err
    assert str(tmp_path / "b.db") in err


def test_a_missing_source_file_is_bad_input_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "copy", str(tmp_path / "typo.db"), str(tmp_path / "b.db"))
    assert code == 2
    assert "no such log file" in err
    assert list(tmp_path.iterdir()) == []


def test_copy_never_prints_a_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_log(tmp_path / "a.db")
    code, out, err = cli(
        capsys, "copy", str(tmp_path / "a.db"), "postgresql://agent:hunter2@127.0.0.1:1/runs?connect_timeout=2"
    )
    assert code == 2
    assert "hunter2" not in out + err
    assert "127.0.0.1:1" in err and "runs" in err


@pytest.mark.postgres
def test_copy_into_postgres_and_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_dsn: str, pg_schema: str
) -> None:
    events = a_log(tmp_path / "a.db")
    code, _, err = cli(capsys, "copy", str(tmp_path / "a.db"), postgres_dsn, "--schema", pg_schema)
    assert code == 0, err
    code, _, err = cli(capsys, "copy", postgres_dsn, str(tmp_path / "back.db"), "--schema", pg_schema)
    assert code == 0, err
    with SQLiteEventStore(tmp_path / "back.db") as back:
        assert list(back.read()) == events
