"""Upcasting: old payload versions brought to the current one on read, one step at a time."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final

from anagrapheus.errors import EventTypeError, UpcastGap

__all__ = ["Upcast", "UpcastRegistry"]

Upcast = Callable[[dict[str, Any]], dict[str, Any]]
"""A pure function taking a payload at version N and returning it at version N + 1."""


def _pin_promoted_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 pinned only draws that succeeded.
    return {**payload, "failed": False}


# The built-in events' steps ("anagrapheus" namespace), known to every registry, as their classes are.
_BUILTIN_STEPS: Final[Mapping[tuple[str, str, int], Upcast]] = {
    ("anagrapheus", "pin_promoted", 1): _pin_promoted_v1_to_v2
}


class UpcastRegistry:
    """Holds one-step upcasts per (namespace, type, from_version); stored history is never rewritten."""

    def __init__(self) -> None:
        """Start with the built-in events' steps (`pin_promoted` v1 -> v2) registered."""
        self._steps: dict[tuple[str, str, int], Upcast] = dict(_BUILTIN_STEPS)

    def register(self, namespace: str, event_type: str, *, from_version: int) -> Callable[[Upcast], Upcast]:
        """Register the function decorated as the step from `from_version` to `from_version + 1`."""

        def add(step: Upcast) -> Upcast:
            self.add(namespace, event_type, from_version=from_version, step=step)
            return step

        return add

    def add(self, namespace: str, event_type: str, *, from_version: int, step: Upcast) -> None:
        """Register `step` as the upcast from `from_version` to `from_version + 1`."""
        if from_version < 1:
            raise EventTypeError("from_version must be >= 1")
        name = (namespace, event_type, from_version)
        if name in self._steps:
            raise EventTypeError(f"an upcast for {namespace}:{event_type} v{from_version} is already registered")
        self._steps[name] = step

    def upcast(
        self, namespace: str, event_type: str, payload: dict[str, Any], *, version: int, target: int
    ) -> dict[str, Any]:
        """Apply the steps from `version` to `target`; a missing step raises `UpcastGap`."""
        # Steps receive a private copy, so a careless in-place step cannot reach the caller's payload.
        current = copy.deepcopy(payload) if version < target else payload
        while version < target:
            step = self._steps.get((namespace, event_type, version))
            if step is None:
                raise UpcastGap(namespace, event_type, missing_from=version, target=target)
            current = step(current)
            version += 1
        return current
