"""Names kept for one release after they were replaced: each use warns with what to use instead."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

from typing_extensions import override

__all__ = ["MovedModules", "deprecated", "deprecated_option", "moved_modules", "moved_names"]


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


class MovedModules(importlib.abc.MetaPathFinder):
    """Serves modules moved to another path under their old path, as the very module at the new one, warning once.

    Placed last on `sys.meta_path`, it is asked only for a name no file answers: a module still at its old
    path (a tree not moved yet) is imported as it is, without a warning. Importing an old path gives the
    module object of the new path itself (`old is new`), so its classes, and what pickles them, keep one name.
    """

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    @override
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec importing `fullname`'s new module, if `fullname` is an old path of this table."""
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedLoader(fullname, new))


class _MovedLoader(importlib.abc.Loader):
    """Loads an old module path as the module now at `new`."""

    def __init__(self, old: str, new: str) -> None:
        self._old = old
        self._new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    @override
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    @override
    def exec_module(self, module: ModuleType) -> None:
        # The import system has just stamped the old name's spec on the module: give it its own back.
        module.__spec__ = self._spec
        # The stack counts frames outside the import system's own: the warning points at the importing line.
        deprecated(f"the module {self._old}", f"import {self._new}", stacklevel=3)


def moved_modules(moved: Mapping[str, str]) -> MovedModules | None:
    """Keep each old module path of `moved` (old dotted path to new) importable for one release; None if empty.

    Installed once per process for a table: a second call with the same table finds the first finder.
    """
    if not moved:
        return None
    for finder in sys.meta_path:
        if isinstance(finder, MovedModules) and finder.moved == dict(moved):
            return finder
    finder = MovedModules(moved)
    sys.meta_path.append(finder)
    return finder
