"""One way to tell what an address holds (a PostgreSQL URI, a SQLite log, a recording) and open it, for every caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import StoreError, UsageError
from anagrapheus.timeline import SQLiteEventStore, read_recording
from anagrapheus.timeline.stores.copying import POSTGRES_SCHEMES, open_store
from anagrapheus.timeline.stores.opening import SQLITE_MAGIC, is_postgres, log_kind, read_events
from examples.negotiation.runs import RECORDING
from tests.cli_fixtures import negotiation_database

URI = "postgresql://agent:hunter2@127.0.0.1:1/runs"


def test_the_scheme_decides_before_any_file_is_looked_at(tmp_path: Path) -> None:
    assert POSTGRES_SCHEMES == ("postgresql://", "postgres://")
    assert [is_postgres(a) for a in (URI, "postgres://h/d", "runs.db", Path("postgresql://x"))] == [
        True,
        True,
        False,
        False,
    ]
    assert log_kind(URI) == log_kind("postgres://h/d") == "postgresql"


def test_a_file_is_told_by_its_first_bytes_whatever_its_name(tmp_path: Path) -> None:
    database = tmp_path / "looks-like.jsonl"
    with SQLiteEventStore(database):
        pass
    assert log_kind(database) == "sqlite"
    assert log_kind(RECORDING) == "recording"
    (tmp_path / "empty.db").write_bytes(b"")
    assert log_kind(tmp_path / "empty.db") == "recording"  # nothing to read as SQLite: read, and refused, as text
    assert log_kind("-", head=SQLITE_MAGIC + b"rest") == "sqlite"
    assert log_kind("-", head=b"SQLite") == "recording"
    with pytest.raises(FileNotFoundError):
        log_kind(tmp_path / "missing.db")


def test_a_postgres_log_is_never_opened_read_only_and_says_what_to_do_instead() -> None:
    with pytest.raises(UsageError) as caught:
        open_store(URI, read_only=True)
    assert str(caught.value) == (
        "a PostgreSQL log is read from a SQLite copy: run `anagrapheus copy URI FILE` and name FILE instead"
    )


def test_a_sqlite_log_opened_read_only_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"missing\.db"):
        open_store(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_read_events_reads_either_kind_of_file(tmp_path: Path) -> None:
    database = negotiation_database(tmp_path / "n.db")
    with SQLiteEventStore(database, read_only=True) as store:
        assert read_events(database) == list(store.read())
    assert read_events(str(RECORDING)) == list(read_recording(RECORDING, provenance="ignore").events)
    with pytest.raises(UsageError, match=r"^cannot read .*missing\.db: No such file or directory$"):
        read_events(tmp_path / "missing.db")
    with pytest.raises(UsageError, match="a PostgreSQL log is read from a SQLite copy"):
        read_events(URI)


@pytest.mark.parametrize("command", [["show"], ["check"], ["export", "--unit", "u", "-o", "x.jsonl"]])
def test_commands_that_read_a_log_refuse_a_postgres_uri_saying_how_to_read_it(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name, *options = command
    assert main([name, URI, *options]) == 2
    captured = capsys.readouterr()
    err = captured.out + captured.err  # check reports on stdout, the others fail on stderr
    assert "hunter2" not in err
    assert "postgresql://agent:***@127.0.0.1:1/runs" in err
    assert "a PostgreSQL log is read from a SQLite copy: run `anagrapheus copy URI FILE` and name FILE instead" in err
