"""Writing a recording: the header stamped with provenance, each event as canonical JSON, no secret let through."""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from anagrapheus.errors import RecordingError, SecretInRecording, UsageError
from anagrapheus.timeline.canonical import JSONValue, canonical_json, canonical_value, encode_normalised, stored_value
from anagrapheus.timeline.durable_file import replace_durably
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PinPromoted, RunInputs, StoredEvent, events_of
from anagrapheus.timeline.provenance import ProvenanceStamp, Stamping, stamp_provenance, stamping_or_default
from anagrapheus.timeline.recording.compact import compact_line
from anagrapheus.timeline.recording.deltas import FingerprintDeltas
from anagrapheus.timeline.recording.header import (
    FINGERPRINT_DELTAS_VERSION,
    RECORDING_VERSION,
    WHOLE_FINGERPRINTS_VERSION,
    RecordingHeader,
    as_header,
    header_line,
)
from anagrapheus.timeline.recording.index import INDEX_MIN_EVENTS, index_path, keep_index, write_index
from anagrapheus.timeline.recording.responses import ResponseReferences
from anagrapheus.timeline.recording.seal import SEAL_DETAIL, Sealer, read_seal
from anagrapheus.timeline.secrets import Redactor, SecretScanner, split_private_keys

__all__ = ["pin_events", "write_recording"]


def pin_events(events: Iterable[StoredEvent], *, with_inputs: bool = False) -> Iterator[StoredEvent]:
    """Filter a stream down to its pins, the `PinPromoted` events (and each run's `RunInputs` with `with_inputs=True`).

    The reference page's way, kept and never warning (issue #40). Over a store, the same read is done in SQL by
    `store.read(namespace="anagrapheus", type="pin_promoted")`.
    """
    return events_of(events, PinPromoted, RunInputs) if with_inputs else events_of(events, PinPromoted)


class _LineWriter:
    """Writes one recording's lines: canonical text, redacted where asked, refused where a secret remains."""

    def __init__(self, target: Path, *, redact: SecretScanner | None, refuse: SecretScanner | None) -> None:
        self._target = target
        self._redact = redact
        self._redactor: Redactor | None = None if redact is None else redact.redactor()
        self._refuse = refuse
        # Redacting under the very rules the refusal uses (`redact=SecretScanner()`): a line the redaction's search
        # passes over holds nothing to refuse either, so it is searched once, not twice.
        self._refusal_repeats_redaction = refuse is not None and redact is not None and redact.same_search(refuse)

    def text(self, line: dict[str, JSONValue], *, seq: int | None) -> str:
        line = cast(dict[str, JSONValue], stored_value(line))
        text = encode_normalised(line)
        as_stored = text
        if not text.isascii() and not unicodedata.is_normalized("NFC", text):
            # Searched as NFC, which turns a look-alike (U+212A KELVIN SIGN) into the very letter a rule looks for.
            # The line is written as stored (its strings as drawn) unless a rule may find something there: then its
            # NFC form is what is redacted or refused, so no look-alike slips through.
            searched = cast(dict[str, JSONValue], canonical_value(line))
            searched_text = encode_normalised(searched)
            scanners = (self._redact, self._refuse)
            if not any(scanner is not None and scanner.may_hold(searched_text) for scanner in scanners):
                return text
            line, text = searched, searched_text
        written = self._scanned(line, text, seq)
        # A line searched as NFC that no redaction changed is written as stored: NFC is for searching, never for
        # what a recording keeps (#45). Only a redacted line is written in the form it was redacted in.
        return as_stored if written == text else written

    def _scanned(self, line: dict[str, JSONValue], text: str, seq: int | None) -> str:
        """`text`, or the line redacted, once the refusal scanner finds nothing in what is written."""
        # Each scanner first searches the whole line once; only a line that may hold a match is walked.
        if self._redact is not None and self._redactor is not None:
            if not self._redact.may_hold(text):
                return text if self._refusal_repeats_redaction else self._refused(line, text, seq)
            if self._refuse is not None and "-----BEGIN " in text:
                # A key whose END is in another string (`key.splitlines()`) or missing: its body has no shape,
                # so no redaction can find it all. Refused rather than half redacted.
                for finding in split_private_keys(line):
                    raise SecretInRecording(path=str(self._target), seq=seq, json_path=finding.path, rule=finding.rule)
            redacted = self._redactor.redact(line)
            if not isinstance(redacted, dict):  # pragma: no cover - redacting an object returns an object
                raise UsageError("a redacted line is not an object")
            line = redacted
            text = canonical_json(line)
        return self._refused(line, text, seq)

    def _refused(self, line: dict[str, JSONValue], text: str, seq: int | None) -> str:
        """Return `text`, the line as written, once the refusal scanner finds nothing in it."""
        if self._refuse is not None:
            for finding in self._refuse.scan(line, text=text):
                raise SecretInRecording(path=str(self._target), seq=seq, json_path=finding.path, rule=finding.rule)
        return text


# What a provenance says of the software that wrote a recording, not of what it holds.
_VERSIONS = ("anagrapheus", "pydantic_ai", "python")


def _same_but_versions(target: Path, lines: list[str]) -> bool:
    """Whether `target` already holds these lines, but for the versions its header's provenance names.

    A re-recording whose events come out byte for byte the same (a newer pydantic-ai that asks and answers the
    same) leaves the file as it is, with the provenance of the run that first wrote it.
    """
    try:
        if not target.is_file() or target.stat().st_size > 2 * sum(len(line) + 1 for line in lines) + 4096:
            return False
        held = target.read_bytes().decode()
    except (OSError, UnicodeDecodeError):
        return False
    old = held.split("\n")
    if old[-1:] != [""] or old[1:-1] != lines[1:]:
        return False
    try:
        was, now = json.loads(old[0]), json.loads(lines[0])
    except ValueError:
        return False
    if not (isinstance(was, dict) and isinstance(now, dict)):
        return False
    was_provenance, now_provenance = (
        cast(dict[str, Any], was).get("provenance"),
        cast(dict[str, Any], now).get("provenance"),
    )
    if not (isinstance(was_provenance, dict) and isinstance(now_provenance, dict)):
        return was == now
    for name in _VERSIONS:
        cast(dict[str, Any], now_provenance)[name] = cast(dict[str, Any], was_provenance).get(name)
    return was == now


def write_recording(
    path: str | os.PathLike[str],
    events: Iterable[StoredEvent],
    *,
    header: RecordingHeader | Mapping[str, Any],
    redact: SecretScanner | None = None,
    call_policy: object | None = None,
    mode: int = 0o600,
    dangerously_keep_secrets: bool = False,
    stamp: ProvenanceStamp | Stamping | None = None,
    index: bool | None = None,
    fingerprint_deltas: bool = True,
    compact_lines: bool | None = None,
) -> Path:
    """Write `header` and `events` as a recording, replacing `path` atomically; return the path.

    Each event is written as the canonical JSON of `StoredEvent.to_json()`, seq and ids as the
    log holds them, so recording an unchanged run against the same ids and clock gives the
    same bytes. Events must come in strictly increasing seq order, as a log yields them.

    A header without provenance gets it stamped by `stamp`, a `Stamping` or its stamp alone (the provider
    layer's by default: versions, key scheme, `call_policy`'s name and version, the models seen in the pins).
    A credential-shaped string anywhere is refused with `SecretInRecording`, unless `redact=` replaces it with
    a placeholder first; only `dangerously_keep_secrets=True` writes it as it is. The file is created with `mode`
    (owner-only by default). A file that already holds the same lines, but for the software versions its
    provenance names, is left as it is: a newer pydantic-ai that records the same run changes nothing.

    A pin's fingerprint is written as a delta against the last one of its kind in its unit where that is shorter
    (a conversation's model calls repeat every earlier message's digest), and the file is then version 3; every
    reader makes it whole again. The secret search sees each line with its fingerprint whole. With
    `fingerprint_deltas=False` every fingerprint is written whole, in a version 2 file an older reader reads.

    A run's recorded history (`RunInputs`) refers to each model response a `model_call` pin of its unit holds
    earlier in the file, rather than copy it, and each pin's and run's inputs' line leaves out the fields every such
    line holds alike (`compact`); the file is then version 4, and every reader makes each event whole again,
    exactly. `compact_lines=False` writes neither (version 3 or 2, as above); by default they go with
    `fingerprint_deltas`.

    Each unit's lines are sealed: a sha256 chain over them, kept in the header's `details["seal"]` (any seal
    the header holds is replaced), so a reader names a line edited or deleted by hand (`SealBroken`).

    With `index=True` an index is written beside the file (`run.jsonl.index`), so a replay or `view --unit` opens a
    large recording without reading it whole; by default one is for `INDEX_MIN_EVENTS` events or more, or when an
    index is there already. With `index=False` none is, and one left from an earlier write is removed.
    """
    target = Path(path)
    chosen = as_header(header)
    if SEAL_DETAIL in chosen.details:
        try:
            read_seal(chosen.details, where=str(target))
        except RecordingError:
            raise UsageError(
                f"header= details[{SEAL_DETAIL!r}] is not a seal: that entry is the recording's seal, which"
                " write_recording writes; name the detail otherwise"
            ) from None
    sealer = Sealer()
    writer = _LineWriter(target, redact=redact, refuse=None if dangerously_keep_secrets else SecretScanner())
    deltas = FingerprintDeltas()
    compact = fingerprint_deltas if compact_lines is None else compact_lines
    stamping = stamping_or_default(stamp if isinstance(stamp, Stamping) else None)
    references = ResponseReferences(stamping.stamped_fields) if compact else None
    compacted = False
    lines: list[str] = []
    # What the pins hold, for the stamp to read the models from; kept only when there is a header to stamp.
    results: list[JSONValue] | None = [] if chosen.provenance is None else None
    last_seq = 0
    event_ids: set[str] = set()
    # Refuse to write what `read_recording` would refuse to read.
    for event in events:
        if event.seq <= last_seq:
            raise UsageError(f"events must come in increasing seq order: seq {event.seq} follows seq {last_seq}")
        if event.event_id in event_ids:
            raise UsageError(f"event id {event.event_id} appears twice")
        last_seq = event.seq
        event_ids.add(event.event_id)
        line = event.to_json()
        if results is not None and event.namespace == BUILTIN_NAMESPACE and event.type == PinPromoted.event_type:
            results.append(PinPromoted.result_in(line["payload"]))
        # The whole line is searched for secrets (and redacted); only then is its fingerprint written as a delta.
        text = writer.text(line, seq=event.seq)
        if fingerprint_deltas:
            text = deltas.line(text)
        if references is not None:
            text = references.line(text)
            written = compact_line(text)
            compacted = compacted or written is not text
            text = written
        # The reader checks a line under the unit it reads there: an id the line holds otherwise (redacted, or
        # NFC-normalised as canonical text is) is read back from it.
        unit = event.correlation_id
        if unit is not None and (redact is not None or not unicodedata.is_normalized("NFC", unit)):
            unit = json.loads(text)["correlation_id"]
        sealer.add(unit, text)
        lines.append(text)
    if results is not None:
        if stamp is None or isinstance(stamp, Stamping):
            stamped = stamp_provenance(results, call_policy=call_policy, stamping=stamp)
        else:
            stamped = stamp(results, call_policy=call_policy)
        chosen = chosen.model_copy(update={"provenance": stamped})
    chosen = chosen.model_copy(update={"details": {**chosen.details, SEAL_DETAIL: sealer.seal.detail()}})
    if compacted or (references is not None and references.written):
        version = RECORDING_VERSION
    else:
        version = FINGERPRINT_DELTAS_VERSION if deltas.written else WHOLE_FINGERPRINTS_VERSION
    lines.insert(0, writer.text(header_line(chosen, version=version), seq=None))
    # By default: a large recording, or one indexed before (its index must not go stale: `reseal`, a re-recording).
    indexed = len(lines) - 1 >= INDEX_MIN_EVENTS or index_path(target).exists() if index is None else index
    if _same_but_versions(target, lines):
        if indexed:
            keep_index(target, mode=mode)
        else:
            write_index(target, None, mode=mode)
        return target
    data = "".join(line + "\n" for line in lines).encode()
    try:
        replace_durably(target, data, mode=mode)
    except OSError as e:
        # A directory in the way, a missing folder, a full disk: named, and typed like every other refusal.
        raise RecordingError(f"cannot write the recording ({e.strerror or e})", path=str(target)) from e
    write_index(target, lines if indexed else None, mode=mode)
    return target
