"""A strict replay's miss kept as a small JSON file, so it can be looked at after the run that met it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from anagrapheus.errors import PinMiss, RecordingError
from anagrapheus.timeline import Divergence
from anagrapheus.timeline.divergence import MovedValue

__all__ = ["MISS_FORMAT", "read_miss", "write_miss"]

MISS_FORMAT = "anagrapheus.miss"
"""The `format` of a miss file; its `version` is 1."""


def _json(divergence: Divergence, recording: str | None) -> dict[str, Any]:
    return {
        "format": MISS_FORMAT,
        "version": 1,
        "recording": recording,
        "key": divergence.key,
        "kind": divergence.kind,
        "after_hits": divergence.after_hits,
        "moved": list(divergence.moved),
        "nearest_key": divergence.nearest_key,
        "values": [{"field": v.field, "recorded": v.recorded, "current": v.current} for v in divergence.values],
        "describe": divergence.describe(),
    }


def write_miss(miss: PinMiss | Divergence, path: str | Path, *, recording: str | Path | None = None) -> Path:
    """Write `miss` (and the recording it left, when known) to `path` as JSON; return the path."""
    divergence = miss.divergence if isinstance(miss, PinMiss) else miss
    target = Path(path)
    text = json.dumps(_json(divergence, None if recording is None else str(recording)), indent=2, ensure_ascii=False)
    target.write_text(text + "\n", encoding="utf-8")
    return target


def _text(data: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"`{name}` must be a string")
    return value


def read_miss(path: str | Path) -> tuple[Divergence, str | None]:
    """Read a miss file: the divergence it holds and the recording it names (None when it names none)."""
    name = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordingError(f"cannot read this miss file ({e})", path=name) from e
    if not isinstance(data, dict) or data.get("format") != MISS_FORMAT:  # pyright: ignore[reportUnknownMemberType]
        raise RecordingError(f"not an {MISS_FORMAT} file (written by write_miss or the pytest plugin)", path=name)
    fields: dict[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
    if fields.get("version") != 1:
        raise RecordingError(f"miss file version {fields.get('version')!r} is not known (this reads 1)", path=name)
    try:
        values: list[MovedValue] = []
        entries: list[Any] = fields.get("values") or []
        for entry in entries:
            if not isinstance(entry, dict):
                raise ValueError("`values` must hold objects")
            item: dict[str, Any] = entry  # pyright: ignore[reportUnknownVariableType]
            values.append(
                MovedValue(
                    field=_text(item, "field") or "",
                    recorded=_text(item, "recorded", optional=True),
                    current=_text(item, "current", optional=True),
                )
            )
        moved: Any = fields.get("moved") or []
        hits = fields.get("after_hits")
        if not isinstance(moved, list) or not all(isinstance(m, str) for m in cast("list[Any]", moved)):
            raise ValueError("`moved` must be a list of strings")
        if not isinstance(hits, int):
            raise ValueError("`after_hits` must be an integer")
        divergence = Divergence(
            key=_text(fields, "key") or "",
            kind=_text(fields, "kind") or "",
            after_hits=hits,
            moved=tuple(cast("list[str]", moved)),
            nearest_key=_text(fields, "nearest_key", optional=True),
            values=tuple(values),
        )
        return divergence, _text(fields, "recording", optional=True)
    except ValueError as e:
        raise RecordingError(str(e), path=name) from e
