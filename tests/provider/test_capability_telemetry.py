"""Telemetry under `Pinning`: pydantic-ai's spans of work answered from pins are not exported; the pins' own are."""

from __future__ import annotations

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from anagrapheus import Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.tracing import traced_to
from tests.conftest import Scripted


def fleet(city: str) -> str:
    """Name the fleet of a city."""
    return f"the fleet of {city}"


def spans_of(pinning: Pinning | None) -> list[str]:
    """The names of the spans one instrumented run exports, pinned through `pinning` or not pinned."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    capabilities = [traced] if pinning is None else [traced, pinning]
    Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=capabilities).run_sync("Where?")
    return sorted(span.name for span in exporter.get_finished_spans())


def test_a_replay_exports_the_run_but_not_the_calls_it_answered_from_pins(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = spans_of(None)
    ledger = PinLedger(store, types)
    recorded = spans_of(Pinning(ledger))
    ledger.commit()

    replayed = spans_of(Pinning(ReplayPins.from_events(store.read(), types)))

    assert recorded == unpinned == ["chat scripted-uk", "chat scripted-uk", "execute_tool fleet", "invoke_agent agent"]
    assert replayed == ["invoke_agent agent"]


def test_a_replay_under_pinning_exports_each_pins_span_as_answered(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    spans_of(Pinning(ledger))
    ledger.commit()

    # The pins' spans go to their own provider (here through `traced_to`); pydantic-ai's stay out as above.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with traced_to(provider):
        replayed = spans_of(Pinning(ReplayPins.from_events(store.read(), types)))
    pins = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]

    assert replayed == ["invoke_agent agent"]
    kinds = sorted(str(pin["anagrapheus.pin.kind"]) for pin in pins)
    assert kinds == ["model_call", "model_call", "run_clock", "run_clock", "run_id", "run_place", "tool_call"]
    assert {pin["anagrapheus.pin.outcome"] for pin in pins} == {"answered"}


def streamed_spans_of(pinning: Pinning | None) -> list[str]:
    """The names of the spans one instrumented `run_stream` exports, read to its end."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    capabilities = [traced] if pinning is None else [traced, pinning]
    agent = Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=capabilities)

    async def read() -> None:
        async with agent.run_stream("Where?") as streamed:
            await streamed.get_output()

    anyio.run(read)
    return sorted(span.name for span in exporter.get_finished_spans())


def test_a_replayed_stream_exports_what_a_replayed_run_exports(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = streamed_spans_of(None)
    ledger = PinLedger(store, types)
    recorded = streamed_spans_of(Pinning(ledger))
    ledger.commit()

    replayed = streamed_spans_of(Pinning(ReplayPins.from_events(store.read(), types)))

    assert recorded == unpinned
    assert "chat scripted-uk" in recorded
    # As a replayed `run` (above): the run is exported, the model work answered from pins is not (#45).
    assert replayed == ["invoke_agent agent"]
