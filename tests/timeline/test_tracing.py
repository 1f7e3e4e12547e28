"""Spans for pins: each resolve says what became of it; commit and abandon say how many pins; replays stay out."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai import Agent

from anagrapheus import Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.tracing import answers_untraced, pin_span, short_key, traced_to, unit_span
from tests.conftest import Scripted


def fleet(city: str) -> str:
    """Name the fleet of a city."""
    return f"the fleet of {city}"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with traced_to(provider):
        yield exporter


def pins_of(exporter: InMemorySpanExporter) -> list[tuple[str, Any, Any]]:
    """(name, outcome, attempts) of every pin span, in the order they ended."""
    return [
        (s.name, attrs.get("anagrapheus.pin.outcome"), attrs.get("anagrapheus.pin.attempts"))
        for s in exporter.get_finished_spans()
        if s.name.startswith("pin ") and (attrs := dict(s.attributes or {}))
    ]


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def test_a_recorded_run_reports_each_pin_drawn_and_the_commit(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    ledger = PinLedger(store, types, unit_id="round-1")
    Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=[Pinning(ledger)]).run_sync("Where?")
    committed = ledger.commit()

    recorded = pins_of(spans)
    assert ("pin model_call", "drawn", 1) in recorded
    assert ("pin tool_call", "drawn", 1) in recorded
    assert all(outcome == "drawn" for _, outcome, _ in recorded)
    model_span = next(s for s in spans.get_finished_spans() if s.name == "pin model_call")
    attributes = dict(model_span.attributes or {})
    assert attributes["anagrapheus.unit.id"] == "round-1"
    key = str(attributes["anagrapheus.pin.key"])
    assert key.startswith("p1:model_call:") and len(key) == len("p1:model_call:") + 12
    commit = dict(named(spans, "pins commit").attributes or {})
    assert commit == {
        "anagrapheus.unit.id": "round-1",
        "anagrapheus.unit.pins": len(recorded),
        "anagrapheus.unit.events": len(committed),
    }


def test_a_replay_under_pinning_exports_each_pin_span_as_answered(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    # Issue #46: as PinnedModel reports them, so a trace of a replayed test shows what was answered.
    ledger = PinLedger(store, types)
    Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=[Pinning(ledger)]).run_sync("Where?")
    ledger.commit()
    recorded = [name for name, _, _ in pins_of(spans)]
    spans.clear()

    replay = ReplayPins.from_events(store.read(), types)
    Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=[Pinning(replay)]).run_sync("Where?")
    replayed = pins_of(spans)
    assert [name for name, _, _ in replayed] == recorded
    assert {outcome for _, outcome, _ in replayed} == {"answered"}


def _never() -> object:
    raise AssertionError("a replay drew")


def test_answered_reused_missed_and_failed(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    ledger = PinLedger(store, types, unit_id="u")
    assert ledger.resolve("p1:t:aaaa", kind="t", effect=lambda: 1, interpret=int) == 1
    # The same unit asked again, by a new ledger (a retried run): reused, the attempt counted.
    retried = PinLedger(store, types, unit_id="u")
    assert retried.resolve("p1:t:aaaa", kind="t", effect=_never, interpret=int) == 1
    with pytest.raises(ValueError, match="broke"):
        retried.resolve("p1:t:bbbb", kind="t", effect=_broken, interpret=int)
    retried.abandon(reason="the talks broke down")
    assert pins_of(spans) == [("pin t", "drawn", 1), ("pin t", "reused", 2), ("pin t", "failed", None)]
    failed = [s for s in spans.get_finished_spans() if s.name == "pin t"][-1]
    assert failed.status.status_code == StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    assert dict(named(spans, "pins abandon").attributes or {})["anagrapheus.unit.pins"] == 1


def _broken() -> object:
    raise ValueError("broke")


def test_a_strict_miss_names_what_moved(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    ledger = PinLedger(store, types, unit_id="u")
    ledger.resolve("p1:t:aaaa", kind="t", effect=lambda: 1, interpret=int, fingerprint={"a": "1", "b": "2"})
    ledger.commit()
    spans.clear()
    replay = ReplayPins.from_events(store.read(), types)
    assert replay.resolve("p1:t:aaaa", kind="t", effect=_never, interpret=int) == 1
    with pytest.raises(PinMiss):
        replay.resolve("p1:t:cccc", kind="t", effect=_never, interpret=int, fingerprint={"a": "1", "b": "3"})
    answered, missed = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    assert answered["anagrapheus.pin.outcome"] == "answered"
    assert answered["anagrapheus.unit.id"] == "u"
    assert missed["anagrapheus.pin.outcome"] == "missed"
    assert missed["anagrapheus.pin.moved"] == ("b",)


def test_a_record_mode_miss_is_missed_then_drawn(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    recorder = PinLedger(store, types, unit_id="again")
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=recorder)

    async def both() -> None:
        assert await replay.aresolve("p1:t:dddd", kind="t", effect=_async_two, interpret=int) == 2
        assert await replay.aresolve("p1:t:dddd", kind="t", effect=_async_two, interpret=int) == 2

    asyncio.run(both())
    outcomes = [(n, o) for n, o, _ in pins_of(spans)]
    assert outcomes == [("pin t", "drawn"), ("pin t", "missed"), ("pin t", "reused"), ("pin t", "missed")]
    assert {dict(s.attributes or {}).get("anagrapheus.unit.id") for s in spans.get_finished_spans()} == {"again"}


async def _async_two() -> object:
    return 2


def test_streams_report_their_spans(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    model = Scripted("scripted-uk")
    ledger = PinLedger(store, types)

    async def streamed() -> None:
        agent = Agent(model.model, capabilities=[Pinning(ledger)])
        async with agent.run_stream("Where?") as run:
            await run.get_output()

    asyncio.run(streamed())
    assert ("pin model_call", "drawn", None) in pins_of(spans)
    ledger.commit()
    spans.clear()
    replay = ReplayPins.from_events(store.read(), types)

    async def replayed() -> None:
        agent = Agent(model.model, capabilities=[Pinning(replay)])
        async with agent.run_stream("Where?") as run:
            await run.get_output()

    asyncio.run(replayed())
    # A replayed stream reports its pin as answered, as every replayed pin under Pinning does (issue #46).
    replayed_pins = pins_of(spans)
    assert "pin model_call" in {name for name, _, _ in replayed_pins}
    assert {outcome for _, outcome, _ in replayed_pins} == {"answered"}


def test_a_stream_cut_short_failed(
    store: SQLiteEventStore, types: EventTypeRegistry, spans: InMemorySpanExporter
) -> None:
    model = Scripted("scripted-uk", fail_after_chunks=1)

    async def streamed() -> None:
        agent = Agent(model.model, capabilities=[Pinning(PinLedger(store, types))])
        async with agent.run_stream("Where?") as run:
            await run.get_output()

    with pytest.raises(Exception):  # noqa: B017  # whatever the scripted stream raises
        asyncio.run(streamed())
    (stream,) = [s for s in spans.get_finished_spans() if s.name == "pin model_call"]
    assert dict(stream.attributes or {})["anagrapheus.pin.outcome"] == "failed"
    assert stream.status.status_code == StatusCode.ERROR


def test_without_a_tracer_provider_no_span_is_made() -> None:
    with pin_span("t", "p1:t:abcdef", None) as span:
        span.set("drawn", attempts=1, moved=("x",))
    # One shared no-op: it keeps nothing, so concurrent resolves share it safely.
    assert span.outcome is None
    assert pin_span("u", "p1:u:0", "unit") is pin_span("t", "p1:t:1", None)
    with unit_span("commit", "u") as unit:
        assert unit is None
    assert short_key("p1:model_call:" + "f" * 64) == "p1:model_call:" + "f" * 12
    assert short_key("nocolon" * 3) == "nocolonnocol"


def test_an_answer_under_answers_untraced_is_left_unended(spans: InMemorySpanExporter) -> None:
    with answers_untraced():
        with pin_span("t", "p1:t:1", "u") as answered:
            answered.set("answered")
        with pin_span("t", "p1:t:2", "u") as drawn:
            drawn.set("drawn")
    assert [dict(s.attributes or {})["anagrapheus.pin.key"] for s in spans.get_finished_spans()] == ["p1:t:2"]


# Spans leave the process (issue #35): a unit id or an exception holding a credential is redacted on them.

KEY = "sk-ant-api03-" + "e" * 90
URL = "https://fleet:hunter2-pass@ports.example/v1?api_key=abcdef0123456789abcdef01"


def everything_on(span: ReadableSpan) -> str:
    texts = [str(value) for value in (span.attributes or {}).values()]
    for event in span.events:
        texts += [str(value) for value in (event.attributes or {}).values()]
    return " ".join([*texts, str(span.status.description)])


@pytest.mark.parametrize("current", [True, False])
def test_a_pin_span_carries_no_credential_from_the_unit_id_or_the_exception(
    current: bool, spans: InMemorySpanExporter
) -> None:
    with pytest.raises(ValueError), pin_span("tool_call", "p1:tool_call:abc", f"chat-{KEY}", current=current):
        raise ValueError(f"could not reach {URL}")
    span = named(spans, "pin tool_call")
    said = everything_on(span)
    assert KEY not in said and "hunter2-pass" not in said and "abcdef0123456789abcdef01" not in said
    assert "[redacted:anthropic-key:1]" in said and "could not reach" in said
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_a_unit_span_carries_no_credential(spans: InMemorySpanExporter) -> None:
    with pytest.raises(RuntimeError), unit_span("commit", f"chat-{KEY}"):
        raise RuntimeError(f"disk full writing {URL}")
    said = everything_on(named(spans, "pins commit"))
    assert KEY not in said and "hunter2-pass" not in said


# A provider set while a process runs is honoured by the next pin, however it is set: OpenTelemetry's global is set
# once a process, so each way runs in a process of its own (issue #43: the check is cheap, never cached stale).
SET_LATER = """
import os, sys
from pathlib import Path
from opentelemetry import trace
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.tracing import spans_made
import spied_tracing

def answer(messages, info):
    return ModelResponse(parts=[TextPart("the fleet is at sea")])

def never(messages, info):
    raise AssertionError("a replay reached the model")

store, types = SQLiteEventStore(Path(sys.argv[2]) / "log.db"), EventTypeRegistry()
ledger = PinLedger(store, types)
recording = Agent(PinnedModel(FunctionModel(answer, model_name="fleet"), ledger))
for _ in range(3):
    recording.run_sync("Where is the fleet?")
ledger.commit()
replayed = Agent(PinnedModel(FunctionModel(never, model_name="fleet"), ReplayPins.from_events(store.read(), types)))
replayed.run_sync("Where is the fleet?")
assert not spans_made() and spied_tracing.EXPORTER.get_finished_spans() == ()
if sys.argv[1] == "set_tracer_provider":
    trace.set_tracer_provider(spied_tracing.provider())
else:
    os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "spied"  # loaded by the next pin, through get_tracer_provider
replayed.run_sync("Where is the fleet?")
for span in spied_tracing.EXPORTER.get_finished_spans():
    print(span.name, dict(span.attributes)["anagrapheus.pin.outcome"])
"""

SPIED = """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()

def provider():
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(EXPORTER))
    return made
"""


@pytest.mark.parametrize("how", ["set_tracer_provider", "OTEL_PYTHON_TRACER_PROVIDER"])
def test_a_provider_set_after_a_replayed_request_is_honoured_by_the_next(how: str, tmp_path: Path) -> None:
    # The variable names a provider by its entry point: a distribution of one module on the path declares it.
    site = tmp_path / "site"
    (site / "spied_tracing-0.dist-info").mkdir(parents=True)
    (site / "spied_tracing-0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: spied-tracing\nVersion: 0\n"
    )
    (site / "spied_tracing-0.dist-info" / "entry_points.txt").write_text(
        "[opentelemetry_tracer_provider]\nspied = spied_tracing:provider\n"
    )
    (site / "spied_tracing.py").write_text(SPIED)
    env = {k: v for k, v in os.environ.items() if k != "OTEL_PYTHON_TRACER_PROVIDER"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-c", SET_LATER, how, str(tmp_path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["pin model_call answered", ""]
