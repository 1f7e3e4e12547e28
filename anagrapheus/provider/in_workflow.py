"""Refusing `Pinning` in a durable engine's workflow code, where a store read is outside the engine's history.

Temporal replays workflow code from its history and forbids I/O and threads in it: a `Pinning` there would read
the store (a lookup whose answer the history does not hold) and stamp its clock through a worker thread, which
Temporal's event loop refuses with `NotImplementedError`, failing the workflow task and retrying it for ever.
`Pinning` says so at once instead, naming what pins a Temporal run (`anagrapheus.provider.temporal`).
"""

from __future__ import annotations

import sys

from pydantic_ai.exceptions import UserError

from anagrapheus.errors import UsageError

__all__ = ["PinningInWorkflow", "refuse_workflow_code"]


class PinningInWorkflow(UsageError, UserError):
    """`Pinning` ran in Temporal workflow code; pin inside the activities with `TemporalPins` instead.

    Also a pydantic-ai `UserError`, which pydantic-ai's Temporal plugin lists among the errors that fail a
    workflow: the workflow fails at its first task, with this message, instead of its task being retried.
    """

    def __init__(self, where: str) -> None:
        super().__init__(
            f"Pinning cannot run in Temporal workflow code ({where}): its pin lookups are store reads outside the"
            " workflow's history, and its clock stamps use a thread, which the workflow's event loop refuses. Pin"
            " inside the activities with anagrapheus.provider.temporal.TemporalPins: wrap the model with"
            " pins.model(...), each tool with pins.tool(...), and give the agent `pins` beside TemporalDurability"
            " (docs/how-to/durable-temporal.md)"
        )


def refuse_workflow_code(where: str) -> None:
    """Raise `PinningInWorkflow` when called from Temporal workflow code; never imports Temporal to ask."""
    # Only a process that imported Temporal's workflow module can be running a workflow: never import it here.
    workflow = sys.modules.get("temporalio.workflow")
    if workflow is not None and workflow.in_workflow():
        raise PinningInWorkflow(where)
