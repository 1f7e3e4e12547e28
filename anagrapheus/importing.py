"""What a user names as `MODULE:ATTR` (on the command line, in a marker or in pyproject.toml), imported one way."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from anagrapheus.errors import UnresolvedName

__all__ = ["lazy_names", "load_function", "load_object", "load_typed"]

T = TypeVar("T")


def load_object(spec: str) -> object:
    """Import `MODULE:ATTR` (dotted names allowed after the colon); `UnresolvedName` says which part is missing.

    An error raised by the module's own code while it is imported is not caught: its traceback is the
    user's to read.
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute or ":" in attribute:
        raise UnresolvedName(spec, "expected MODULE:ATTR, such as myproject.agents:support_agent")
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as e:
        raise UnresolvedName(spec, f"cannot import {module_name} ({e}); is it on the path?") from e
    names = attribute.split(".")
    for depth, name in enumerate(names, start=1):
        try:
            found = getattr(found, name)
        except AttributeError:
            raise UnresolvedName(spec, f"{module_name} has no {'.'.join(names[:depth])}") from None
    return found


def load_typed(spec: str, kind: type[T], *, what: str, make: bool = True) -> T:
    """Import `MODULE:ATTR` naming a `kind`, or (with `make`) a class or function making one when called bare.

    `what` names the kind for the error (`an EventTypeRegistry`), which also says what was found instead.
    """
    found = load_object(spec)
    # A class passes a runtime protocol's check on its methods alone: it is called, as a factory is.
    makes = make and (isinstance(found, type) or not isinstance(found, kind)) and callable(found)
    made = _called(found, spec, what) if makes else found
    if isinstance(made, kind):
        return cast("T", made)  # narrowed, but pyright keeps `object*` beside T for a TypeVar kind
    shown = f"{type(made).__qualname__}, once called" if makes else type(made).__qualname__
    nor = " (nor a class or function making one)" if make else ""
    raise UnresolvedName(spec, f"is not {what}{nor}: it is {shown}")


def _called(factory: object, spec: str, what: str) -> object:
    """Call a factory bare; one that needs arguments is refused by name rather than failing inside the call."""
    try:
        inspect.signature(cast("Callable[..., object]", factory)).bind()
    except TypeError:
        raise UnresolvedName(spec, f"is not {what}, and cannot be called without arguments to make one") from None
    except ValueError:
        pass  # a builtin with no signature to read: the call itself says what is wrong
    return cast("Callable[[], object]", factory)()


def load_function(spec: str, *, what: str) -> Callable[..., object]:
    """Import `MODULE:ATTR` naming a function (anything callable); `what` says what it is for, in the error."""
    found = load_object(spec)
    if not callable(found):
        raise UnresolvedName(spec, f"is not {what}: it is {type(found).__qualname__}")
    return found


def lazy_names(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` (PEP 562): each name of `homes` imported from its module when first read.

    So importing the package (or a subpackage of it) imports none of those modules; a name read once is kept
    in the package, and `dir()` lists every name whether read yet or not.
    """
    held = dict(homes)

    def __getattr__(name: str) -> object:
        home = held.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *held})

    return __getattr__, __dir__
