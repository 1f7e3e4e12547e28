"""The type of a value made only of JSON's own types, in a module that imports nothing of the package.

`anagrapheus.errors` types a pinned failure's record with it; defined here rather than in `canonical`, which
imports the errors, so the error root sits below every other module without a cycle, even for the checker.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONValue"]

JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
"""A value made only of JSON's own types."""
