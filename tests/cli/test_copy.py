"""`anagrapheus copy SRC DST`: a log moved between SQLite files and PostgreSQL schemas, seq, ids and times kept, and
never a password printed, whichever form the DSN gives it in (`masked_dsn` is what it prints)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.timeline import PendingEvent, SQLiteEventStore, StoredEvent
from anagrapheus.timeline.secrets import masked_dsn


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


PW = "hunter2" + "-prod"


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://127.0.0.1:1/runs?connect_timeout=2&password={PW}",
        f"postgresql://agent@127.0.0.1:1/runs?password={PW}&connect_timeout=2",
        f"postgresql://agent:{PW}/with/slash@127.0.0.1:1/runs?connect_timeout=2",
        f"postgresql://agent:{PW}@at@127.0.0.1:1/runs?connect_timeout=2",
    ],
    ids=["query-password", "query-password-first", "userinfo-with-slash", "userinfo-with-at"],
)
def test_a_failed_copy_names_the_server_but_not_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    a_log(tmp_path / "a.db", n=1)

    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), dsn)

    assert code == 2
    assert "hunter2" not in out + err
    assert "127.0.0.1:1" in err and "***" in err


def test_a_source_that_cannot_be_opened_is_named_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = f"postgresql://agent:{PW}/x@127.0.0.1:1/runs?connect_timeout=2"

    code, out, err = cli(capsys, "copy", dsn, str(tmp_path / "b.db"))

    assert code == 2 and "cannot open the source" in err
    assert "hunter2" not in out + err


@pytest.mark.postgres
def test_a_copy_reports_where_it_went_without_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_dsn: str, pg_schema: str
) -> None:
    a_log(tmp_path / "a.db", n=1)
    # The test server trusts every local connection, so the password is sent and ignored.
    dsn = postgres_dsn + ("&" if "?" in postgres_dsn else "?") + f"password={PW}"

    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), dsn, "--schema", pg_schema)
    assert code == 0, err
    assert "copied 1 event(s)" in out and "password=***" in out and PW not in out + err

    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), dsn, "--schema", pg_schema)
    assert code == 0 and out.startswith("nothing to copy:") and PW not in out + err


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("postgresql://app:pw@rest@db/app", "postgresql://app:***@db/app"),
        (
            "postgresql://app:pa/ss@db/app?sslpassword=x&sslmode=require",
            "postgresql://app:***@db/app?sslpassword=***&sslmode=require",
        ),
        ("host=db password='a b\\' c' dbname=app", "host=db password=*** dbname=app"),
        ("PASSWORD=secret host=db", "PASSWORD=*** host=db"),
        ("postgresql://u:@db/x", "postgresql://u:***@db/x"),
        # Nothing to mask: a port and a path, a user alone, an `@` in the query, a file.
        ("postgresql://db:5432/app?user=a@b", "postgresql://db:5432/app?user=a@b"),
        ("postgresql://user@db/app", "postgresql://user@db/app"),
        ("/tmp/runs/a.db", "/tmp/runs/a.db"),
    ],
)
def test_masked_dsn_hides_each_form_of_password(address: str, shown: str) -> None:
    assert masked_dsn(address) == shown
