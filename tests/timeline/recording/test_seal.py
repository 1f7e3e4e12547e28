"""A recording's seal: written per unit, checked on every read, naming the first line that no longer matches."""

from __future__ import annotations

import json
import shutil
import unicodedata
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anagrapheus.errors import AnagrapheusError, RecordingError, SealBroken, UsageError
from anagrapheus.timeline import EventTypeRegistry, PinPromoted, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.recording import (
    RecordingHeader,
    read_recording,
    stream_pins,
    stream_recording,
    write_recording,
)
from anagrapheus.timeline.recording.header import read_header
from anagrapheus.timeline.recording.lines import checked_entries, read_lines
from examples.negotiation.runs import RECORDING

ROOT = Path(__file__).resolve().parents[3]
UNSEALED = ROOT / "tests" / "data" / "negotiation-unsealed.jsonl"
LINES = RECORDING.read_text(encoding="utf-8").splitlines(keepends=True)


def copied(tmp_path: Path, lines: list[str], name: str = "edited.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


def answer_line() -> int:
    """The line of the negotiation's last model answer (1-based)."""
    return max(n for n, text in enumerate(LINES, start=1) if '"kind":"model_call"' in text)


def every_reader(path: Path) -> list[AnagrapheusError]:
    """What each reader of a recording raises on `path` (one error per reader), for the ones that all refuse."""
    readers = [
        lambda: read_recording(path),
        lambda: list(stream_recording(path)[1]),
        lambda: list(stream_pins(path)[1]),
        lambda: ReplayPins.from_recording(path),
    ]
    raised: list[AnagrapheusError] = []
    for reader in readers:
        with pytest.raises(SealBroken) as caught:
            reader()
        raised.append(caught.value)
    return raised


def test_the_committed_recording_is_sealed_and_reads_with_its_seal_apart_from_the_header() -> None:
    recording = read_recording(RECORDING)

    assert recording.seal is not None
    assert [unit.unit for unit in recording.seal.units] == [f"eu-uk-talks-round-{n}" for n in range(1, 5)]
    assert sum(len(unit.lines) for unit in recording.seal.units) == len(recording.events)
    assert "seal" not in recording.header.details  # a header read is the header written


def test_a_hand_edited_answer_is_refused_by_every_reader_naming_its_line(tmp_path: Path) -> None:
    # Issue #41: an answer edited by hand replayed silently, its new text answered as recorded.
    line = answer_line()
    lines = list(LINES)
    assert "The UK accepts the package" in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace("The UK accepts the package", "The UK rejects the package")
    path = copied(tmp_path, lines)

    for error in every_reader(path):
        assert isinstance(error, RecordingError)
        assert (error.path, error.line, error.change, error.unit) == (str(path), line, "edited", "eu-uk-talks-round-4")
        assert f"{path}:{line}: this line no longer matches the seal" in str(error)
        assert f"anagrapheus reseal {path}" in str(error)


def test_a_pin_deleted_from_the_middle_is_refused_naming_the_line_after_it(tmp_path: Path) -> None:
    # Issue #41: a pin deleted from the middle of a unit passed every reader.
    gone = 30
    path = copied(tmp_path, LINES[: gone - 1] + LINES[gone:])

    for error in every_reader(path):
        assert (error.line, error.change) == (gone, "deleted")
        assert "1 sealed line(s) of unit 'eu-uk-talks-round-2' are missing before this line" in str(error)


def test_a_unit_s_last_lines_deleted_are_named_where_they_were(tmp_path: Path) -> None:
    path = copied(tmp_path, LINES[:-2])

    (error, *_) = every_reader(path)

    assert (error.line, error.change, error.unit) == (len(LINES) - 1, "deleted", "eu-uk-talks-round-4")
    assert f"the last 2 sealed line(s) of unit 'eu-uk-talks-round-4' are missing after line {len(LINES) - 2}" in str(
        error
    )


def test_a_whole_unit_deleted_is_named_at_the_next_unit_or_the_end(tmp_path: Path) -> None:
    round_2 = [n for n, text in enumerate(LINES) if '"correlation_id":"eu-uk-talks-round-2"' in text]
    middle = copied(tmp_path, [text for n, text in enumerate(LINES) if n not in round_2], "middle.jsonl")
    last = [n for n, text in enumerate(LINES) if '"correlation_id":"eu-uk-talks-round-4"' in text]
    end = copied(tmp_path, [text for n, text in enumerate(LINES) if n not in last], "end.jsonl")

    (error, *_) = every_reader(middle)
    assert (error.line, error.unit, error.change) == (round_2[0] + 1, "eu-uk-talks-round-2", "deleted")
    assert "unit 'eu-uk-talks-round-2', sealed with 18 line(s) before unit 'eu-uk-talks-round-3'" in str(error)
    (error, *_) = every_reader(end)
    assert (error.line, error.unit, error.change) == (last[0] + 1, "eu-uk-talks-round-4", "deleted")


def test_a_line_added_or_moved_to_another_unit_is_refused(tmp_path: Path) -> None:
    extra = json.loads(LINES[-1])
    extra.update(seq=99, event_id="019b8d62-91f0-7000-8000-000000000099")
    repeated = copied(tmp_path, [*LINES, json.dumps(extra) + "\n"], "added.jsonl")
    moved = list(LINES)
    moved[5] = moved[5].replace('"correlation_id":"eu-uk-talks-round-1"', '"correlation_id":"eu-uk-talks-round-9"')
    foreign = copied(tmp_path, moved, "moved.jsonl")

    with pytest.raises(SealBroken, match="this one is beyond them: added by hand") as raised:
        read_recording(repeated)
    assert (raised.value.line, raised.value.change) == (len(LINES) + 1, "added")
    with pytest.raises(SealBroken, match="the seal holds no unit 'eu-uk-talks-round-9'") as raised:
        read_recording(foreign)
    assert (raised.value.line, raised.value.change) == (6, "added")


def test_a_line_forged_to_match_its_short_digest_breaks_the_unit_s_chain(tmp_path: Path) -> None:
    # Finding a line whose short digest matches takes seconds; matching the chain's whole sha256 does not. Here
    # the chain in the header is what changed, which reads the same as a forged line would.
    header = json.loads(LINES[0])
    header["details"]["seal"]["units"][1]["chain"] = "0" * 64
    path = copied(tmp_path, [json.dumps(header) + "\n", *LINES[1:]])

    with pytest.raises(SealBroken, match="match their digests but not the unit's sealed chain") as raised:
        read_recording(path)
    assert (raised.value.line, raised.value.unit) == (1, "eu-uk-talks-round-2")


def test_reading_with_seal_ignore_takes_an_edited_file_as_it_is(tmp_path: Path) -> None:
    path = copied(tmp_path, LINES[:29] + LINES[30:])

    recording = read_recording(path, seal="ignore")

    assert len(recording.events) == len(LINES) - 2
    assert recording.seal is not None  # the seal is still read, only not held against the lines


@pytest.mark.parametrize(
    ("seal", "message"),
    [
        ("sealed", "details.seal is not a seal this anagrapheus reads (scheme None, not 'sha256-chain-1')"),
        ({"scheme": "sha512-chain-9"}, "(scheme 'sha512-chain-9', not 'sha256-chain-1')"),
        ({"scheme": "sha256-chain-1", "units": "all"}, "details.seal is malformed"),
        ({"scheme": "sha256-chain-1", "units": [{"unit": "u", "chain": "c"}]}, "details.seal is malformed"),
        ({"scheme": "sha256-chain-1", "units": [{"unit": 7, "chain": "c", "lines": []}]}, "details.seal is malformed"),
        ({"scheme": "sha256-chain-1", "units": [{"unit": "u", "chain": 1, "lines": []}]}, "details.seal is malformed"),
        (
            {"scheme": "sha256-chain-1", "units": [{"unit": "u", "chain": "c", "lines": [1]}]},
            "details.seal is malformed",
        ),
        ({"scheme": "sha256-chain-1", "units": ["u"]}, "details.seal is malformed"),
        (
            {
                "scheme": "sha256-chain-1",
                "units": [{"unit": "u", "chain": "c", "lines": []}, {"unit": "u", "chain": "c", "lines": []}],
            },
            "details.seal is malformed",
        ),
    ],
)
def test_a_seal_that_cannot_be_read_is_refused_at_line_1_unless_ignored(
    tmp_path: Path, seal: object, message: str
) -> None:
    header = json.loads(LINES[0])
    header["details"]["seal"] = seal
    path = copied(tmp_path, [json.dumps(header) + "\n", *LINES[1:]])

    with pytest.raises(RecordingError) as raised:
        read_recording(path)

    assert not isinstance(raised.value, SealBroken)
    assert raised.value.line == 1 and message in str(raised.value)
    assert read_recording(path, seal="ignore").seal is None


def test_an_unsealed_recording_reads_and_replays_as_before() -> None:
    recording = read_recording(UNSEALED)

    assert recording.seal is None
    assert ReplayPins.from_recording(UNSEALED).unused().keys() == ReplayPins.from_recording(RECORDING).unused().keys()
    assert recording.events == read_recording(RECORDING).events


def test_a_reader_from_before_the_seal_takes_a_sealed_file_as_it_finds_it() -> None:
    # The seal sits in `details`, whose values the header's model takes as they are, and adds no line: what a
    # reader written before the seal checks (the header, then every event line) passes unchanged.
    header = read_header(LINES[0].rstrip("\n"), where="r.jsonl")
    lines = read_lines(RECORDING, "r.jsonl", 1 << 20)
    next(lines)  # the header
    entries = list(checked_entries(lines, "r.jsonl"))

    assert "seal" in header.details
    assert len(entries) == len(LINES) - 1  # every line but the header is an event


def _units_log(path: Path) -> list[object]:
    types = EventTypeRegistry()
    with SQLiteEventStore(path) as store:
        store.append(
            [
                types.encode(
                    PinPromoted(unit_id=unit or "none", key=f"p1:tool_call:{n}", kind="tool_call", raw=n, attempts=1),
                    correlation_id=unit,
                )
                for n, unit in enumerate(["a", None, "b", "a", None])
            ]
        )
        return list(store.read())


HEADER = RecordingHeader(description="Units a, none and b.", recorded_with="by hand", rerecord="pytest")


def test_events_outside_any_unit_are_sealed_as_a_unit_of_their_own(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "r.jsonl", _units_log(tmp_path / "r.db"), header=HEADER)  # type: ignore[arg-type]

    recording = read_recording(path)
    assert recording.seal is not None
    assert [(unit.unit, len(unit.lines)) for unit in recording.seal.units] == [("a", 2), (None, 2), ("b", 1)]
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    with pytest.raises(SealBroken) as raised:
        read_recording(copied(tmp_path, lines[:2] + lines[3:], "cut.jsonl"))
    assert (raised.value.line, raised.value.unit, raised.value.change) == (3, None, "deleted")


def test_writing_replaces_the_seal_a_header_holds_and_refuses_a_detail_named_seal(tmp_path: Path) -> None:
    events = read_recording(RECORDING).events
    stale = read_recording(RECORDING).header.model_copy(
        update={"details": {"seal": json.loads(LINES[0])["details"]["seal"]}}
    )
    stale_seal = stale.details["seal"]
    assert isinstance(stale_seal, dict)

    written = write_recording(tmp_path / "half.jsonl", events[:10], header=stale)

    assert read_recording(written).seal is not None
    with pytest.raises(UsageError, match=r"details\['seal'\] is not a seal"):
        write_recording(tmp_path / "x.jsonl", events, header=HEADER.model_copy(update={"details": {"seal": "wax"}}))


def test_an_unchanged_re_recording_is_byte_identical_seal_and_all(tmp_path: Path) -> None:
    recording = read_recording(RECORDING)
    header = recording.header

    first = write_recording(tmp_path / "a.jsonl", recording.events, header=header)
    second = write_recording(tmp_path / "b.jsonl", recording.events, header=header)

    assert first.read_bytes() == second.read_bytes() == RECORDING.read_bytes()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_one_line_deleted_or_edited_is_named(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    number = data.draw(st.integers(min_value=2, max_value=len(LINES)), label="line")
    delete = data.draw(st.booleans(), label="delete")
    lines = list(LINES)
    if delete:
        del lines[number - 1]
    else:
        lines[number - 1] = lines[number - 1].replace('"created_at":"2026-01-05', '"created_at":"2026-01-06', 1)
    path = copied(tmp_path_factory.mktemp("one"), lines)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SealBroken) as raised:
            read_recording(path)

    assert raised.value.change == ("deleted" if delete else "edited")
    # An edit is named at its line; a deletion at the line that took its place, or just past its unit's end.
    assert raised.value.line == number or (delete and raised.value.line is not None)


def test_a_replay_from_the_sealed_and_the_unsealed_file_holds_the_same_pins(tmp_path: Path) -> None:
    shutil.copy(UNSEALED, tmp_path / "old.jsonl")
    old = ReplayPins.from_recording(tmp_path / "old.jsonl")
    new = ReplayPins.from_recording(RECORDING)

    assert len(old) == len(new) and all(key in new for key in old.unused())


def test_what_a_reseal_accepts_is_said_per_run_of_changed_lines() -> None:
    from anagrapheus.timeline.recording.seal import Sealer, seal_changes

    def sealed(texts: list[str]) -> Sealer:
        sealer = Sealer()
        for line, text in enumerate(texts, start=2):
            sealer.add("u", text, line=line)
        return sealer

    old = sealed(["a", "b", "c", "d", "e"]).seal

    assert seal_changes(old, sealed(["a", "x", "y", "c", "d", "e"])) == ["unit 'u': lines 3-4 edited"]
    assert seal_changes(old, sealed(["a", "x", "e"])) == [
        "unit 'u': line 3 edited; 2 sealed line(s) deleted before line 4"
    ]
    assert seal_changes(old, sealed(["a", "b", "c"])) == ["unit 'u': 2 sealed line(s) deleted at its end"]
    assert seal_changes(old, sealed(["a", "b", "c", "d", "e"])) == []


def test_a_unit_id_the_line_holds_otherwise_is_sealed_as_the_line_holds_it(tmp_path: Path) -> None:
    # A stored id keeps its text as drawn (#45) and a redacted id is a placeholder: the seal names the unit the
    # reader reads, in NFC (a header a rule searched is written as NFC).
    from anagrapheus.timeline import SecretScanner

    token = "gh" + "p_" + "Zq8" * 12  # built from pieces: no token-shaped literal in the test source
    types = EventTypeRegistry()
    units = ["cafe\u0301", f"chat {token}"]
    with SQLiteEventStore(tmp_path / "r.db") as store:
        store.append(
            [
                types.encode(
                    PinPromoted(unit_id="u", key=f"p1:tool_call:{n}", kind="tool_call", raw=n, attempts=1),
                    correlation_id=unit,
                )
                for n, unit in enumerate(units)
            ]
        )
        events = list(store.read())

    path = write_recording(tmp_path / "r.jsonl", events, header=HEADER, redact=SecretScanner())

    recording = read_recording(path)
    assert recording.seal is not None
    read = [e.correlation_id for e in recording.events]
    assert [unit.unit for unit in recording.seal.units] == [unicodedata.normalize("NFC", u or "") for u in read]
    assert read[0] == "cafe\u0301" and token not in path.read_text(encoding="utf-8")
