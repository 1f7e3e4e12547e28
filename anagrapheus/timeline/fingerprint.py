"""Per-field fingerprints of key material, and what moved between two of them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping

from typing_extensions import override

from anagrapheus.timeline.canonical import JSONValue, canonical_json, encode_normalised
from anagrapheus.timeline.divergence import ELLIPSIS, VALUE_PREFIX, moved_fields
from anagrapheus.timeline.secrets import SecretScanner

__all__ = [
    "DIGEST_CHARS",
    "FINGERPRINT_LIMIT",
    "VALUE_CHARS",
    "DeferredFingerprint",
    "bounded_fingerprint",
    "digest_text",
    "fingerprint_of",
    "moved_fields",
    "value_entries",
]

FINGERPRINT_LIMIT = 256
"""The most fields a fingerprint keeps; the rest are folded into one `...` entry so its size is bounded."""

DIGEST_CHARS = 16
"""Hex characters kept of each field's sha256: enough to tell fields apart, too few to be content."""


def digest_text(text: str) -> str:
    """Return the short digest of a field whose canonical JSON text is `text`."""
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _digest(value: JSONValue) -> str:
    return digest_text(canonical_json(value))


VALUE_CHARS = 240
"""The most characters of a field's value kept (opt-in) for divergence reports; longer values are cut with `…`."""

# Room past the cut for a credential that starts just before it, so it is redacted whole before the cut.
_REDACTION_MARGIN = 512


def _texts(prefix: str, value: JSONValue, depth: int, out: dict[str, str], encode: Callable[[JSONValue], str]) -> None:
    if depth > 0 and isinstance(value, dict) and value:
        for name in sorted(value):
            _texts(f"{prefix}.{name}" if prefix else name, value[name], depth - 1, out, encode)
    elif depth > 0 and isinstance(value, list) and value:
        for index, item in enumerate(value):
            _texts(f"{prefix}[{index}]", item, depth - 1, out, encode)
    else:
        out[prefix or "$"] = encode(value)


def _fingerprint(material: JSONValue, depth: int, values: bool, encode: Callable[[JSONValue], str]) -> dict[str, str]:
    texts: dict[str, str] = {}
    _texts("", material, depth, texts, encode)
    fingerprint = bounded_fingerprint({name: digest_text(text) for name, text in texts.items()})
    if values:
        fingerprint.update(value_entries((name, texts[name]) for name in list(fingerprint) if name in texts))
    return fingerprint


def fingerprint_of(material: JSONValue, *, depth: int = 2, values: bool = False) -> dict[str, str]:
    """Digest each field of `material` down to `depth` levels, bounded in size; never content unless `values`.

    With `values`, each kept field also gets a `=<field>` entry holding the start of its value,
    redacted (`value_entries`), so a miss can show what moved and not only where.
    """
    return _fingerprint(material, depth, values, canonical_json)


class DeferredFingerprint(Mapping[str, str]):
    """`fingerprint_of(material, values=values)` of material already canonical, digested when first read.

    A replay that hits never reads the fingerprint of the request it answers, so it never pays for one digest
    a field. `material` must be canonical JSON values that nothing else holds (no caller can change them).
    """

    __slots__ = ("_fields", "_material", "_values")

    def __init__(self, material: JSONValue, *, values: bool = False) -> None:
        self._material: JSONValue = material
        self._values = values
        self._fields: dict[str, str] | None = None

    def _digested(self) -> dict[str, str]:
        if self._fields is None:
            # Two threads may both digest; they compute the same dict and either may be kept.
            self._fields = _fingerprint(self._material, 2, self._values, encode_normalised)
        return self._fields

    @override
    def __getitem__(self, name: str) -> str:
        return self._digested()[name]

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(self._digested())

    @override
    def __len__(self) -> int:
        return len(self._digested())

    @override
    def __repr__(self) -> str:
        return repr(self._digested())


def value_entries(fields: Iterable[tuple[str, str]], *, scanner: SecretScanner | None = None) -> dict[str, str]:
    """`=<field>` entries: the first `VALUE_CHARS` characters of each field's text, after redaction by `scanner`.

    Redacted with the default secret rules (when `scanner` is None) before it is cut, so a
    credential in a prompt never reaches a pin, and the placeholder stands where it was.
    """
    redactor = (SecretScanner() if scanner is None else scanner).redactor()
    entries: dict[str, str] = {}
    for name, text in fields:
        head = redactor.redact_text(text[: VALUE_CHARS + _REDACTION_MARGIN])
        entries[VALUE_PREFIX + name] = head if len(head) <= VALUE_CHARS else head[:VALUE_CHARS] + ELLIPSIS
    return entries


def bounded_fingerprint(fields: Mapping[str, str]) -> dict[str, str]:
    """Keep at most `FINGERPRINT_LIMIT` fields, folding the rest (in order) into one `...` entry."""
    if len(fields) <= FINGERPRINT_LIMIT:
        return dict(fields)
    names = list(fields)
    kept = {name: fields[name] for name in names[: FINGERPRINT_LIMIT - 1]}
    kept["..."] = _digest([fields[name] for name in names[FINGERPRINT_LIMIT - 1 :]])
    return kept
