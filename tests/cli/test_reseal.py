"""`anagrapheus check` and `reseal` on sealed, edited and unsealed recordings, and on pins under two key schemes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.timeline import read_recording
from examples.negotiation.runs import RECORDING

ROOT = Path(__file__).resolve().parents[2]
UNSEALED = ROOT / "tests" / "data" / "negotiation-unsealed.jsonl"
WHOLE = ROOT / "tests" / "data" / "negotiation-whole-fingerprints.jsonl"
"""The committed negotiation as written before fingerprint deltas (version 2), sealed."""
LINES = RECORDING.read_text(encoding="utf-8").splitlines(keepends=True)
ANSWER = max(n for n, text in enumerate(LINES, start=1) if '"kind":"model_call"' in text)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def written(tmp_path: Path, lines: list[str], name: str = "edited.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


def edited_answer(tmp_path: Path) -> Path:
    lines = list(LINES)
    lines[ANSWER - 1] = lines[ANSWER - 1].replace("The UK accepts the package", "The UK rejects the package")
    return written(tmp_path, lines)


def test_check_refuses_an_edited_answer_naming_its_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue #41: this file passed `check` with exit 0.
    path = edited_answer(tmp_path)

    code, out, _ = cli(capsys, "check", str(path))

    assert code == 2
    assert out.startswith(f"{path}:{ANSWER}: [seal] this line no longer matches the seal (line 10 of unit")
    report = json.loads(cli(capsys, "check", str(path), "--json")[1])
    assert [(p["check"], p["code"], p["line"]) for p in report["files"][0]["problems"]] == [("seal", 2, ANSWER)]


def test_check_refuses_a_pin_deleted_from_the_middle_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue #41: this file passed `check` with exit 0.
    path = written(tmp_path, LINES[:29] + LINES[30:])

    code, out, _ = cli(capsys, "check", str(path))

    assert code == 2
    assert out.startswith(f"{path}:30: [seal] 1 sealed line(s) of unit 'eu-uk-talks-round-2' are missing")


def test_check_says_an_old_recording_is_unsealed_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", str(UNSEALED))

    assert code == 0
    assert out.splitlines() == [
        f"{UNSEALED}: ok, 67 event(s) (format, events, keys, provenance, secrets, seal)",
        f"{UNSEALED}:1: [seal] note: unsealed: a line edited by hand would pass unnoticed; seal it as it stands"
        " with `anagrapheus reseal`",
    ]


def test_reseal_lists_what_it_accepts_then_seals_and_check_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = edited_answer(tmp_path)
    before = path.read_bytes()

    code, out, _ = cli(capsys, "reseal", str(path), "--dry-run")
    assert (code, path.read_bytes()) == (0, before)
    assert out.splitlines() == [
        f"{path}: accepting",
        f"  unit 'eu-uk-talks-round-4': line {ANSWER} edited",
        "nothing written (--dry-run)",
    ]

    code, out, _ = cli(capsys, "reseal", str(path))
    assert code == 0
    assert out.splitlines() == [
        f"{path}: accepting",
        f"  unit 'eu-uk-talks-round-4': line {ANSWER} edited",
        f"sealed {path}",
    ]
    assert cli(capsys, "check", str(path))[0] == 0
    # Only the header (its seal) changed: the edit is kept as made.
    assert (
        path.read_text(encoding="utf-8").splitlines(keepends=True)[1:] == before.decode().splitlines(keepends=True)[1:]
    )
    assert "rejects the package" in read_recording(path).events[ANSWER - 2].payload

    code, out, _ = cli(capsys, "reseal", str(path), "--json")
    assert (code, json.loads(out)["accepted"], json.loads(out)["written"]) == (0, [], False)


def test_reseal_names_deleted_added_and_vanished_units_and_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    round_4 = [n for n, text in enumerate(LINES) if '"correlation_id":"eu-uk-talks-round-4"' in text]
    lines = [text for n, text in enumerate(LINES) if n not in round_4 and n not in (4, 30)]
    lines[3] = lines[3].replace('"created_at":"2026-01-05', '"created_at":"2026-01-06')
    for seq, unit in ((99, "eu-uk-talks-round-5"), (100, "eu-uk-talks-round-3"), (101, "eu-uk-talks-round-5")):
        extra = json.loads(LINES[2])
        extra.update(seq=seq, event_id=f"019b8d62-91f0-7000-8000-000000000{seq}", correlation_id=unit)
        if "unit_id" in extra["payload"]:  # a compact line's unit is its correlation id
            extra["payload"]["unit_id"] = unit
        lines.append(json.dumps(extra, sort_keys=True, separators=(",", ":")) + "\n")
    path = written(tmp_path, lines)

    code, out, _ = cli(capsys, "reseal", str(path))

    assert code == 0
    assert out.splitlines() == [
        f"{path}: accepting",
        "  unit 'eu-uk-talks-round-4': all 12 sealed line(s) deleted",
        "  unit 'eu-uk-talks-round-1': line 4 edited; 1 sealed line(s) deleted before line 5",
        "  unit 'eu-uk-talks-round-2': 1 sealed line(s) deleted before line 30",
        "  unit 'eu-uk-talks-round-3': line 56 added",
        "  unit 'eu-uk-talks-round-5': added, lines 55, 57",
        f"sealed {path}",
    ]
    assert cli(capsys, "check", str(path))[0] == 0


def test_reseal_seals_an_unsealed_recording_keeping_its_events_and_permissions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = written(tmp_path, UNSEALED.read_text(encoding="utf-8").splitlines(keepends=True), "old.jsonl")
    os.chmod(path, 0o644)

    code, out, _ = cli(capsys, "reseal", str(path))

    assert code == 0
    assert out.splitlines()[1] == "  unsealed: sealing 4 unit(s), 67 line(s), as they stand"
    # Its fingerprints stay whole (a version 2 file, as it was): the committed file before deltas, sealed.
    assert path.read_bytes() == WHOLE.read_bytes()
    assert read_recording(path).events == read_recording(RECORDING).events
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_reseal_of_what_is_not_a_recording_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    cut = written(tmp_path, [LINES[0], LINES[1][:40]], "cut.jsonl")
    token = "gh" + "p_" + "Zq8" * 12  # built from pieces: no token-shaped literal in the test source
    leaky = list(LINES)
    leaky[ANSWER - 1] = leaky[ANSWER - 1].replace("The UK accepts the package", f"key {token}")
    leaked = written(tmp_path, leaky, "leaky.jsonl")

    assert cli(capsys, "reseal", str(missing)) == (2, "", f"bad input: {missing}: no such recording file\n")
    code, _, err = cli(capsys, "reseal", str(cut))
    assert code == 2 and err.startswith(f"bad input: {cut}:2: ")
    code, _, err = cli(capsys, "reseal", str(leaked))
    assert code == 2 and "secret rule 'github-token'" in err and token not in err
    assert leaked.read_text(encoding="utf-8") == "".join(leaky)  # refused, never half written


def test_commands_that_write_a_recording_refuse_a_tampered_one_and_the_lookers_show_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An edit is never laundered into a fresh seal by a command that writes a new recording from it.
    path = edited_answer(tmp_path)

    for command in (
        ["export", str(path), "--unit", "eu-uk-talks-round-4", "-o", str(tmp_path / "out.jsonl")],
        ["upcast", str(path), "-o", str(tmp_path / "up.jsonl")],
    ):
        code, _, err = cli(capsys, *command)
        assert code == 2 and f"{path}:{ANSWER}: this line no longer matches the seal" in err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "up.jsonl").exists()
    # Looking at a file reads it as it is: a reviewer sees the edit.
    assert cli(capsys, "show", str(path))[0] == 0
    code, out, _ = cli(capsys, "diff", str(RECORDING), str(path))
    assert code == 1 and "The UK rejects the package" in out


def test_check_refuses_pins_under_two_key_schemes_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue #41: a file mixing p1 and p2 keys passed `check` with exit 0, and replay then refused it.
    lines = UNSEALED.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[9] = lines[9].replace('"key":"p1:', '"key":"p2:', 1)
    path = written(tmp_path, lines, "mixed.jsonl")

    code, out, _ = cli(capsys, "check", str(path))

    assert code == 2
    assert out.splitlines()[0] == (
        f"{path}:10: [keys] pins mix key schemes: p1 (first at {path}:2) and p2 (first at {path}:10). A replay asks"
        " under one scheme, so the other's pins never answer: record the run again, or keep one scheme's pins per file"
    )
    # Keys of another shape (a resolver's own) have no scheme and mix with nothing.
    lines[9] = lines[9].replace('"key":"p2:', '"key":"mine:', 1)
    assert cli(capsys, "check", str(written(tmp_path, lines, "own.jsonl")))[0] == 0


def test_reseal_names_a_unit_whose_chain_alone_changed_and_a_unit_added_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = json.loads(LINES[0])
    header["details"]["seal"]["units"][0]["chain"] = "0" * 64
    lines = [json.dumps(header) + "\n", *LINES[1:]]
    for seq in (99, 100):
        extra = json.loads(LINES[2])
        extra.update(seq=seq, event_id=f"019b8d62-91f0-7000-8000-0000000000{seq}", correlation_id="round-5")
        lines.append(json.dumps(extra, sort_keys=True, separators=(",", ":")) + "\n")
    path = written(tmp_path, lines)

    code, out, _ = cli(capsys, "reseal", str(path), "--dry-run")

    assert code == 0
    assert out.splitlines()[1:3] == [
        "  unit 'eu-uk-talks-round-1': its lines no longer match the sealed chain",
        "  unit 'round-5': added, lines 69-70",
    ]
