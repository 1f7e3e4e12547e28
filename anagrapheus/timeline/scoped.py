"""A context value set for the length of a block."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["scoped"]

T = TypeVar("T")


@contextmanager
def scoped(var: ContextVar[T], value: T) -> Generator[None]:
    """Within: `var` holds `value`; after, whatever it held before, however the block ends."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)
