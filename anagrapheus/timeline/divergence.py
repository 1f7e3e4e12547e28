"""Divergence: where a run left its recording, and the comparison that says what moved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Divergence", "diverged_at", "moved_fields"]


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a run left its recording: the first key it asked for that no pin answers."""

    key: str
    """The key no pin answered."""
    kind: str
    """What kind of call missed (`model_call`, `tool_call`, ...)."""
    after_hits: int
    """How many pins the replay answered before the miss."""
    moved: tuple[str, ...] = ()
    """Fields that differ from the nearest recorded call of the same kind (`+f` added, `-f` removed)."""
    nearest_key: str | None = None
    """The recorded key compared against, when fingerprints allowed a comparison."""

    def describe(self) -> str:
        """Say in one sentence where the run diverged and what moved."""
        text = f"no pin for {self.kind} {self.key} (after {self.after_hits} hit(s))"
        if self.nearest_key is None:
            return text + "; the recording has no comparable call of this kind"
        if not self.moved:
            return text + f"; the nearest recorded call {self.nearest_key} has the same fingerprint"
        return text + f"; against the nearest recorded call, what moved: {', '.join(self.moved)}"


def moved_fields(asked: Mapping[str, str], recorded: Mapping[str, str]) -> list[str]:
    """Name the fields in which `asked` differs from `recorded`: changed, added (`+`) or removed (`-`)."""
    moved: list[str] = []
    for name, digest in asked.items():
        if name not in recorded:
            moved.append(f"+{name}")
        elif recorded[name] != digest:
            moved.append(name)
    moved.extend(f"-{name}" for name in recorded if name not in asked)
    return moved


def diverged_at(
    key: str,
    kind: str,
    fingerprint: Mapping[str, str] | None,
    *,
    after_hits: int,
    recorded: Iterable[tuple[str, str, Mapping[str, str] | None]],
) -> Divergence:
    """Describe a miss against the `(key, kind, fingerprint)` recorded call of its kind sharing the most fields."""
    nearest: tuple[int, str, Mapping[str, str]] | None = None
    if fingerprint:
        for recorded_key, recorded_kind, recorded_fingerprint in recorded:
            if recorded_kind != kind or not recorded_fingerprint:
                continue
            shared = sum(1 for name, digest in fingerprint.items() if recorded_fingerprint.get(name) == digest)
            if nearest is None or shared > nearest[0]:
                nearest = (shared, recorded_key, recorded_fingerprint)
    if nearest is None or fingerprint is None:
        return Divergence(key=key, kind=kind, after_hits=after_hits)
    return Divergence(
        key=key,
        kind=kind,
        after_hits=after_hits,
        moved=tuple(moved_fields(fingerprint, nearest[2])),
        nearest_key=nearest[1],
    )
