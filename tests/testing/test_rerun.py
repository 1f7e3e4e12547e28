"""`anagrapheus rerun` and `testing.rerun`: a recorded run asked again of an agent, strictly or with the model live."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, ModelResponsePart, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.cli import main
from anagrapheus.errors import UsageError
from anagrapheus.provider import every_agent_run
from anagrapheus.testing import rerun
from anagrapheus.testing.rerun import WorldPinned, read_events
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.events import RunInputs
from tests import rerun_agents
from tests.conftest import Scripted


def record(path: Path, *, unit: str = "support-7", record_inputs: bool = True) -> Path:
    """Run the support agent twice in one unit, as production would, into the log at `path`."""
    with SQLiteEventStore(path) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id=unit)
        with every_agent_run(Pinning(ledger, record_inputs=record_inputs)):
            first = rerun_agents.support.run_sync("Where is my parcel?", deps="ann")
            rerun_agents.support.run_sync("And tomorrow?", message_history=first.all_messages(), deps="ann")
        ledger.commit()
    return path


def test_the_same_agent_reruns_the_same_without_reaching_the_world(production: Path) -> None:
    reached = len(rerun_agents.WORLD)
    outcomes = rerun(production, rerun_agents.support, unit="support-7")
    assert [outcome.status for outcome in outcomes] == ["same", "same"]
    assert outcomes[0].output == outcomes[0].expected == "The UK holds firm on fisheries. sunny in Paris"
    assert outcomes[1].prompt == "And tomorrow?"
    assert len(rerun_agents.WORLD) == reached


def test_runs_named_by_their_caller_rerun_under_their_names_without_reaching_the_world(tmp_path: Path) -> None:
    # Named runs are placed by their names (issue #34): a re-run asks each again under its recorded name.
    log = tmp_path / "named.db"
    with SQLiteEventStore(log) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="support-named")
        with every_agent_run(Pinning(ledger)):
            first = rerun_agents.support.run_sync("Where is my parcel?", deps="ann", run_id="ticket-1")
            rerun_agents.support.run_sync(
                "And tomorrow?", message_history=first.all_messages(), deps="ann", run_id="ticket-2"
            )
        ledger.commit()
    reached = len(rerun_agents.WORLD)
    outcomes = rerun(log, rerun_agents.support)
    assert [(outcome.status, outcome.run_id) for outcome in outcomes] == [("same", "ticket-1"), ("same", "ticket-2")]
    assert len(rerun_agents.WORLD) == reached


def test_a_changed_prompt_diverges_naming_what_moved(production: Path) -> None:
    outcomes = rerun(production, rerun_agents.reworded)
    assert outcomes[0].status == "diverged"
    assert "instructions[0]" in outcomes[0].moved
    assert "instructions" in outcomes[0].describe()


def test_with_the_model_live_the_world_is_still_pinned(production: Path) -> None:
    reached = len(rerun_agents.WORLD)
    # The changed prompt reaches the (scripted) model live; the weather is answered from its pin.
    assert [o.status for o in rerun(production, rerun_agents.reworded, live_model=True)] == ["same", "same"]
    chattier = rerun(production, rerun_agents.chattier, live_model=True)
    assert [o.status for o in chattier] == ["same", "same"]  # the script's answer was pinned: requests unchanged
    assert len(rerun_agents.WORLD) == reached


def test_with_the_model_live_a_tool_call_the_recording_lacks_diverges(production: Path) -> None:
    agent = Agent(Scripted("support").model, deps_type=str, instructions="Answer in one line.", name="support")

    @agent.tool_plain
    def forecast(city: str) -> str:
        """Read tomorrow's weather in a city."""
        raise AssertionError("the world is never reached")

    outcomes = rerun(production, agent, live_model=True)
    assert outcomes[0].status == "diverged"
    assert "no pin for tool_call" in outcomes[0].detail


def test_an_output_that_moved_is_a_divergence(production: Path) -> None:
    changed = rerun_agents.build(instructions="Answer in two lines.", text="The EU and the UK hold firm.")
    outcomes = rerun(production, changed, live_model=True)
    assert [(o.status, o.moved) for o in outcomes] == [("diverged", ("output",))] * 2
    assert outcomes[0].output == "The EU and the UK hold firm. sunny in Paris"
    assert "the output moved" in outcomes[0].detail


def test_a_recording_without_inputs_is_refused(tmp_path: Path) -> None:
    log = record(tmp_path / "old.db", record_inputs=False)
    with pytest.raises(UsageError, match="holds no recorded run inputs"):
        rerun(log, rerun_agents.support)
    assert main(["rerun", str(log), "--agent", "tests.rerun_agents:support"]) == 2


def test_the_command_reports_each_run_with_the_shared_exit_codes(
    production: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:support", "--unit", "support-7"]) == 0
    out = capsys.readouterr().out
    assert out.count(": same") == 2

    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:reworded", "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["runs"][0]["status"] == "diverged"
    assert "instructions[0]" in report["runs"][0]["moved"]

    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:not_an_agent"]) == 2
    assert "is not a pydantic-ai Agent" in capsys.readouterr().err

    # From an exported recording too.
    exported = tmp_path / "support.jsonl"
    assert main(["export", str(production), "--unit", "support-7", "-o", str(exported)]) == 0
    assert main(["rerun", str(exported), "--agent", "tests.rerun_agents:reworded", "--live-model"]) == 0


def test_deps_come_from_the_recorded_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "prod.db"
    with SQLiteEventStore(log) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        agent = Agent(Scripted("m").model, deps_type=str, instructions=lambda ctx: f"Serve {ctx.deps}.")
        with every_agent_run(Pinning(ledger, record_deps=lambda deps: deps)):
            agent.run_sync("Hello", deps="ann")
        ledger.commit()
    assert [o.status for o in rerun(log, agent, deps=lambda run: run.deps)] == ["same"]
    assert [o.moved for o in rerun(log, agent, deps=lambda run: "bob")] == [("instructions[0]", "messages[0]")]
    assert main(["rerun", str(log), "--agent", "tests.rerun_agents:support", "--deps", "tests.rerun_agents:WORLD"]) == 2
    assert "is not a function" in capsys.readouterr().err


def test_failures_recorded_and_new(tmp_path: Path) -> None:
    log = tmp_path / "prod.db"
    failing = Agent(Scripted("m").model, name="support")

    @failing.tool_plain
    def weather(city: str) -> str:
        """Read the weather in a city."""
        raise RuntimeError("the station is down")

    with SQLiteEventStore(log) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        with every_agent_run(Pinning(ledger)), pytest.raises(RuntimeError):
            failing.run_sync("Where?")
        ledger.commit()

    # Failing again as it was recorded is the same run; completing where it failed is not.
    (again,) = rerun(log, failing, live_model=True)
    assert (again.status, again.detail) == ("same", "failed as recorded: RuntimeError: the station is down")
    (recovered,) = rerun(log, Agent(Scripted("m").model), live_model=True)
    assert (recovered.status, recovered.moved) == ("diverged", ("outcome",))

    def broken(ctx: object) -> str:
        raise ValueError("no instructions today")

    (crashed,) = rerun(log, Agent(Scripted("m").model, instructions=broken), live_model=True)
    assert (crashed.status, crashed.detail) == ("failed", "ValueError: no instructions today")


def test_a_run_whose_inputs_were_left_out_for_size_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "prod.db"
    with SQLiteEventStore(log) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        with every_agent_run(Pinning(ledger, inputs_limit=100)):
            rerun_agents.support.run_sync("Where is my parcel?" * 20, deps="ann")
        ledger.commit()
    (outcome,) = rerun(log, rerun_agents.support)
    assert (outcome.status, outcome.detail) == ("failed", "its prompt was left out of the recording for size")
    assert main(["rerun", str(log), "--agent", "tests.rerun_agents:support"]) == 1
    assert "failed" in capsys.readouterr().out


def test_a_source_that_cannot_be_read_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        rerun(tmp_path / "absent.db", rerun_agents.support)


def test_a_streamed_run_through_world_pinned_draws_the_model_and_answers_the_world(production: Path) -> None:
    events = read_events(production)
    with SQLiteEventStore(production.with_name("live.db")) as store:
        live = PinLedger(store, EventTypeRegistry())
        resolver = WorldPinned(ReplayPins.from_events(events, EventTypeRegistry(), unit_id="support-7"), live)
        reached = len(rerun_agents.WORLD)
        # A resolver of its own: it keeps no unit, so the run's inputs are noted nowhere.
        with every_agent_run(Pinning(resolver)):

            async def streamed() -> str:
                async with rerun_agents.reworded.run_stream("Where is my parcel?", deps="ann") as stream:
                    return await stream.get_output()

            assert asyncio.run(streamed()).strip() == "The UK holds firm on fisheries. sunny in Paris"
        assert len(rerun_agents.WORLD) == reached
        assert {pin.kind for pin in live.pins()} >= {"model_call"}
        live.abandon(reason="test")


def test_an_exported_recording_reruns_from_python_and_a_corrupt_one_is_bad_input(
    production: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "support.jsonl"
    assert main(["export", str(production), "--unit", "support-7", "-o", str(exported)]) == 0
    assert [o.status for o in rerun(exported, rerun_agents.support)] == ["same", "same"]

    corrupt = tmp_path / "corrupt.db"
    with SQLiteEventStore(corrupt) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        ledger.note_event(EventTypeRegistry().encode(RunInputs(unit_id="u", run_id="r", inputs={"format": 99})))
        ledger.commit()
    assert main(["rerun", str(corrupt), "--agent", "tests.rerun_agents:support"]) == 2


def test_the_command_refuses_a_recording_keyed_under_another_scheme_as_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from anagrapheus.timeline import RecordingHeader
    from anagrapheus.timeline.recording import write_recording

    path = tmp_path / "support.jsonl"
    with SQLiteEventStore(record(tmp_path / "support.db")) as store:
        header = RecordingHeader(description="Support.", recorded_with="A scripted model.", rerecord="pytest")
        write_recording(path, store.read(namespace="anagrapheus"), header=header)
    lines = path.read_text(encoding="utf-8").split("\n")
    head = json.loads(lines[0])
    head["provenance"]["key_scheme"] = "p9"
    path.write_text("\n".join([json.dumps(head), *lines[1:]]), encoding="utf-8")

    assert main(["check", str(path)]) == 2
    assert main(["rerun", str(path), "--agent", "tests.rerun_agents:support"]) == 2
    assert "pin-key scheme 'p9'" in capsys.readouterr().err


def test_drift_draws_every_model_call_live_and_says_which_answer_moved(
    production: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reached = len(rerun_agents.WORLD)
    written = production.read_bytes()

    unchanged = rerun(production, rerun_agents.support, drift=True)
    assert [(o.status, [c.status for c in o.calls]) for o in unchanged] == [("same", ["same", "same"])] * 2

    # The provider now answers the second request of each run otherwise: that call drifted, the first did not.
    drifted = rerun(production, rerun_agents.chattier, drift=True)
    assert [o.status for o in drifted] == ["drifted", "drifted"]
    assert [call.describe() for call in drifted[0].calls] == [
        "model_call #1: same",
        "model_call #2: drifted: result.parts[0].content: 'The UK holds firm on fisheries. sunny in Paris'"
        " != 'The EU and the UK hold firm. sunny in Paris'",
    ]
    assert len(rerun_agents.WORLD) == reached  # the world was answered from the recording
    assert production.read_bytes() == written  # and the recording left as it was

    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:support", "--drift"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "unchanged: 0 of 4 model call(s) answered otherwise; the recording is as it was"
    )
    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:chattier", "--drift"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith(
        ": drifted: 1 of 2 model call(s) answered otherwise or asked anew; then the output moved: recorded"
        ' "The UK holds firm on fisheries. sunny in Paris", now "The EU and the UK hold firm. sunny in Paris"'
    )
    assert out[2:4] == [
        "    model_call #1: same",
        "    model_call #2: drifted: result.parts[0].content: 'The UK holds firm on fisheries. sunny in Paris'"
        " != 'The EU and the UK hold firm. sunny in Paris'",
    ]
    assert out[-1] == "drifted: 2 of 4 model call(s) answered otherwise; the recording is as it was"
    assert main(["rerun", str(production), "--agent", "tests.rerun_agents:chattier", "--drift", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [call["status"] for run in report["runs"] for call in run["calls"]] == ["same", "drifted"] * 2


def test_drift_that_asks_the_world_what_the_recording_lacks_stops_there_unreached(production: Path) -> None:
    # The provider now calls the tool for another city: that answer drifted, and the tool call it asks for is
    # not in the recording, which is a miss (the world is never reached), not a live call.
    def elsewhere(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Lyon"})])

    agent = rerun_agents.build()
    reached = len(rerun_agents.WORLD)
    with agent.override(model=FunctionModel(elsewhere, model_name="support")):
        outcomes = rerun(production, agent, drift=True, unit="support-7")
    assert outcomes[0].status == "drifted"
    assert outcomes[0].calls[0].describe().startswith("model_call #1: drifted: result.parts[0].args.city: 'Paris'")
    assert "no pin for tool_call" in outcomes[0].detail
    assert len(rerun_agents.WORLD) == reached


def test_trials_report_the_share_of_live_runs_whose_outcome_held(
    production: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from anagrapheus.testing import trials

    reached = len(rerun_agents.WORLD)
    steady = trials(production, rerun_agents.support, times=3)
    assert [(o.matched, o.trials, o.share) for o in steady] == [(3, 3, 1.0)] * 2

    # The provider gives the recorded answer one time in two: each run holds in half its trials.
    wavering = trials(production, rerun_agents.wavering, times=4)
    assert [(o.matched, o.share) for o in wavering] == [(2, 0.5)] * 2
    assert (
        wavering[0]
        .describe()
        .endswith(
            ': 2 of 4 (50%) held; first other: output: recorded "The UK holds firm on fisheries. sunny in Paris",'
            ' now "The EU and the UK hold firm. sunny in Paris"'
        )
    )
    assert len(rerun_agents.WORLD) == reached  # every tool call was answered from the recording

    command = ["rerun", str(production), "--agent", "tests.rerun_agents:wavering", "--trials", "4"]
    assert main(command) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "held: 4 of 8 trial(s) (50%) gave the recorded outcome"
    assert main([*command, "--min-share", "0.8"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "below --min-share 80%: 2 run(s)"
    assert main([*command, "--min-share", "0.5", "--json"]) == 0
    assert [run["share"] for run in json.loads(capsys.readouterr().out)["runs"]] == [0.5, 0.5]
    assert main([*command, "--min-share", "80"]) == 2


def test_trials_need_an_agent_that_replays_the_recording(production: Path) -> None:
    from anagrapheus.testing import trials

    with pytest.raises(UsageError, match="does not replay as recorded"):
        trials(production, rerun_agents.reworded, times=2)
    with pytest.raises(UsageError, match="at least once, not 0 times"):
        trials(production, rerun_agents.support, times=0)


class Provider:
    """A `support` model whose first answer is given (`first`), then the recorded text whatever it was told."""

    def __init__(self, first: list[ModelResponsePart] | Exception) -> None:
        self.first = first

    def reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1 or (len(messages) == 3 and "tomorrow" in str(messages[-1])):
            if isinstance(self.first, Exception):
                raise self.first
            return ModelResponse(parts=self.first)
        return ModelResponse(parts=[TextPart("The UK holds firm on fisheries. sunny in Paris")])


def provider_agent(first: list[ModelResponsePart] | Exception) -> Agent[str, str]:
    return rerun_agents.build(model=FunctionModel(Provider(first).reply, model_name="support"))


def test_drift_after_a_moved_answer_asks_anew_and_a_failure_now_is_drift(production: Path) -> None:
    # A word before the tool call: that answer drifted, so the next request (its history) is one the recording lacks.
    chatty = provider_agent([TextPart("Let me look."), ToolCallPart("weather", {"city": "Paris"})])
    outcome = rerun(production, chatty, drift=True)[0]
    assert [call.status for call in outcome.calls] == ["drifted", "new"]
    assert outcome.calls[1].describe() == (
        "model_call #2: new: a request the recording lacks (an earlier answer moved what the run asked next)"
    )
    # The provider fails where it answered: drift, and the run fails as its agent would.
    down = provider_agent(ModelHTTPError(503, "support", "overloaded"))
    outcome = rerun(production, down, drift=True)[0]
    assert outcome.status == "drifted"
    assert outcome.calls[0].difference is not None and outcome.calls[0].difference.startswith("result: it failed now")


def test_a_trial_that_calls_other_tools_or_fails_does_not_hold(
    production: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from anagrapheus.testing import trials

    # The same output, given without asking the weather: the tool calls are part of the outcome.
    guessed = provider_agent([TextPart("The UK holds firm on fisheries. sunny in Paris")])
    held = trials(production, guessed, times=1)[0]
    assert (held.matched, held.other) == (0, "tool calls: recorded weather(city='Paris'), now none")
    down = trials(production, provider_agent(ModelHTTPError(503, "support", "overloaded")), times=1)[0]
    assert down.matched == 0 and down.other.startswith("it did not complete: ")

    # From a recording file, whose provenance is checked first; an agent that does not replay it is bad input.
    exported = tmp_path / "support.jsonl"
    assert main(["export", str(production), "--unit", "support-7", "-o", str(exported)]) == 0
    assert main(["rerun", str(exported), "--agent", "tests.rerun_agents:reworded", "--trials", "2"]) == 2
    assert "does not replay as recorded" in capsys.readouterr().err
