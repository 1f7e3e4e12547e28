"""A Temporal workflow run in Temporal's sandbox (the runner users get by default), its agent carrying `Pinning`.

The agent lives in a module imported through the sandbox (`imports_passed_through`), as a user's would: the test
sets `AGENT` before the worker starts. The run must fail the workflow at once with `PinningInWorkflow`.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tests import temporal_sandboxed_agent


@workflow.defn
class SandboxedHarbour:
    """One agent run whose agent carries `Pinning`: refused in workflow code."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = temporal_sandboxed_agent.AGENT
        assert agent is not None
        return (await agent.run(prompt)).output
