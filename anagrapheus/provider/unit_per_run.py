"""UnitPerRun: a resolver that picks its unit of work when it draws, from the run that draws.

A `PinLedger` is one unit of work, fixed when it is built; an agent is built once and serves many
runs. Inside a durable engine each run belongs to a workflow whose id is known only once it runs,
and the workflow's pins should be the workflow's unit, so that a recovered workflow answers its
finished calls from its own scratch. `UnitPerRun` holds one `PinLedger` per unit id, and asks
`unit_of(ctx)` for the unit of the run it is drawing for: `Pinning` makes the run's context
available while the run is in flight, and closes the unit when the run ends.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic_ai import RunContext
from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import EventTypeRegistry, given_or_builtins
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.resolving.replay import ReplayPins
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver, RunServer
from anagrapheus.timeline.scoped import scoped
from anagrapheus.timeline.stores.ports import TimelineStore

__all__ = ["RunServer", "UnitPerRun", "dbos_workflow_id", "fails_for_good", "prefect_flow_run_id"]

R = TypeVar("R")

# The run a `Pinning` is serving in this context: set around the run by `Pinning.wrap_run`, inherited by every
# task and worker thread the run starts, so a draw anywhere in the run knows whose it is.
_RUN: ContextVar[RunContext[Any] | None] = ContextVar("anagrapheus_run", default=None)


@contextmanager
def serving(ctx: RunContext[Any]) -> Generator[None]:
    """Make `ctx` the run whose draws a `UnitPerRun` answers, for as long as the block runs."""
    with scoped(_RUN, ctx):
        yield


def fails_for_good(error: BaseException) -> bool:
    """The default rule: a run that raised an `Exception` has failed for good; an interruption has not.

    Under DBOS, a workflow that raises is marked failed and never run again, so its unit is abandoned. A
    cancellation, or the process stopping (`KeyboardInterrupt`, `SystemExit`), is not an `Exception`: the
    workflow stays pending and is recovered, so its unit is left open for the recovered run to reuse.
    """
    return isinstance(error, Exception)


def dbos_workflow_id(ctx: RunContext[Any]) -> str:
    """The id of the DBOS workflow the run is in: the unit its pins land in, the same after DBOS recovers it."""
    from dbos import DBOS  # DBOS is an optional extra (`anagrapheus[dbos]`): imported only when asked.

    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise UsageError(
            "dbos_workflow_id: this run is not inside a DBOS workflow; run the agent from a @DBOS.workflow()"
            " function, or give UnitPerRun another unit_of"
        )
    return workflow_id


def prefect_flow_run_id(ctx: RunContext[Any]) -> str:
    """The Prefect flow run the run is in, as a unit id (`prefect:<flow run id>`): the same when it is run again.

    A new flow run of the same flow is a new unit (and misses Prefect's task cache too): to resume a flow run a
    crash stopped, run that flow run again (see docs/how-to/durable-prefect.md).
    """
    from prefect.context import FlowRunContext  # Prefect is an optional extra (`anagrapheus[prefect]`).

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise UsageError(
            "prefect_flow_run_id: this run is not inside a Prefect flow run; run the agent from a @flow function,"
            " or give UnitPerRun another unit_of"
        )
    return f"prefect:{context.flow_run.id}"


@dataclass
class _Unit:
    """One unit in use: what answers its runs, the runs in flight in it, and whether one of them failed for good."""

    answering: PinLedger | ReplayPins
    """The unit's ledger; a strict replay of its log when the unit was committed before this run started."""
    ledger: PinLedger | None
    """The ledger closed as the unit's last run ends; None for a unit committed before (nothing to close)."""
    runs: int = 0
    failure: str | None = None


class UnitPerRun(DelegatingResolver):
    """A resolver delegating each draw to the `PinLedger` of the drawing run's unit, named by `unit_of(ctx)`.

    `Agent(model, capabilities=[Pinning(UnitPerRun(store, unit_of=dbos_workflow_id))])`
    serves every workflow with one capability: each run's pins land in its own unit, which is
    committed when the last run in flight in it ends, or abandoned when one of them failed for good
    (`abandons(error)`; by default any `Exception`). A run that is interrupted leaves its unit open,
    and a later run with the same unit id (a recovered workflow) answers the finished calls from it.
    A run whose unit was committed already (a workflow killed after its unit committed but before the
    engine saw it finish, then recovered) is answered from that unit's log, strictly: it repeats nothing,
    and a call the committed unit does not hold raises `PinMiss`. A unit abandoned is refused (`UnitClosed`).
    """

    def __init__(
        self,
        store: TimelineStore,
        registry: EventTypeRegistry | None = None,
        *,
        unit_of: Callable[[RunContext[Any]], str],
        abandons: Callable[[BaseException], bool] = fails_for_good,
    ) -> None:
        self.store = store
        """Where every unit's scratch and log live."""
        self.registry = given_or_builtins(registry)
        """The event types the ledgers encode with (the built-ins included)."""
        self.unit_of = unit_of
        """The run's context to the id of the unit its pins land in."""
        self.abandons = abandons
        """Whether a run's error is final, so its unit is abandoned; otherwise the unit is left open."""
        self._units: dict[str, _Unit] = {}
        self._lock = threading.Lock()

    @property
    @override
    def serves_each_run(self) -> RunServer:
        """Itself: it picks a unit for each run, so `Pinning` serves each run through it."""
        return self

    def ledger_for(self, ctx: RunContext[Any]) -> PinLedger | ReplayPins:
        """What answers `ctx`'s unit: the one in use if a run is in flight in it, else a new one."""
        unit_id = self._unit_id(ctx)
        with self._lock:
            unit = self._units.get(unit_id)
        return (unit if unit is not None else self._opened(unit_id)).answering

    def _opened(self, unit_id: str) -> _Unit:
        """The unit answered by its ledger, or by a strict replay of its log if it was committed already."""
        ledger = PinLedger(self.store, self.registry, unit_id=unit_id)
        if ledger.state != "committed":
            return _Unit(ledger, ledger)
        return _Unit(ReplayPins.from_store(self.store, self.registry, unit_id=unit_id), None)

    def begin(self, ctx: RunContext[Any]) -> PinLedger | ReplayPins:
        """Count a run in flight in its unit (called by `Pinning` as the run starts); return what answers it."""
        unit_id = self._unit_id(ctx)
        with self._lock:
            unit = self._units.get(unit_id)
        opened = unit if unit is not None else self._opened(unit_id)
        with self._lock:
            unit = self._units.get(unit_id)
            if unit is None:
                unit = self._units[unit_id] = opened
            unit.runs += 1
            return unit.answering

    async def serve(
        self,
        ctx: RunContext[Any],
        run: Callable[[], Awaitable[R]],
        *,
        started: Callable[[Resolver, RunContext[Any]], object],
    ) -> R:
        """Run `run` as a run in `ctx`'s unit: its draws go there, and the unit closes as the last run in it ends."""
        ledger = self.begin(ctx)
        try:
            started(ledger, ctx)
            with serving(ctx):
                result = await run()
        except BaseException as e:
            await self.end(ctx, e)
            raise
        await self.end(ctx, None)
        return result

    async def end(self, ctx: RunContext[Any], error: BaseException | None) -> None:
        """A run ended (with `error` if it raised): close its unit once no other run is in flight in it."""
        unit_id = self._unit_id(ctx)
        with self._lock:
            unit = self._units[unit_id]
            unit.runs -= 1
            if error is not None and unit.failure is None and self.abandons(error):
                unit.failure = f"{type(error).__name__}: {error}"
            if unit.runs:
                return
            del self._units[unit_id]
        if unit.ledger is None:
            return  # answered from a unit committed before: nothing to close
        if unit.failure is not None:
            await unit.ledger.aabandon(reason=f"the run failed for good ({unit.failure})")
        elif error is None:
            await unit.ledger.acommit()
        # Interrupted, not failed: the unit stays open for the run that resumes it.

    def _unit_id(self, ctx: RunContext[Any]) -> str:
        unit_id = self.unit_of(ctx)
        if not isinstance(unit_id, str) or not unit_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(f"UnitPerRun: unit_of returned {unit_id!r}, not a unit id (a non-empty string)")
        return unit_id

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        """The ledger of the run drawing now, asked for `key` as it is."""
        ctx = _RUN.get()
        if ctx is None:
            raise UsageError(
                "UnitPerRun answers only inside an agent run under Pinning (it picks the unit from the run);"
                " give it to Pinning, or draw through a PinLedger"
            )
        return self.ledger_for(ctx), key
