"""Reading a recording's pins fast: each current pin's text taken from its line as parsed, never written again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anagrapheus.errors import AnagrapheusError, RecordingError
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    EventTypeRegistry,
    PinPromoted,
    PinText,
    given_or_builtins,
    is_current_pin,
)
from anagrapheus.timeline.provenance import ProvenanceCheck, Stamping
from anagrapheus.timeline.recording.header import RecordingHeader
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES, stored_event
from anagrapheus.timeline.recording.reader import open_recording
from anagrapheus.timeline.recording.seal import SealCheck
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = ["pins_of_entries", "stream_pins"]


def stream_pins(
    path: str | os.PathLike[str],
    registry: EventTypeRegistry | None = None,
    *,
    upcasts: UpcastRegistry | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
    seal: SealCheck = "verify",
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, Iterator[PinText]]:
    """Read a recording's header now and its pins, as texts, as they are iterated (what `ReplayPins` keeps).

    Every line is checked as `read_recording` checks it. A current pin's payload is read from the
    line as parsed, never written out and parsed again; an older one is upcast through `upcasts`.
    The header's provenance is checked at once, and every line (a pin or not) against the seal, as
    `stream_recording` checks them.
    """
    where = str(path)
    header, _, entries = open_recording(
        Path(path), where, max_line_bytes, call_policy, provenance, seal=seal, stamping=stamping
    )
    return header, pins_of_entries(entries, where, given_or_builtins(registry), upcasts)


def pins_of_entries(
    entries: Iterator[tuple[int, dict[str, Any]]],
    where: str,
    registry: EventTypeRegistry,
    upcasts: UpcastRegistry | None,
) -> Iterator[PinText]:
    """The pins among checked event lines, as texts: a current pin's from its parsed line, an older one upcast."""
    for number, fields in entries:
        if fields["namespace"] != BUILTIN_NAMESPACE or fields["type"] != PinPromoted.event_type:
            continue
        seq = fields["seq"]
        try:
            if is_current_pin(fields["schema_version"], registry, seq=seq):
                yield PinPromoted.text_of_payload(fields["payload"], seq=seq)
            else:
                yield PinPromoted.read_text(stored_event(fields, where=where, line=number), registry, upcasts=upcasts)
        except RecordingError:
            raise  # it names the file and line already
        except AnagrapheusError as e:
            raise RecordingError(str(e), path=where, line=number) from e
