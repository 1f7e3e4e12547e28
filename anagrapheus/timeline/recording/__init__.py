"""Recordings: a header line, then the log's own events as canonical JSON lines, in a file for a repository.

The names a recording's reader and writer use, gathered from the modules that hold them: the header
(`header`), the writer (`writer`), the readers (`reader`, `pins`), fingerprints written as deltas (`deltas`),
compact pin and run lines (`compact`), runs' histories referring to pinned responses (`responses`), the line
limit (`lines`), the seal (`seal`) and the index beside a large recording (`index`).
"""

from __future__ import annotations

from anagrapheus.timeline.recording.header import (
    FINGERPRINT_DELTAS_VERSION,
    RECORDING_FORMAT,
    RECORDING_VERSION,
    WHOLE_FINGERPRINTS_VERSION,
    RecordingHeader,
)
from anagrapheus.timeline.recording.index import INDEX_MIN_EVENTS, RecordingIndexWarning, index_path
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES
from anagrapheus.timeline.recording.pins import stream_pins
from anagrapheus.timeline.recording.reader import Recording, read_recording, stream_recording
from anagrapheus.timeline.recording.seal import Seal, SealCheck, UnitSeal
from anagrapheus.timeline.recording.writer import pin_events, write_recording

__all__ = [
    "FINGERPRINT_DELTAS_VERSION",
    "INDEX_MIN_EVENTS",
    "MAX_LINE_BYTES",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "WHOLE_FINGERPRINTS_VERSION",
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
