"""The timeline's modules moved into its rooms (resolving/, recording/, stores/): old dotted path to new.

Each old path stays importable for one release, as the very module at its new path, with one
`DeprecationWarning` (`anagrapheus.deprecation.MovedModules`). No file is left at an old path, so git
follows each move as a rename.

Written by the relayout script (kept outside the repository), which adds to this table on each run.
"""

from __future__ import annotations

__all__ = ["MOVED"]

MOVED: dict[str, str] = {
    "anagrapheus.timeline.copying": "anagrapheus.timeline.stores.copying",
    "anagrapheus.timeline.failures": "anagrapheus.timeline.resolving.failures",
    "anagrapheus.timeline.opening": "anagrapheus.timeline.stores.opening",
    "anagrapheus.timeline.ownership": "anagrapheus.timeline.stores.ownership",
    "anagrapheus.timeline.pins": "anagrapheus.timeline.resolving.ledger",
    "anagrapheus.timeline.postgres": "anagrapheus.timeline.stores.postgres",
    "anagrapheus.timeline.postgres_schema": "anagrapheus.timeline.stores.postgres_schema",
    "anagrapheus.timeline.postgres_statements": "anagrapheus.timeline.stores.postgres_statements",
    "anagrapheus.timeline.recording_header": "anagrapheus.timeline.recording.header",
    "anagrapheus.timeline.recording_json": "anagrapheus.timeline.recording.strict_json",
    "anagrapheus.timeline.recording_lines": "anagrapheus.timeline.recording.lines",
    "anagrapheus.timeline.recording_pins": "anagrapheus.timeline.recording.pins",
    "anagrapheus.timeline.recording_reader": "anagrapheus.timeline.recording.reader",
    "anagrapheus.timeline.recording_seal": "anagrapheus.timeline.recording.seal",
    "anagrapheus.timeline.recording_writer": "anagrapheus.timeline.recording.writer",
    "anagrapheus.timeline.replay": "anagrapheus.timeline.resolving.replay",
    "anagrapheus.timeline.resolver": "anagrapheus.timeline.resolving.resolver",
    "anagrapheus.timeline.sqlite": "anagrapheus.timeline.stores.sqlite",
    "anagrapheus.timeline.stamps": "anagrapheus.timeline.stores.stamps",
    "anagrapheus.timeline.store": "anagrapheus.timeline.stores.ports",
}
"""Old module path to new, for the modules moved into sub-packages."""
