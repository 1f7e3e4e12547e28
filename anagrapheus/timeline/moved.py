"""The timeline's modules moved into its rooms (resolving/, recording/, stores/): old dotted path to new.

Each old path stays importable for one release, as the very module at its new path, with one
`DeprecationWarning` (`anagrapheus.deprecation.MovedModules`). No file is left at an old path, so git
follows each move as a rename.

Written by the relayout script (kept outside the repository), which adds to this table on each run.
"""

from __future__ import annotations

__all__ = ["MOVED"]

MOVED: dict[str, str] = {}
"""Old module path to new, for the modules moved into sub-packages."""
