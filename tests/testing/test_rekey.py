"""`anagrapheus rekey` and `testing.rekey`: a recording whose keys moved is re-keyed offline (issue #33).

A release that changes what a call means moves every key of such calls. Here the change is simulated by recording
under a call policy that keys one more field (as an older release's material might have): every model call's key
differs from what the installed release asks, while the runs ask the same things in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings

from anagrapheus import Pinning
from anagrapheus.cli import main
from anagrapheus.errors import UsageError
from anagrapheus.provider import SemanticCallPolicy, every_agent_run
from anagrapheus.testing import rerun
from anagrapheus.testing.rekey import rekey_events
from anagrapheus.testing.rerun import read_events
from anagrapheus.timeline import EventTypeRegistry, PinLedger, RecordingHeader, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.recording import read_recording, write_recording
from tests import rerun_agents

HEADER = RecordingHeader(description="Support, two runs.", recorded_with="A scripted model.", rerecord="pytest")


class OlderRelease(SemanticCallPolicy):
    """The default policy as an older release might have keyed: one more field in every model call's material."""

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> Mapping[str, Any]:
        return {**super().material(messages, settings, parameters, model_id=model_id), "release": "older"}


def recorded(tmp_path: Path, policy: SemanticCallPolicy) -> Path:
    """The support agent's two runs in one unit, recorded under `policy`, as a recording."""
    path = tmp_path / "support.jsonl"
    with SQLiteEventStore(tmp_path / "support.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="support-7")
        with every_agent_run(Pinning(ledger, policy=policy)):
            first = rerun_agents.support.run_sync("Where is my parcel?", deps="ann")
            rerun_agents.support.run_sync("And tomorrow?", message_history=first.all_messages(), deps="ann")
        ledger.commit()
        write_recording(path, store.read(namespace="anagrapheus"), header=HEADER)
    return path


def test_a_recording_whose_model_keys_moved_misses_strictly_then_rekeys_and_replays(tmp_path: Path) -> None:
    old = recorded(tmp_path, OlderRelease())
    assert [o.status for o in rerun(old, rerun_agents.support)] == ["diverged", "diverged"]
    reached = len(rerun_agents.WORLD)

    new = tmp_path / "rekeyed.jsonl"
    report = rekey_events(read_events(old), rerun_agents.support, new, header=HEADER)

    assert len(rerun_agents.WORLD) == reached  # no tool ran: the weather came from its pin
    assert {pin.kind for pin in report.rekeyed} == {"model_call"}
    assert len(report.rekeyed) == 4  # two requests a run: the tool call, then the answer
    assert {pin.moved for pin in report.rekeyed} == {("-release",)}
    assert report.kept > 0  # the tool call, the run ids and times kept their keys
    assert "4 re-keyed" in report.describe() and "-release" in report.describe()
    outcomes = rerun(new, rerun_agents.support)
    assert [o.status for o in outcomes] == ["same", "same"]
    assert outcomes[0].output == "The UK holds firm on fisheries. sunny in Paris"


def test_the_rekeyed_recording_answers_what_the_old_one_held(tmp_path: Path) -> None:
    old = recorded(tmp_path, OlderRelease())
    new = tmp_path / "rekeyed.jsonl"
    rekey_events(read_events(old), rerun_agents.support, new, header=HEADER)
    results = {
        path: sorted(
            (payload["kind"], json.dumps(payload["raw"], sort_keys=True))
            for payload in (
                json.loads(event.payload) for event in read_recording(path).events if event.type == "pin_promoted"
            )
        )
        for path in (old, new)
    }
    assert results[old] == results[new]
    assert read_recording(new).header.provenance is not None
    assert read_recording(new).seal is not None  # sealed afresh: its lines are new ones, by design


def test_a_recording_of_another_run_cannot_be_paired_and_says_so(tmp_path: Path) -> None:
    old = recorded(tmp_path, OlderRelease())
    # The reworded agent asks the same kinds in the same order: only its rendered instructions tell it apart.
    with pytest.raises(UsageError, match="its instructions is not what was recorded"):
        rekey_events(read_events(old), rerun_agents.reworded, tmp_path / "rekeyed.jsonl", header=HEADER)


def test_an_unchanged_recording_rekeys_to_itself(tmp_path: Path) -> None:
    old = recorded(tmp_path, SemanticCallPolicy())
    report = rekey_events(read_events(old), rerun_agents.support, tmp_path / "same.jsonl", header=HEADER)
    assert report.rekeyed == ()
    replay = ReplayPins.from_recording(tmp_path / "same.jsonl", unit_id="support-7")
    assert len(replay) == len(ReplayPins.from_recording(old, unit_id="support-7"))


def test_the_command_rekeys_offline_and_refuses_to_write_over_its_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = recorded(tmp_path, OlderRelease())
    new = tmp_path / "rekeyed.jsonl"
    assert main(["rekey", str(old), "--agent", "tests.rerun_agents:support", "-o", str(new)]) == 0
    said = capsys.readouterr().out
    assert "4 re-keyed" in said and str(new) in said
    assert [o.status for o in rerun(new, rerun_agents.support)] == ["same", "same"]
    assert main(["rekey", str(old), "--agent", "tests.rerun_agents:support", "-o", str(old)]) == 2
    assert "its own input" in capsys.readouterr().err
    assert main(["rekey", str(old), "--agent", "tests.rerun_agents:support", "-o", str(new)]) == 2
    assert "--force" in capsys.readouterr().err
