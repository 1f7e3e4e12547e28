"""Pinning given to one run inside a DBOS workflow is accepted (pydantic-ai refuses per-run capabilities there)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError

from anagrapheus import EventTypeRegistry, PinLedger, Pinning, SQLiteEventStore
from anagrapheus.provider import UnitPerRun, dbos_workflow_id
from tests.conftest import Scripted

try:
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSDurability
except ImportError:  # pragma: no cover - DBOS is in the dev extra; a skip is a failure under CI
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("DBOS is not installed (pip install -e '.[dev]' or '.[dbos]')", allow_module_level=True)


class Unflagged(AbstractCapability[Any]):
    """A capability not marked safe at run time: DBOS must still refuse it, so the check is live."""


def test_pinning_given_to_one_run_inside_a_workflow_is_accepted_and_pins(
    tmp_path: Path, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    scripted = Scripted("m")
    agent = Agent(scripted.model, name="runtime", capabilities=[DBOSDurability()])

    @agent.tool_plain
    def weather(city: str) -> str:
        """Read the weather."""
        return f"wind 4 in {city}"

    @DBOS.workflow()
    async def pinned(unit: str) -> str:
        result = await agent.run("Where?", capabilities=[Pinning(PinLedger(store, types, unit_id=unit))])
        return result.output

    routed = Agent(
        scripted.model,
        name="routed",
        capabilities=[DBOSDurability(), Pinning(UnitPerRun(store, types, unit_of=dbos_workflow_id))],
    )

    @DBOS.workflow()
    async def in_its_unit() -> str:
        return (await routed.run("Where?")).output

    @DBOS.workflow()
    async def unflagged() -> str:
        return (await agent.run("Where?", capabilities=[Unflagged()])).output

    async def main() -> tuple[str, BaseException | None]:
        config: DBOSConfig = {"name": "runtime", "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}"}
        DBOS(config=config)
        DBOS.launch()
        try:
            with SetWorkflowID("wf-pinned"):
                output = await (await DBOS.start_workflow_async(pinned, "unit-1")).get_result()
            with SetWorkflowID("wf-routed"):
                await (await DBOS.start_workflow_async(in_its_unit)).get_result()
            refused: BaseException | None = None
            try:
                await (await DBOS.start_workflow_async(unflagged)).get_result()
            except UserError as e:
                refused = e
            return output, refused
        finally:
            DBOS.destroy()

    output, refused = asyncio.run(main())
    assert "wind 4 in Paris" in output
    assert isinstance(refused, UserError) and "Unflagged" in str(refused)
    # The run's pins are in the unit it was given (committed by the caller, as with any PinLedger).
    kinds = {pin.kind for pin in PinLedger(store, types, unit_id="unit-1").pins()}
    assert {"model_call", "tool_call"} <= kinds
    # An agent built with UnitPerRun(unit_of=dbos_workflow_id) pins into the workflow's unit, committed at its end.
    assert PinLedger(store, types, unit_id="wf-routed").state == "committed"
