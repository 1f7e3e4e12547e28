"""Recordings: a header line, then the log's own events as canonical JSON lines, in a file for a repository.

The names a recording's reader and writer use, gathered from the modules that hold them: the header
(`recording_header`), the writer (`recording_writer`), the readers (`recording_reader`, `recording_pins`),
the line limit (`recording_lines`), the seal (`recording_seal`) and the index beside a large recording
(`recording_index`).
"""

from __future__ import annotations

from anagrapheus.timeline.recording_header import RECORDING_FORMAT, RECORDING_VERSION, RecordingHeader
from anagrapheus.timeline.recording_index import INDEX_MIN_EVENTS, RecordingIndexWarning, index_path
from anagrapheus.timeline.recording_lines import MAX_LINE_BYTES
from anagrapheus.timeline.recording_pins import stream_pins
from anagrapheus.timeline.recording_reader import Recording, read_recording, stream_recording
from anagrapheus.timeline.recording_seal import Seal, SealCheck, UnitSeal
from anagrapheus.timeline.recording_writer import pin_events, write_recording

__all__ = [
    "INDEX_MIN_EVENTS",
    "MAX_LINE_BYTES",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "Recording",
    "RecordingHeader",
    "RecordingIndexWarning",
    "Seal",
    "SealCheck",
    "UnitSeal",
    "index_path",
    "pin_events",
    "read_recording",
    "stream_pins",
    "stream_recording",
    "write_recording",
]
