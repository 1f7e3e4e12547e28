"""Divergence: where a run left its recording, and the comparison that says what moved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

__all__ = ["ELLIPSIS", "VALUE_PREFIX", "Divergence", "MovedValue", "diverged_at", "moved_fields"]

VALUE_PREFIX = "="
"""A fingerprint entry named `=<field>` holds the start of that field's value (redacted), when values are kept."""

ELLIPSIS = "\u2026"
"""Marks where a kept value or a shown window was cut."""

_CONTEXT = 40
_SHOWN_CHARS = 120
_SHOWN_FIELDS = 8


@dataclass(frozen=True, slots=True)
class MovedValue:
    """What one moved field held in the recording and holds now, as far as each side kept its value."""

    field: str
    """The field's name in the fingerprint (`messages[0]`, `settings.temperature`, ...)."""
    recorded: str | None
    """The start of the recorded value's canonical JSON (redacted, bounded); None when the recording kept none."""
    current: str | None
    """The same for the value this run asked with; None when this run's policy keeps no values."""

    def describe(self) -> str:
        """Show the first difference: a short window of each side, the differing part in `[...]`."""
        if self.recorded is None or self.current is None:
            kept = "recorded" if self.current is None else "current"
            value = self.recorded if self.current is None else self.current
            return f"{self.field}: only the {kept} value was kept: {_clip(value or '', 0, _SHOWN_CHARS)}"
        recorded, current = self.recorded, self.current
        start = 0
        while start < min(len(recorded), len(current)) and recorded[start] == current[start]:
            start += 1
        if recorded == current:
            return f"{self.field}: the kept starts are the same; it differs further on"
        end = 0
        while (
            end < min(len(recorded), len(current)) - start
            and recorded[len(recorded) - 1 - end] == current[len(current) - 1 - end]
        ):
            end += 1
        return (
            f"{self.field}:\n    recorded {_window(recorded, start, end)}\n    current  {_window(current, start, end)}"
        )


def _clip(text: str, start: int, width: int) -> str:
    return text[start : start + width] + (ELLIPSIS if len(text) > start + width else "")


def _window(text: str, start: int, end: int) -> str:
    before = max(0, start - _CONTEXT)
    middle = text[start : len(text) - end]
    shown = middle if len(middle) <= _SHOWN_CHARS else middle[:_SHOWN_CHARS] + ELLIPSIS
    after = text[len(text) - end :][:_CONTEXT]
    tail = ELLIPSIS if end > _CONTEXT else ""
    return f"{ELLIPSIS if before else ''}{text[before:start]}[{shown}]{after}{tail}"


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
    values: tuple[MovedValue, ...] = ()
    """The recorded and current value of each moved field, where the call policy keeps values (opt-in)."""
    notes: tuple[str, ...] = ()
    """What else explains the miss: the versions that recorded and replay it, fields a newer release set."""

    def describe(self) -> str:
        """Say in one sentence where the run diverged and what moved, then any note that explains it."""
        text = f"no pin for {self.kind} {self.key} (after {self.after_hits} hit(s))"
        if self.nearest_key is None:
            return "\n  ".join([text + "; the recording has no comparable call of this kind", *self.notes])
        if not self.moved:
            text += f"; the nearest recorded call {self.nearest_key} has the same fingerprint"
            return "\n  ".join([text, *self.notes])
        text += f"; against the nearest recorded call, what moved: {', '.join(self.moved)}"
        shown = [value.describe() for value in self.values[:_SHOWN_FIELDS]]
        if len(self.values) > _SHOWN_FIELDS:
            shown.append(f"and {len(self.values) - _SHOWN_FIELDS} more moved field(s) with values")
        return "\n  ".join([text, *shown, *self.notes])

    def noted(self, *notes: str) -> Divergence:
        """This divergence with `notes` added (each said once)."""
        added = tuple(note for note in notes if note not in self.notes)
        return self if not added else replace(self, notes=self.notes + added)


def moved_fields(asked: Mapping[str, str], recorded: Mapping[str, str]) -> list[str]:
    """Name the fields in which `asked` differs from `recorded`: changed, added (`+`) or removed (`-`)."""
    moved: list[str] = []
    for name, digest in asked.items():
        if name.startswith(VALUE_PREFIX):
            continue
        if name not in recorded:
            moved.append(f"+{name}")
        elif recorded[name] != digest:
            moved.append(name)
    moved.extend(f"-{name}" for name in recorded if name not in asked and not name.startswith(VALUE_PREFIX))
    return moved


def _moved_values(
    moved: Iterable[str], asked: Mapping[str, str], recorded: Mapping[str, str]
) -> tuple[MovedValue, ...]:
    values: list[MovedValue] = []
    for name in moved:
        field = name[1:] if name[:1] in "+-" else name
        was, now = recorded.get(VALUE_PREFIX + field), asked.get(VALUE_PREFIX + field)
        if was is not None or now is not None:
            values.append(MovedValue(field=field, recorded=was, current=now))
    return tuple(values)


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
            shared = sum(
                1
                for name, digest in fingerprint.items()
                if recorded_fingerprint.get(name) == digest and not name.startswith(VALUE_PREFIX)
            )
            if nearest is None or shared > nearest[0]:
                nearest = (shared, recorded_key, recorded_fingerprint)
    if nearest is None or fingerprint is None:
        return Divergence(key=key, kind=kind, after_hits=after_hits)
    moved = tuple(moved_fields(fingerprint, nearest[2]))
    return Divergence(
        key=key,
        kind=kind,
        after_hits=after_hits,
        moved=moved,
        nearest_key=nearest[1],
        values=_moved_values(moved, fingerprint, nearest[2]),
    )
