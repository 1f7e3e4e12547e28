"""A key and its fingerprint from material the walk wrote: both from the one walk, written once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anagrapheus.provider.keying.material import MaterialWalk
from anagrapheus.timeline.canonical import pin_key
from anagrapheus.timeline.fingerprint import DeferredFingerprint

__all__ = ["key_of", "walked"]


def walked(value: object, *, at: str = "$") -> Any:
    """`value` walked as key material (`MaterialWalk`), or `CanonicalError` naming where it cannot be."""
    return MaterialWalk().value(value, at=at)


def key_of(kind: str, material: Any, *, values: bool = False) -> tuple[str, Mapping[str, str]]:
    """The key of walked `material` (`pin_key`, not walked again) and its fingerprint, digested when first read.

    `material` is what the walk returned, which nothing else holds: the fingerprint reads it later.
    """
    return pin_key(kind, material, normalised=True), DeferredFingerprint(material, values=values)
