"""`open_source` through a recording's index: `show --unit` and `view --unit` say what a whole read says, reading one unit."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.timeline.recording import read_recording, write_recording
from anagrapheus.timeline.recording.index import RecordingIndexWarning, index_path
from examples.negotiation.runs import RECORDING

UNITS = ("eu-uk-talks-round-4", "eu-uk-talks-round-2")


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """The negotiation recording written again, with an index, in a directory of its own."""
    held = read_recording(RECORDING, provenance="ignore")
    path = tmp_path / "indexed" / "talks.jsonl"
    path.parent.mkdir()
    write_recording(path, held.events, header=held.header, index=True)
    assert index_path(path).is_file()
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordingIndexWarning)
        code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _without_index(path: Path) -> Path:
    plain = path.parent.parent / "plain" / path.name
    plain.parent.mkdir(exist_ok=True)
    shutil.copy(path, plain)
    return plain


@pytest.mark.parametrize("units", [UNITS[:1], UNITS, ("no-such-unit",)])
def test_show_of_some_units_says_the_same_through_the_index(
    indexed: Path, units: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    plain = _without_index(indexed)
    asked = [arg for unit in units for arg in ("--unit", unit)]
    code, out, err = _run(capsys, "show", str(indexed), "--json", *asked)
    plain_code, plain_out, plain_err = _run(capsys, "show", str(plain), "--json", *asked)
    assert code == plain_code
    assert out.replace(str(indexed), "P") == plain_out.replace(str(plain), "P")
    assert err.replace(str(indexed), "P") == plain_err.replace(str(plain), "P")
    if code == 0:
        assert [u["unit"] for u in json.loads(out)["units"]] == sorted(units, key=lambda u: int(u[-1]))


def test_view_of_a_unit_writes_the_same_page_through_the_index(
    indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = _without_index(indexed)
    pages = []
    for path in (indexed, plain):
        page = path.with_suffix(".html")
        assert _run(capsys, "view", str(path), "--unit", UNITS[0], "-o", str(page))[0] == 0
        pages.append(page.read_text().replace(str(path), "P"))
    assert pages[0] == pages[1]


def test_show_of_a_unit_reads_only_its_lines(indexed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = indexed.read_bytes().split(b"\n")
    other = next(n for n, line in enumerate(lines[1:-1], start=1) if UNITS[0].encode() not in line)
    # Another unit's line made unreadable, its size kept: the whole read refuses the file; the unit's read is fine.
    lines[other] = b"#" * len(lines[other])
    indexed.write_bytes(b"\n".join(lines))
    assert _run(capsys, "show", str(indexed), "--unit", UNITS[0])[0] == 0
    assert _run(capsys, "show", str(indexed))[0] == 2


def test_a_page_of_the_whole_recording_shows_its_first_pins_and_counts_the_rest(
    indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = read_recording(indexed, provenance="ignore")
    total = sum(1 for event in held.events if event.type == "pin_promoted")
    page = indexed.with_suffix(".html")
    code, out, _ = _run(capsys, "view", str(indexed), "-o", str(page), "--max-pins", "3", "--json")
    facts = json.loads(out)
    assert code == 0 and (facts["pins"], facts["shown"]) == (total, 3)
    shown = page.read_text()
    assert shown.count("<article ") == 3
    assert f"{total} pin(s); this page shows the first 3 (view --max-pins)" in shown
    assert "more pin(s) not on this page" in shown
    # A unit's page shows every one of its pins, whatever --max-pins says.
    code, out, _ = _run(capsys, "view", str(indexed), "--unit", UNITS[0], "-o", str(page), "--max-pins", "1", "--json")
    facts = json.loads(out)
    assert facts["pins"] == facts["shown"] > 1
    assert page.read_text().count("<article ") == facts["pins"]
