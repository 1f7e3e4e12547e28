"""Give every pydantic-ai agent run in a scope one more capability, and refuse model requests that escape it.

pydantic-ai has no process-wide list of capabilities: `Agent.instrument_all` injects only its own
`Instrumentation`, and `Agent.override` is per agent instance, so it cannot reach an agent built
inside application code (or at import time) that a test never sees. Every run, though (`run`,
`run_sync`, `run_stream`, `run_stream_events`, and wrapper agents), enters through `Agent.iter`,
whose `capabilities=` argument is the documented way to add capabilities to one run. The scope
below passes its capability through that argument; it never touches models or provider SDKs.
`Agent.iter` is replaced only while a scope is open (process-wide state, owned by the scope).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic_ai import Agent, models
from pydantic_ai.capabilities import AbstractCapability

from anagrapheus.errors import UsageError

__all__ = ["every_agent_run", "refuse_model_requests"]

_guard = threading.Lock()
# Process-wide rather than a ContextVar: application code may run its agents in worker threads or
# on a loop it starts itself, and those runs belong to the scope just as much.
_active: AbstractCapability[Any] | None = None
# `Agent.iter` replaced while a scope is open: (pydantic-ai's own, ours in its place). Put back as the scope
# closes, so a process that no longer scopes its runs has pydantic-ai's `Agent.iter` again.
_replaced: tuple[Callable[..., Any], Callable[..., Any]] | None = None


def _holds(agent: Agent[Any, Any], capability: AbstractCapability[Any]) -> bool:
    """Whether the agent was built with this very capability (a test may also pass it explicitly)."""
    found: list[bool] = []
    agent.root_capability.apply(lambda leaf: found.append(leaf is capability))
    return any(found)


def _install() -> None:
    """Put the scope's `Agent.iter` in place (once: a second scope finds it there); the caller holds `_guard`."""
    global _replaced
    if _replaced is not None:
        return
    original: Callable[..., Any] = Agent.iter

    @functools.wraps(original)
    def iter_with_scope(
        self: Agent[Any, Any], *args: Any, capabilities: Sequence[Any] | None = None, **kwargs: Any
    ) -> Any:
        capability = _active
        given = list(capabilities or ())
        # Added once: a run that already carries it (explicitly, or through its agent) keeps one copy,
        # since two nested pinning layers would ask the resolver for one key twice.
        if capability is not None and not any(c is capability for c in given) and not _holds(self, capability):
            given.append(capability)
        return original(self, *args, capabilities=given or capabilities, **kwargs)

    setattr(Agent, "iter", iter_with_scope)  # noqa: B010 (a plain assignment to a method trips pyright)
    _replaced = (original, iter_with_scope)


def _uninstall() -> None:
    """Put pydantic-ai's `Agent.iter` back; the caller holds `_guard`.

    Unless another library replaced it after us (it wraps ours): taking ours out would take its wrapper
    out too, so ours stays, passing every run through unchanged while no scope is open.
    """
    global _replaced
    if _replaced is not None and Agent.__dict__.get("iter") is _replaced[1]:
        setattr(Agent, "iter", _replaced[0])  # noqa: B010
        _replaced = None


@contextmanager
def every_agent_run(capability: AbstractCapability[Any]) -> Generator[None]:
    """While open, every agent run in this process carries `capability` as one of its run capabilities.

    Scopes do not nest: one capability at a time answers for every run. `Agent.iter` is replaced while
    the scope is open, and put back as it closes.
    """
    global _active
    with _guard:
        if _active is not None:
            raise UsageError("every_agent_run scopes do not nest: close the open one first")
        _install()
        _active = capability
    try:
        yield
    finally:
        with _guard:
            _active = None
            _uninstall()


@contextmanager
def refuse_model_requests() -> Generator[None]:
    """While open, pydantic-ai refuses every request to a real model (its `ALLOW_MODEL_REQUESTS` is off)."""
    # A process-wide switch of pydantic-ai's: its own override sets it and puts the value before back as it closes.
    with models.override_allow_model_requests(False):
        yield
