"""The `anagrapheus` command on damaged, piped and read-only inputs: named errors and exit 2, never a hang or a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.timeline import PinLedger, SQLiteEventStore
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
