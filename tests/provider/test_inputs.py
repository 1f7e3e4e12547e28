"""Each run under Pinning records what it was asked (a `run_inputs` event of its unit); replay ignores it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ImageUrl, RunContext

from anagrapheus import Pinning
from anagrapheus.cli import main
from anagrapheus.errors import CorruptEvent, UnitClosed
from anagrapheus.provider.inputs import recorded_runs
from anagrapheus.testing import assert_same_run
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    ReplayPins,
    SQLiteEventStore,
    read_recording,
)
from anagrapheus.timeline.events import PendingEvent, RunInputs
from tests.conftest import Scripted


def _agent(model: Any, pinning: Pinning) -> Agent[str, str]:
    agent = Agent(model, deps_type=str, instructions="Answer in one line.", capabilities=[pinning])

    @agent.tool_plain
    def weather(city: str) -> str:
        """Read the weather in a city."""
        return f"sunny in {city}"

    return agent


def test_a_run_records_its_prompt_history_settings_deps_and_output(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="support-1")
        agent = _agent(Scripted("m").model, Pinning(ledger, record_deps=lambda deps: {"customer": deps}))
        first = agent.run_sync(["Where?", ImageUrl("https://example.com/map.png")], deps="ann")
        second = agent.run_sync(
            "And tomorrow?", message_history=first.all_messages(), deps="ann", model_settings={"temperature": 0.5}
        )
        events = ledger.commit()

    # The inputs follow the unit's pins, one event per run, in the order the runs ended.
    assert [event.type for event in events][-2:] == ["run_inputs", "run_inputs"]
    assert all(event.type == "pin_promoted" for event in events[:-2])
    one, two = recorded_runs(events)
    assert one.prompt == ["Where?", ImageUrl("https://example.com/map.png")]
    assert one.message_history is None
    assert one.deps == {"customer": "ann"}
    assert one.output == first.output
    assert one.outcome == "completed"
    assert one.instructions == "Answer in one line."
    assert one.output_type == "str"
    assert not one.nested
    assert two.prompt == "And tomorrow?"
    assert two.message_history == first.all_messages()
    assert two.model_settings == {"temperature": 0.5}
    assert two.run_kwargs() == {"user_prompt": "And tomorrow?", "message_history": first.all_messages()}
    assert (one.run_id, two.run_id) == (first.run_id, second.run_id)
    assert recorded_runs(events, unit_id="another") == []

    # Replay ignores the inputs: the runs replay strictly, byte for byte.
    replay = ReplayPins.from_events(events, EventTypeRegistry())
    again = _agent(Scripted("m").model, Pinning(replay))
    replayed = again.run_sync(["Where?", ImageUrl("https://example.com/map.png")], deps="ann")
    assert_same_run(first, replayed)


def test_the_off_switch_records_no_inputs_and_strict_replay_notes_none(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        _agent(Scripted("m").model, Pinning(ledger, record_inputs=False)).run_sync("Where?", deps="ann")
        events = ledger.commit()
    assert {event.type for event in events} == {"pin_promoted"}

    replay = ReplayPins.from_events(events, EventTypeRegistry())
    _agent(Scripted("m").model, Pinning(replay)).run_sync("Where?", deps="ann")  # nothing to note it on: no error


def test_strict_replay_reads_no_inputs(tmp_path: Path) -> None:
    # Regression: a strict replay read every run's inputs (the deps snapshot, the whole history dumped to JSON)
    # only to drop them; at a 200-message history that made a replayed run under Pinning 1.22x the bare run.
    snapshots: list[str] = []

    def snapshot(deps: str) -> str:
        snapshots.append(deps)
        return deps

    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        recorded = _agent(Scripted("m").model, Pinning(ledger, record_deps=snapshot)).run_sync("Where?", deps="ann")
        events = ledger.commit()
    assert snapshots == ["ann"]

    replay = ReplayPins.from_events(events, EventTypeRegistry())
    offline = Scripted("m")
    replayed = _agent(offline.model, Pinning(replay, record_deps=snapshot)).run_sync("Where?", deps="ann")
    assert (replayed.output, offline.calls) == (recorded.output, 0)
    assert snapshots == ["ann"]


def test_a_record_mode_replay_notes_the_inputs_on_its_ledger(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="again")
        replay = ReplayPins.from_events((), EventTypeRegistry(), on_miss="record", into=ledger)
        _agent(Scripted("m").model, Pinning(replay)).run_sync("Where?", deps="ann")
        (run,) = recorded_runs(ledger.commit())
    assert (run.unit_id, run.prompt) == ("again", "Where?")


def test_a_failed_run_records_its_inputs_and_the_failure(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        agent = Agent(Scripted("m").model, capabilities=[Pinning(ledger)])

        @agent.tool_plain
        def weather(city: str) -> str:
            """Read the weather in a city."""
            raise RuntimeError("the station is down")

        with pytest.raises(RuntimeError):
            agent.run_sync("Where?")
        (run,) = recorded_runs(ledger.commit())
    assert run.outcome == "failed"
    assert run.error == "RuntimeError: the station is down"
    assert run.output is None


def test_a_cancelled_run_records_that_it_did_not_finish(tmp_path: Path) -> None:
    # How a run ended is an event of its unit whatever ended it (#40): a cancellation is a failure too.
    import asyncio

    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        agent = Agent(Scripted("m").model, capabilities=[Pinning(ledger)])

        @agent.tool_plain
        async def weather(city: str) -> str:
            """Read the weather in a city."""
            await asyncio.sleep(60)
            return "never"

        async def cancelled() -> None:
            task = asyncio.ensure_future(agent.run("Where?"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancelled())
        (run,) = recorded_runs(ledger.commit())
    assert run.outcome == "failed" and run.error is not None and run.error.startswith("CancelledError")


def test_a_run_started_by_a_tool_is_marked_nested(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        pinning = Pinning(ledger)
        inner = Agent(Scripted("inner", text="Inner.").model, capabilities=[pinning])
        outer = Agent(Scripted("outer").model, capabilities=[pinning])

        @outer.tool
        async def ask_inner(ctx: RunContext[object], city: str) -> str:
            """Ask another agent."""
            return (await inner.run(f"About {city}", usage=ctx.usage)).output

        outer.run_sync("Where?")
        runs = recorded_runs(ledger.commit())
    assert [(run.prompt, run.nested) for run in runs] == [("About Paris", True), ("Where?", False)]


def test_inputs_past_the_bound_leave_the_history_out_then_the_prompt(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        agent = _agent(Scripted("m").model, Pinning(ledger, inputs_limit=1500))
        first = agent.run_sync("Where?", deps="ann")
        agent.run_sync("And then?", message_history=first.all_messages(), deps="ann")
        agent.run_sync("x" * 4000, deps="ann")
        events = ledger.commit()
    one, two, three = recorded_runs(events)
    assert one.left_out == ()
    assert (two.left_out, two.message_history, two.prompt) == (("history",), None, "And then?")
    assert (three.left_out, three.prompt) == (("prompt",), None)  # it had no history to leave out
    assert all(len(event.payload) < 2000 for event in events if event.type == "run_inputs")
    assert json.loads(events[-1].payload)["inputs"]["prompt_left_out"] == 4002


def test_deps_and_settings_that_are_not_json_are_recorded_as_their_repr(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        _agent(Scripted("m").model, Pinning(ledger, record_deps=lambda deps: object())).run_sync("Where?", deps="a")
        (run,) = recorded_runs(ledger.commit())
    assert isinstance(run.deps, dict) and "unserialisable" in run.deps


def test_an_event_noted_on_a_closed_unit_is_refused(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        ledger.commit()
        event = PendingEvent(namespace="anagrapheus", type="run_inputs", schema_version=1, payload="{}")
        with pytest.raises(UnitClosed):
            ledger.note_event(event)


def test_inputs_of_an_unknown_format_are_refused(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        ledger.note_event(EventTypeRegistry().encode(RunInputs(unit_id="u", run_id="r", inputs={"format": 99})))
        events = ledger.commit()
    with pytest.raises(CorruptEvent, match="not in format 2 or earlier"):
        recorded_runs(events)


def test_export_keeps_the_inputs_and_refuses_a_secret_in_a_prompt(tmp_path: Path) -> None:
    database = tmp_path / "prod.db"
    with SQLiteEventStore(database) as store:
        for unit, prompt in (("clean", "Where?"), ("leaky", "My key is sk-ant-api03-" + "a" * 90)):
            ledger = PinLedger(store, EventTypeRegistry(), unit_id=unit)
            _agent(Scripted("m").model, Pinning(ledger)).run_sync(prompt, deps="ann")
            ledger.commit()

    out = tmp_path / "clean.jsonl"
    assert main(["export", str(database), "--unit", "clean", "-o", str(out)]) == 0
    (run,) = recorded_runs(read_recording(out).events)
    assert run.prompt == "Where?"

    leaky = tmp_path / "leaky.jsonl"
    assert main(["export", str(database), "--unit", "leaky", "-o", str(leaky)]) == 2
    assert not leaky.exists()
    assert main(["export", str(database), "--unit", "leaky", "-o", str(leaky), "--redact"]) == 0
    (redacted,) = recorded_runs(read_recording(leaky).events)
    assert isinstance(redacted.prompt, str) and "sk-ant" not in redacted.prompt


def test_a_recording_without_inputs_has_no_recorded_runs() -> None:
    # The negotiation as committed before run inputs were recorded; as committed now, it has one per run.
    from examples.negotiation.runs import RECORDING

    before_inputs = Path(__file__).parents[1] / "data" / "negotiation-before-inputs.jsonl"
    assert recorded_runs(read_recording(before_inputs).events) == []
    assert len(recorded_runs(read_recording(RECORDING).events)) == 8


def test_the_output_type_is_named_as_the_agent_gives_it(tmp_path: Path) -> None:
    from pydantic_ai import ToolOutput

    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        for output_type in ([int, str], ToolOutput(int)):
            agent = Agent(Scripted("m").model, output_type=output_type, capabilities=[Pinning(ledger)])
            with contextlib.suppress(Exception):  # the script answers otherwise: the run fails, its inputs stay
                agent.run_sync("Count.")
        runs = recorded_runs(ledger.commit())
    assert [run.output_type for run in runs] == ["int | str", "ToolOutput"]


# Tampered run inputs (issue #35): every reader of them fails typed, never with pydantic's bare ValidationError.


@pytest.mark.parametrize("tamper", ["history", "prompt"])
def test_tampered_run_inputs_fail_typed_in_every_reader(
    tamper: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from anagrapheus.cli import main
    from anagrapheus.errors import AnagrapheusError, CorruptEvent
    from anagrapheus.provider.inputs import recorded_runs
    from anagrapheus.testing.rerun import ask_recorded_runs, read_events
    from anagrapheus.timeline import RecordingHeader
    from anagrapheus.timeline.recording import write_recording
    from tests import rerun_agents
    from tests.testing.test_rerun import record
    from tests.timeline.sample_recording import unsealed

    path = tmp_path / "support.jsonl"
    with SQLiteEventStore(record(tmp_path / "support.db")) as store:
        header = RecordingHeader(description="Support.", recorded_with="A scripted model.", rerecord="pytest")
        write_recording(path, store.read(namespace="anagrapheus"), header=header)
    lines = path.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines):
        if '"type":"run_inputs"' in line and ('"history":[{' in line or tamper == "prompt"):
            stored = json.loads(line)
            payload = json.loads(stored["payload"]) if isinstance(stored["payload"], str) else stored["payload"]
            if tamper == "history":
                payload["inputs"]["history"][0]["kind"] = "bogus"
            else:
                payload["inputs"]["prompt"] = [{"kind": "bogus-content"}]
            stored["payload"] = json.dumps(payload) if isinstance(stored["payload"], str) else payload
            lines[number] = json.dumps(stored)
            break
    # Unsealed, as a file from before the seal: the seal would refuse the edit before any reader sees the inputs.
    path.write_text("\n".join(unsealed(lines)), encoding="utf-8")

    with pytest.raises(CorruptEvent, match=f"its {tamper} is not what pydantic-ai reads"):
        recorded_runs(read_events(path))
    with pytest.raises(AnagrapheusError):
        ask_recorded_runs(path, rerun_agents.support)
    assert main(["rerun", str(path), "--agent", "tests.rerun_agents:support"]) == 2
    assert f"its {tamper} is not what pydantic-ai reads" in capsys.readouterr().err
    exported = ["export", str(path), "--unit", "support-7", "--agent", "tests.rerun_agents:support"]
    assert main([*exported, "--as-test", str(tmp_path / "test_tampered.py")]) == 2
    assert f"its {tamper} is not what pydantic-ai reads" in capsys.readouterr().err
    from anagrapheus.evals import recorded_cases
    from anagrapheus.provider import fork_run
    from anagrapheus.timeline import EventTypeRegistry, PinLedger

    with pytest.raises(CorruptEvent):
        recorded_cases(path)
    with SQLiteEventStore(tmp_path / "fork.db") as store, pytest.raises(CorruptEvent):
        fork_run(read_events(path), rerun_agents.support, PinLedger(store, EventTypeRegistry()), origin="support-7")


def _conversation(tmp_path: Path, turns: int, **options: Any) -> tuple[list[list[Any]], list[Any]]:
    """A conversation of `turns` runs under one ledger, each continuing the last; each run's history, and the log."""
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="chat")
        agent = _agent(Scripted("m").model, Pinning(ledger, **options))
        histories: list[list[Any]] = []
        history: list[Any] = []
        for turn in range(turns):
            histories.append(history)
            history = agent.run_sync(f"Question {turn}?", message_history=history or None, deps="ann").all_messages()
        return histories, ledger.commit()


def test_a_continuing_run_records_only_what_the_run_before_it_did_not_have(tmp_path: Path) -> None:
    histories, events = _conversation(tmp_path, 6)
    runs = recorded_runs(events)
    assert [run.message_history or [] for run in runs] == histories
    inputs = [json.loads(event.payload)["inputs"] for event in events if event.type == "run_inputs"]
    # From the third run on, each refers to the run before it: its own record holds that run's turn alone.
    assert [one.get("history_from") for one in inputs] == [
        None,
        None,
        *({"run_id": runs[n - 1].run_id, "count": len(histories[n - 1])} for n in range(2, 6)),
    ]
    assert [one["format"] for one in inputs] == [1, 1, 2, 2, 2, 2]
    sizes = [len(event.payload) for event in events if event.type == "run_inputs"]
    assert max(sizes[2:]) - min(sizes[2:]) < 100  # linear in the conversation: each turn costs the same


def test_a_reference_resolves_in_every_reader_of_a_recording(tmp_path: Path) -> None:
    from anagrapheus.timeline import RecordingHeader
    from anagrapheus.timeline.recording import write_recording

    histories, events = _conversation(tmp_path, 4)
    path = write_recording(
        tmp_path / "chat.jsonl",
        events,
        header=RecordingHeader(description="Chat.", recorded_with="A scripted model.", rerecord="pytest"),
    )
    assert [run.message_history or [] for run in recorded_runs(read_recording(path).events)] == histories
    # Each run asked again from the recording, strictly replayed: a history put back wrong would miss its pins.
    from anagrapheus.testing.rerun import ask_recorded_runs

    replayed = _agent(Scripted("m").model, Pinning(ReplayPins.from_recording(path)))
    assert ask_recorded_runs(path, replayed, deps=lambda run: "ann") == 4
    # A redacted export of the unit keeps its references: the exported runs continue the same histories.
    exported = tmp_path / "exported.jsonl"
    assert main(["export", str(tmp_path / "log.db"), "--unit", "chat", "-o", str(exported), "--redact"]) == 0
    assert [run.message_history or [] for run in recorded_runs(read_recording(exported).events)] == histories


def test_a_history_left_out_for_size_refers_to_nothing(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="chat")
        agent = _agent(Scripted("m").model, Pinning(ledger, inputs_limit=4000))
        history = agent.run_sync("Where?", deps="ann").all_messages()
        history = agent.run_sync("And then?", message_history=history, deps="ann").all_messages()
        # It continues the run before, but its prompt is past the bound: the history goes first, reference and all.
        agent.run_sync("x" * 5000, message_history=history, deps="ann")
        events = ledger.commit()
    inputs = [json.loads(event.payload)["inputs"] for event in events if event.type == "run_inputs"]
    for one in inputs:
        assert one["format"] == (2 if "history_from" in one else 1)
        assert "history_from" not in one or one["history"] is not None
    runs = recorded_runs(events)
    assert runs[-1].left_out == ("history", "prompt")
    for run, one in zip(runs, inputs, strict=True):
        assert (run.message_history is None) == (not one["history"] and "history_from" not in one)


@pytest.mark.parametrize(
    ("reference", "said"),
    [
        ({"run_id": "nobody", "count": 1}, "continues the first 1 message(s) of run nobody, which unit chat does not"),
        ({"run_id": "earlier", "count": 10_000}, "continues the first 10000 message(s) of run earlier"),
        ("earlier", "its history_from is not a run id and a count"),
        ({"run_id": "earlier", "count": True}, "its history_from is not a run id and a count"),
    ],
)
def test_a_reference_to_a_history_the_recording_does_not_hold_fails_typed(
    tmp_path: Path, reference: object, said: str
) -> None:
    _, events = _conversation(tmp_path, 3)
    last = events[-1]
    payload = json.loads(last.payload)
    earlier = next(json.loads(event.payload)["run_id"] for event in events if event.type == "run_inputs")
    payload["inputs"]["history_from"] = json.loads(json.dumps(reference).replace('"earlier"', json.dumps(earlier)))
    tampered = [*events[:-1], dataclasses.replace(last, payload=json.dumps(payload))]
    with pytest.raises(CorruptEvent, match=said.replace("earlier", earlier).replace("(", r"\(").replace(")", r"\)")):
        recorded_runs(tampered)


def test_a_run_that_shares_no_start_with_the_runs_before_it_refers_to_none(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="chat")
        agent = _agent(Scripted("m").model, Pinning(ledger))
        first = agent.run_sync("Where?", deps="ann").all_messages()
        agent.run_sync("And then?", message_history=first, deps="ann")
        other = agent.run_sync("Something else?", deps="ann").all_messages()
        agent.run_sync("Go on.", message_history=other, deps="ann")
        events = ledger.commit()
    inputs = [json.loads(event.payload)["inputs"] for event in events if event.type == "run_inputs"]
    assert [one.get("history_from") for one in inputs] == [None] * 4
    assert [run.message_history for run in recorded_runs(events)] == [None, first, None, other]


def test_the_inputs_event_is_written_as_the_registry_encodes_it(tmp_path: Path) -> None:
    # The payload is written from the inputs' own text (no second encoding): byte for byte the registry's encoding,
    # over non-ASCII text (kept as drawn, not NFC), floats and integers.
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="unicode-1")
        agent = _agent(Scripted("m").model, Pinning(ledger, record_deps=lambda deps: {"who": deps, "n": [1, 2.5, 3.0]}))
        agent.run_sync("Caf\u0065\u0301 \uf900 \u2603?", deps="ann\u00e9", model_settings={"temperature": 0.25})
        events = ledger.commit()

    (stored,) = [event for event in events if event.type == "run_inputs"]
    registry = EventTypeRegistry()
    assert stored.payload == registry.encode(registry.decode(stored)).payload
    assert "\uf900" in stored.payload and "e\u0301" in stored.payload
