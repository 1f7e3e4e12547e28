"""The determinism manifest: what a guarded test may touch, from `[tool.anagrapheus.entropy]` or `nondeterminism.toml`.

```toml
[clock]
frozen_at = 2026-01-01T00:00:00Z   # the wall clock user code reads (required in [clock])
step = 0.0                         # seconds the wall clock advances after each read
monotonic_step = 0.001             # seconds monotonic advances after each read (never 0: deadline loops end)

[entropy]
seed = 20261016                    # random is seeded per test from this and the node id
hypothesis = false                 # true: hypothesis tests are seeded per test too

[io]
allow_network = false
allow_subprocess = false
declared_reads = ["tests/fixtures/orders.jsonl", "tests/data/*.json"]
```
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, cast

from anagrapheus.errors import ManifestError

__all__ = [
    "DEFAULT_MONOTONIC_STEP",
    "ClockDeclaration",
    "EntropyManifest",
    "load_manifest",
    "parse_manifest",
    "test_seed",
]

DEFAULT_MONOTONIC_STEP = 0.001
"""Seconds `time.monotonic` advances per read unless the manifest says otherwise: a deadline of 30 s ends."""

STANDALONE = "nondeterminism.toml"
_SECTIONS: dict[str, frozenset[str]] = {
    "clock": frozenset(("frozen_at", "step", "monotonic_step")),
    "entropy": frozenset(("seed", "hypothesis")),
    "io": frozenset(("allow_network", "allow_subprocess", "declared_reads")),
}


@dataclass(frozen=True, slots=True)
class ClockDeclaration:
    """The `[clock]` section: the instant user code sees, and how far each read moves it."""

    frozen_at: datetime
    """The first wall-clock instant user code reads (timezone-aware, UTC)."""
    step: float = 0.0
    """Seconds the wall clock advances after each read (0: frozen)."""
    monotonic_step: float = DEFAULT_MONOTONIC_STEP
    """Seconds `time.monotonic` and `time.perf_counter` advance after each read (never 0)."""


@dataclass(frozen=True, slots=True)
class EntropyManifest:
    """What a guarded test may touch; anything else it touches is a violation."""

    source: str | None = None
    """Where it was read (`pyproject.toml [tool.anagrapheus.entropy]`, `nondeterminism.toml`), None if nowhere."""
    root: Path = Path()
    """The directory `declared_reads` are relative to."""
    clock: ClockDeclaration | None = None
    """The declared clock; None: every clock read by user code is a violation."""
    seed: int | None = None
    """The declared seed; None: every draw from random, uuid4, os.urandom or secrets by user code is a violation."""
    hypothesis: bool = False
    """Whether hypothesis tests are seeded per test from `seed` (left alone otherwise)."""
    allow_network: bool = False
    """Whether a guarded test may connect a socket."""
    allow_subprocess: bool = False
    """Whether a guarded test may start a process."""
    declared_reads: tuple[str, ...] = ()
    """Files user code may read: paths or `fnmatch` globs relative to `root` (`*` also crosses directories)."""
    table: dict[str, Any] | None = None
    """The manifest as written, for the digest."""

    def declares_read(self, path: str) -> bool:
        """Whether `path` (absolute) is a declared read."""
        root = str(self.root.absolute())
        inside = path.startswith(root.rstrip(os.sep) + os.sep)
        relative = path[len(root.rstrip(os.sep)) + 1 :].replace(os.sep, "/") if inside else None
        for pattern in self.declared_reads:
            if os.path.isabs(pattern):
                if fnmatch.fnmatchcase(path, pattern):
                    return True
            elif relative is not None and fnmatch.fnmatchcase(relative, pattern):
                return True
        return False

    def digest_material(self) -> str:
        """The manifest as canonical JSON: what the digest hashes, whatever the file's layout."""
        return json.dumps(self.table or {}, sort_keys=True, default=str, separators=(",", ":"))


def test_seed(base: int, nodeid: str) -> int:
    """The seed of one test: the manifest's seed and the test's node id, so no two tests share a stream."""
    digest = hashlib.sha256(f"{base}:{nodeid}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# pytest would collect a module-level function named test_*.
test_seed.__test__ = False  # type: ignore[attr-defined]


MIN_MONOTONIC_STEP = 1e-6
"""The least `monotonic_step`: below it a guarded one-second deadline loop spins a million times (issue #35)."""
MAX_STEP = 86_400.0
"""The most seconds either clock advances per read: a day."""
MAX_SEED = 2**64 - 1
"""The largest `entropy.seed` (a seed is 0 to 2**64 - 1)."""
MAX_DECLARED_READS = 10_000
"""The most entries `io.declared_reads` may list."""


def _number(value: object, *, key: str, path: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ManifestError(f"must be a number of seconds, not {value!r}", path=path, key=key)
    if not low <= value <= high:
        raise ManifestError(f"must be from {low:g} to {high:g} seconds, not {value!r}", path=path, key=key)
    return float(value)


def _instant(value: object, *, path: str) -> datetime:
    key = "clock.frozen_at"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ManifestError(f"{value!r} is not an ISO 8601 instant", path=path, key=key) from None
    if not isinstance(value, datetime):
        what = "a date without a time" if isinstance(value, date) else repr(value)
        raise ManifestError(f"must be an instant such as 2026-01-01T00:00:00Z, not {what}", path=path, key=key)
    # A manifest names one instant for every machine: a time without an offset is read as UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _flag(value: object, *, key: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise ManifestError(f"must be true or false, not {value!r}", path=path, key=key)
    return value


def _section(table: dict[str, Any], name: str, *, path: str) -> dict[str, Any]:
    section: object = table.get(name, {})
    if not isinstance(section, dict):
        raise ManifestError("must be a table", path=path, key=name)
    section = cast("dict[str, Any]", section)
    for key in sorted(section):
        if key not in _SECTIONS[name]:
            raise ManifestError(
                f"unknown key; [{name}] takes {', '.join(sorted(_SECTIONS[name]))}", path=path, key=f"{name}.{key}"
            )
    return section


def parse_manifest(table: dict[str, Any], *, path: str, root: Path) -> EntropyManifest:
    """Read a manifest table, refusing an unknown key or a value of the wrong kind, naming the key."""
    for key in sorted(table):
        if key not in _SECTIONS:
            raise ManifestError(f"unknown key; a manifest has [{'], ['.join(_SECTIONS)}]", path=path, key=key)
    clock_table = _section(table, "clock", path=path)
    entropy = _section(table, "entropy", path=path)
    io = _section(table, "io", path=path)
    clock = None
    if "clock" in table:
        if "frozen_at" not in clock_table:
            raise ManifestError("is required in [clock]", path=path, key="clock.frozen_at")
        clock = ClockDeclaration(
            frozen_at=_instant(clock_table["frozen_at"], path=path),
            step=_number(clock_table.get("step", 0.0), key="clock.step", path=path, low=0.0, high=MAX_STEP),
            monotonic_step=_number(
                clock_table.get("monotonic_step", DEFAULT_MONOTONIC_STEP),
                key="clock.monotonic_step",
                path=path,
                low=MIN_MONOTONIC_STEP,
                high=MAX_STEP,
            ),
        )
    seed: object = entropy.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ManifestError(f"must be an integer, not {seed!r}", path=path, key="entropy.seed")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ManifestError(f"must be from 0 to 2**64 - 1, not {seed!r}", path=path, key="entropy.seed")
    reads: object = io.get("declared_reads", [])
    if not isinstance(reads, list) or not all(isinstance(item, str) for item in cast("list[object]", reads)):
        raise ManifestError("must be a list of paths or globs", path=path, key="io.declared_reads")
    if len(cast("list[str]", reads)) > MAX_DECLARED_READS:
        raise ManifestError(f"lists more than {MAX_DECLARED_READS} paths", path=path, key="io.declared_reads")
    return EntropyManifest(
        source=path,
        root=root,
        clock=clock,
        seed=seed,
        hypothesis=_flag(entropy.get("hypothesis", False), key="entropy.hypothesis", path=path),
        allow_network=_flag(io.get("allow_network", False), key="io.allow_network", path=path),
        allow_subprocess=_flag(io.get("allow_subprocess", False), key="io.allow_subprocess", path=path),
        declared_reads=tuple(cast("list[str]", reads)),
        table=table,
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(str(e), path=str(path)) from None
    except UnicodeDecodeError as e:
        # A manifest that is not UTF-8 is refused typed, as a malformed one is: never a traceback (issue #35).
        raise ManifestError(f"is not UTF-8 text (byte {e.start})", path=str(path)) from None


def load_manifest(root: Path) -> EntropyManifest:
    """The manifest of the project at `root`: its pyproject.toml's table or its nondeterminism.toml, never both.

    With neither, nothing is declared: every source a guarded test touches is a violation.
    """
    pyproject, standalone = root / "pyproject.toml", root / STANDALONE
    found: list[tuple[str, dict[str, Any]]] = []
    if pyproject.is_file():
        tool: object = _read(pyproject).get("tool", {})
        section: object = cast("dict[str, Any]", tool).get("anagrapheus", {}) if isinstance(tool, dict) else {}
        table: object = cast("dict[str, Any]", section).get("entropy") if isinstance(section, dict) else None
        if table is not None:
            if not isinstance(table, dict):
                raise ManifestError("must be a table", path="pyproject.toml", key="tool.anagrapheus.entropy")
            found.append(("pyproject.toml [tool.anagrapheus.entropy]", cast("dict[str, Any]", table)))
    if standalone.is_file():
        found.append((STANDALONE, _read(standalone)))
    if len(found) > 1:
        raise ManifestError(
            f"the project declares its entropy twice (also in {found[0][0]}): keep one of the two", path=STANDALONE
        )
    if not found:
        return EntropyManifest(root=root)
    return parse_manifest(found[0][1], path=found[0][0], root=root)
