"""A recording's header line: what run it holds, what made it and how to record it again; written and read."""

from __future__ import annotations

import gc
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from anagrapheus.errors import RecordingError, UsageError
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.provenance import Provenance
from anagrapheus.timeline.recording.lines import EVENT_FIELDS, is_int
from anagrapheus.timeline.recording.strict_json import parse_object

__all__ = [
    "FINGERPRINT_DELTAS_VERSION",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "WHOLE_FINGERPRINTS_VERSION",
    "RecordingHeader",
    "as_header",
    "header_line",
    "read_header",
]

RECORDING_FORMAT = "anagrapheus.recording"
"""The format marker on every recording's header line."""

RECORDING_VERSION = 4
"""The newest recording format version this code writes; version 2 added the header's `provenance`, version 3 pin
fingerprints written as deltas (`deltas`), version 4 compact pin and run lines (`compact`) and runs' histories
referring to the model responses their unit's pins hold (`responses`). A recording is written in the oldest version
that holds what it writes: one with neither version 4 form is version 3 (`FINGERPRINT_DELTAS_VERSION`), one that
holds no delta either version 2 (`WHOLE_FINGERPRINTS_VERSION`), which a reader before version 3 reads as it always
did."""

FINGERPRINT_DELTAS_VERSION = 3
"""The version of a recording that may hold fingerprint deltas but no reference to a pinned response."""

WHOLE_FINGERPRINTS_VERSION = 2
"""The version of a recording whose every fingerprint is written whole."""

_READABLE_VERSIONS = (1, WHOLE_FINGERPRINTS_VERSION, FINGERPRINT_DELTAS_VERSION, RECORDING_VERSION)


class RecordingHeader(BaseModel):
    """What a recording says about itself: what run it holds, what recorded it and how to record it again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str
    """What run the recording holds, in a sentence."""
    recorded_with: str
    """How it was recorded: the provider route, or honestly how the models were scripted."""
    rerecord: str
    """The exact command that records it again."""
    models: dict[str, str] = {}
    """The model id behind each role, as it appears in the pin keys."""
    details: dict[str, JsonValue] = {}
    """Anything else the recorder wants a reader of the file to know."""
    provenance: Provenance | None = None
    """What made the recording; `write_recording` stamps it when the header has none (None in version 1 files)."""


def header_line(header: RecordingHeader, *, version: int = WHOLE_FINGERPRINTS_VERSION) -> dict[str, JSONValue]:
    """The header as its line holds it: the format marker and version, then its fields."""
    return {"format": RECORDING_FORMAT, "version": version, **header.model_dump(mode="json")}


def as_header(header: RecordingHeader | Mapping[str, Any]) -> RecordingHeader:
    """The header a writer was given, as a `RecordingHeader`; a mapping that is not one is refused as misuse."""
    if isinstance(header, RecordingHeader):
        return header
    try:
        return RecordingHeader.model_validate(dict(header))
    except ValidationError as e:
        raise UsageError(f"header= is not a recording header: {_problems(e)}") from None


def _problems(error: ValidationError) -> str:
    """What pydantic found wrong with a header's fields, each as `field.path: message` (a header is always a dict)."""
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in error.errors())


def read_header(text: str, *, where: str) -> RecordingHeader:
    """Read line 1, refusing a missing header, a foreign file, an unknown version or malformed fields."""
    with paused_collection():
        return _header_of(text, where=where)


@contextmanager
def paused_collection() -> Generator[None]:
    """The cyclic garbage collector paused while a large header is read.

    A million-line recording's header parses into millions of objects, none of them cyclic; collections passing
    over them as they are made would cost more than the parse.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _header_of(text: str, *, where: str) -> RecordingHeader:
    fields = parse_object(text, where=where, line=1)
    marker = fields.pop("format", None)
    if marker is None:
        if fields.keys() >= EVENT_FIELDS:
            raise RecordingError("missing header: line 1 is an event, not a recording header", path=where, line=1)
        raise RecordingError("missing header: line 1 has no format marker", path=where, line=1)
    if marker != RECORDING_FORMAT:
        raise RecordingError(f"foreign file: format is {marker!r}, not {RECORDING_FORMAT!r}", path=where, line=1)
    version = fields.pop("version", None)
    if not is_int(version) or version not in _READABLE_VERSIONS:
        raise RecordingError(
            f"unknown recording format version {version!r}; this anagrapheus reads versions"
            f" {', '.join(map(str, _READABLE_VERSIONS))}",
            path=where,
            line=1,
        )
    # The seal (a digest per line: a large recording's header is mostly seal) is parsed JSON already, and read by
    # `read_seal`; validating each of its values as JSON again would cost a large recording's opening a second.
    details: object = fields.get("details")
    held = isinstance(details, dict) and "seal" in details
    seal: object = cast(dict[str, Any], details).pop("seal") if held else None
    try:
        header = RecordingHeader.model_validate(fields)
    except ValidationError as e:
        raise RecordingError(f"malformed header: {_problems(e)}", path=where, line=1) from None
    if not held:
        return header
    return header.model_copy(update={"details": {**header.details, "seal": seal}})
