"""Per-field fingerprints of key material, and what moved between two of them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from anagrapheus.timeline.canonical import JSONValue, canonical_json
from anagrapheus.timeline.divergence import moved_fields

__all__ = ["DIGEST_CHARS", "FINGERPRINT_LIMIT", "bounded_fingerprint", "digest_text", "fingerprint_of", "moved_fields"]

FINGERPRINT_LIMIT = 256
"""The most fields a fingerprint keeps; the rest are folded into one `...` entry so its size is bounded."""

DIGEST_CHARS = 16
"""Hex characters kept of each field's sha256: enough to tell fields apart, too few to be content."""


def digest_text(text: str) -> str:
    """Return the short digest of a field whose canonical JSON text is `text`."""
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _digest(value: JSONValue) -> str:
    return digest_text(canonical_json(value))


def _fields(prefix: str, value: JSONValue, depth: int, out: dict[str, str]) -> None:
    if depth > 0 and isinstance(value, dict) and value:
        for name in sorted(value):
            _fields(f"{prefix}.{name}" if prefix else name, value[name], depth - 1, out)
    elif depth > 0 and isinstance(value, list) and value:
        for index, item in enumerate(value):
            _fields(f"{prefix}[{index}]", item, depth - 1, out)
    else:
        out[prefix or "$"] = _digest(value)


def fingerprint_of(material: JSONValue, *, depth: int = 2) -> dict[str, str]:
    """Digest each field of `material` down to `depth` levels: digests only, never content, bounded in size."""
    fields: dict[str, str] = {}
    _fields("", material, depth, fields)
    return bounded_fingerprint(fields)


def bounded_fingerprint(fields: Mapping[str, str]) -> dict[str, str]:
    """Keep at most `FINGERPRINT_LIMIT` fields, folding the rest (in order) into one `...` entry."""
    if len(fields) <= FINGERPRINT_LIMIT:
        return dict(fields)
    names = list(fields)
    kept = {name: fields[name] for name in names[: FINGERPRINT_LIMIT - 1]}
    kept["..."] = _digest([fields[name] for name in names[FINGERPRINT_LIMIT - 1 :]])
    return kept
