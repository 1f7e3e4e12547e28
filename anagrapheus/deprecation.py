"""Names kept for one release after they were replaced: each use warns with what to use instead."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping

__all__ = ["deprecated", "deprecated_option", "moved_names"]


def deprecated(old: str, instead: str, *, stacklevel: int = 3) -> None:
    """Warn (`DeprecationWarning`, at the caller's caller) that `old` goes in the next release, and what replaces it."""
    warnings.warn(f"{old} is deprecated and goes in the next release: {instead}", DeprecationWarning, stacklevel)


def deprecated_option(old: str, new: str) -> None:
    """Say that a command-line option was renamed: on stderr, which a command's user reads, and as a warning."""
    message = f"{old} is deprecated and goes in the next release: use {new}"
    # A DeprecationWarning raised outside __main__ is not shown by default: the user of a command would never see it.
    print(f"anagrapheus: {message}", file=sys.stderr)
    warnings.warn(message, DeprecationWarning, stacklevel=3)


def moved_names(
    package: str, moved: Mapping[str, str], *, warned: Mapping[str, str] | None = None
) -> Callable[[str], object]:
    """A module `__getattr__` that still serves names dropped from `package`'s exports, each from its module.

    `moved` maps a name to the module that keeps it (`module:new_name` for one renamed); reading it
    warns. `warned` maps names that warn themselves when used (deprecated functions) to their module;
    reading those does not warn twice.
    """
    quiet = dict(warned or {})

    def __getattr__(name: str) -> object:
        target = moved.get(name)
        if target is not None:
            module, _, renamed = target.partition(":")
            instead = f"use {module}.{renamed}" if renamed else f"import it from {module}"
            deprecated(f"{package}.{name}", instead)
        else:
            module, renamed = quiet.get(name), ""
            if module is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), renamed or name)

    return __getattr__
