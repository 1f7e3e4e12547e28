"""`open_source(streamed=True)`: `show` and `check` stream a large recording, their peak per pin flat as it grows."""

from __future__ import annotations

import contextlib
import io
import tracemalloc
from pathlib import Path

import pytest

import anagrapheus.cli.sources as sources
from anagrapheus.cli import main
from anagrapheus.timeline import PinPromoted, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording

HEADER = RecordingHeader(description="streamed", recorded_with="synthetic pins", rerecord="pytest")


def _recording(path: Path, count: int, text_bytes: int) -> Path:
    """`count` pins in 4 units, each answering with about `text_bytes` of text."""
    events: list[StoredEvent] = []
    for n in range(1, count + 1):
        payload = PinPromoted(
            unit_id=f"unit-{n % 4}",
            key=f"p1:model_call:{n:064x}",
            kind="model_call",
            raw={"parts": [{"part_kind": "text", "content": f"{n:08d}" * (text_bytes // 8)}]},
            attempts=1,
        )
        events.append(
            StoredEvent(
                seq=n,
                event_id=f"00000000-0000-7000-8000-{n:012d}",
                namespace="anagrapheus",
                type="pin_promoted",
                schema_version=PinPromoted.schema_version,
                causation_id=None,
                correlation_id=f"unit-{n % 4}",
                created_at="2026-01-05T09:00:00.000000Z",
                payload=payload.model_dump_json(),
            )
        )
    write_recording(path, events, header=HEADER, index=False)
    return path


def _peak(*argv: str) -> int:
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(list(argv)) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("command", [("show", "--json"), ("check",)])
def test_peak_memory_per_pin_stays_flat_as_the_recording_grows(
    tmp_path: Path, command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _recording(tmp_path / "small.jsonl", 300, 256)
    wide = _recording(tmp_path / "wide.jsonl", 300, 8192)  # each pin 32 times larger
    long = _recording(tmp_path / "long.jsonl", 1200, 256)  # four times the pins
    name, *options = command

    def per_pin(path: Path, pins: int) -> float:
        return _peak(name, str(path), *options) / pins

    assert wide.stat().st_size > 10 * small.stat().st_size
    # Read whole (below the streaming size), the peak follows the pins' bytes: the test's control.
    whole = per_pin(wide, 300) / per_pin(small, 300)
    assert whole > 5
    monkeypatch.setattr(sources, "STREAM_ABOVE_BYTES", 0)
    assert per_pin(wide, 300) / per_pin(small, 300) < 1.5
    assert per_pin(long, 1200) / per_pin(small, 300) < 1.5


def _said(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", [("show", "--json"), ("check", "--json"), ("show",)])
@pytest.mark.parametrize("damage", [None, "edited", "not json"])
def test_a_streamed_recording_says_what_a_whole_read_says(
    tmp_path: Path,
    command: tuple[str, ...],
    damage: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _recording(tmp_path / "run.jsonl", 40, 64)
    lines = path.read_text().split("\n")
    if damage == "edited":
        lines[7] = lines[7].replace('"created_at":"2026-01-05', '"created_at":"2026-01-06')
    elif damage == "not json":
        lines[9] = "{" + lines[9]
    path.write_text("\n".join(lines))
    name, *options = command
    whole = _said(capsys, name, str(path), *options)
    monkeypatch.setattr(sources, "STREAM_ABOVE_BYTES", 0)
    assert _said(capsys, name, str(path), *options) == whole
    assert whole[0] == (0 if damage is None or (name == "show" and damage == "edited") else 2)
