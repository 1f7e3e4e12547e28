"""The negotiation demo: its committed recording replays offline, re-records byte for byte, and shows divergence."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anagrapheus.timeline import SQLiteEventStore
from anagrapheus.timeline.recording import read_recording
from examples.negotiation.__main__ import main
from examples.negotiation.runs import DEFAULT_SEED, RECORDING, record_negotiation, replay_negotiation
from examples.negotiation.talks import ROUNDS, TREATY, RoundConcluded, eu_prompt, negotiation_types, uk_prompt

ROOT = Path(__file__).resolve().parents[2]

# The header stamps the versions that wrote it; under other versions only those fields may differ.
VERSION_FIELDS = ("anagrapheus", "pydantic_ai", "python")


def assert_records_the_committed_file(path: Path) -> None:
    """Byte for byte when the versions match the committed header's; otherwise all but the version fields."""
    recorded, committed = path.read_bytes(), RECORDING.read_bytes()
    hint = (
        "the scripted negotiation no longer records what is committed; if the change is intended, re-record with"
        f" `{read_recording(RECORDING, provenance='ignore').header.rerecord}` and review the diff"
    )
    new_lines, old_lines = recorded.splitlines(), committed.splitlines()
    new_head, old_head = json.loads(new_lines[0]), json.loads(old_lines[0])
    if all(new_head["provenance"][f] == old_head["provenance"][f] for f in VERSION_FIELDS):
        assert recorded == committed, hint
        return
    for head in (new_head, old_head):
        for field in VERSION_FIELDS:
            del head["provenance"][field]
    assert (new_head, new_lines[1:]) == (old_head, old_lines[1:]), hint


def test_the_committed_recording_replays_into_an_empty_store_reaching_no_model(tmp_path: Path) -> None:
    database = tmp_path / "fresh.db"
    recording = read_recording(RECORDING, registry=negotiation_types())

    report = asyncio.run(replay_negotiation(RECORDING, database=database))

    assert report.diverged is None
    assert report.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    assert report.world_readings == 0
    pins = [e for e in recording.events if e.type == "pin_promoted"]
    assert report.hits == len(pins)  # every pin was used, each once
    assert [r.round for r in report.rounds] == [1, 2, 3, 4]
    treaty = next(e for e in pins if e.payload_json()["kind"] == "entity_id")
    assert {r.treaty_id for r in report.rounds} == {treaty.payload_json()["raw"]}
    types = negotiation_types()
    with SQLiteEventStore(database) as store:
        logged = [types.decode(event) for event in store.read()]
    # The fresh log holds the replayed rounds' outcomes and nothing drawn.
    assert logged == report.rounds
    assert all(isinstance(event, RoundConcluded) for event in logged)


def test_a_recording_made_before_failures_were_pinned_still_replays(tmp_path: Path) -> None:
    # The negotiation as committed with pin_promoted version 1: its pins upcast to version 2 on read.
    old = ROOT / "tests" / "data" / "negotiation-v1.jsonl"
    recording = read_recording(old, registry=negotiation_types())
    assert {e.schema_version for e in recording.events if e.type == "pin_promoted"} == {1}

    report = asyncio.run(replay_negotiation(old, database=tmp_path / "fresh.db"))

    assert report.diverged is None
    assert report.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    assert report.world_readings == 0
    assert report.hits == len(recording.events)
    assert [r.round for r in report.rounds] == [1, 2, 3, 4]


def test_a_recording_whose_answers_were_pinned_sorted_still_replays_with_the_same_rounds(tmp_path: Path) -> None:
    # The negotiation as committed before model answers were pinned as ordered text: sorted JSON objects.
    old = ROOT / "tests" / "data" / "negotiation-sorted-answers.jsonl"
    recording = read_recording(old, registry=negotiation_types())
    answers = [e.payload_json()["raw"] for e in recording.events if e.payload_json()["kind"] == "model_call"]
    assert answers and all(isinstance(a, dict) and a.get("kind") == "response" for a in answers)

    before = asyncio.run(replay_negotiation(old, database=tmp_path / "old.db"))
    now = asyncio.run(replay_negotiation(RECORDING, database=tmp_path / "new.db"))

    assert before.diverged is None and before.hits == len(recording.events)
    assert before.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    # Position ids from round 2 on moved when run inputs joined the recording (see the test below).
    assert [(r.topic, r.treaty_id, r.eu, r.uk) for r in before.rounds] == [
        (r.topic, r.treaty_id, r.eu, r.uk) for r in now.rounds
    ]


def _places() -> int:
    """How many runs the committed recording placed under their inputs: both of each round's (issue #34)."""
    events = read_recording(RECORDING, registry=negotiation_types()).events
    places = sum(1 for e in events if e.type == "pin_promoted" and e.payload_json()["kind"] == "run_place")
    assert places == 2 * 4
    return places


def test_the_recording_made_before_run_inputs_still_replays_with_the_same_statements(tmp_path: Path) -> None:
    # The negotiation as committed before each run's inputs were recorded. The inputs' events took ids from the
    # seeded stream, so from round 2 on the minted position ids differ; every statement and the treaty do not.
    old = ROOT / "tests" / "data" / "negotiation-before-inputs.jsonl"
    recording = read_recording(old, registry=negotiation_types())
    assert {e.type for e in recording.events} == {"pin_promoted"}

    before = asyncio.run(replay_negotiation(old, database=tmp_path / "old.db"))
    now = asyncio.run(replay_negotiation(RECORDING, database=tmp_path / "new.db"))

    assert before.diverged is None and before.hits == len(recording.events) == now.hits - _places()
    assert before.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    assert [(r.topic, r.treaty_id, r.eu, r.uk) for r in before.rounds] == [
        (r.topic, r.treaty_id, r.eu, r.uk) for r in now.rounds
    ]


def test_the_recording_header_names_the_models_and_how_to_record_again() -> None:
    header = read_recording(RECORDING).header

    assert header.models == {"EU": "function:scripted-eu", "UK": "function:scripted-uk"}
    assert "scripted" in header.recorded_with and "no provider was reached" in header.recorded_with
    assert header.rerecord == f"python -m examples.negotiation --record --seed {DEFAULT_SEED}"


def test_the_recording_made_before_the_run_rule_still_replays_with_the_same_rounds(tmp_path: Path) -> None:
    # The negotiation as committed before each run in a unit asked as a run of its own (issue #34): the UK's run,
    # second in each round's unit, asked under the keys a first run asks under. Its pins still answer it.
    old = ROOT / "tests" / "data" / "negotiation-before-the-run-rule.jsonl"
    recording = read_recording(old, registry=negotiation_types())
    keys = {e.payload_json()["key"] for e in recording.events if e.type == "pin_promoted"}
    now = read_recording(RECORDING, registry=negotiation_types())
    assert keys != {e.payload_json()["key"] for e in now.events if e.type == "pin_promoted"}

    before = asyncio.run(replay_negotiation(old, database=tmp_path / "old.db"))
    again = asyncio.run(replay_negotiation(RECORDING, database=tmp_path / "new.db"))

    assert before.diverged is None and before.hits == again.hits - _places() == len(keys)
    assert before.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    assert before.world_readings == 0
    assert [(r.topic, r.treaty_id, r.eu, r.uk) for r in before.rounds] == [
        (r.topic, r.treaty_id, r.eu, r.uk) for r in again.rounds
    ]


def test_rerecording_with_the_scripted_models_reproduces_the_committed_file_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "negotiation.jsonl"

    asyncio.run(record_negotiation(path, seed=DEFAULT_SEED))

    assert_records_the_committed_file(path)


def test_recording_again_over_the_committed_file_leaves_it_byte_for_byte(tmp_path: Path) -> None:
    # Under another pydantic-ai than the one that made it too (issue #33): the run records the same events, so the
    # file keeps its bytes and the provenance of the run that first wrote it.
    path = tmp_path / "negotiation.jsonl"
    shutil.copyfile(RECORDING, path)

    asyncio.run(record_negotiation(path, seed=DEFAULT_SEED))

    assert path.read_bytes() == RECORDING.read_bytes()


def test_a_new_recording_replays_its_own_run(tmp_path: Path) -> None:
    path = tmp_path / "other-seed.jsonl"
    recorded = asyncio.run(record_negotiation(path, seed=DEFAULT_SEED + 1))

    report = asyncio.run(replay_negotiation(path))

    assert report.rounds == recorded
    assert sum(report.model_calls.values()) == 0


def test_a_reworded_prompt_diverges_in_round_three_at_the_uk_and_names_the_message() -> None:
    report = asyncio.run(replay_negotiation(RECORDING, diverge=True))

    assert report.diverged is not None
    assert (report.diverged.round_no, report.diverged.party.code) == (3, "UK")
    assert report.diverged.divergence.kind == "model_call"
    assert report.diverged.divergence.moved == ("messages[0]",)
    assert [r.round for r in report.rounds] == [1, 2]
    assert sum(report.model_calls.values()) == 0


def test_a_recording_made_with_other_models_misses_at_the_first_call_and_names_the_model(tmp_path: Path) -> None:
    lines = RECORDING.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["models"] = {"EU": "openai:gpt-4.1-mini", "UK": "openai:gpt-4o-mini"}
    path = tmp_path / "claims-openai.jsonl"
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")

    report = asyncio.run(replay_negotiation(path))

    assert report.diverged is not None
    assert (report.diverged.round_no, report.diverged.party.code) == (1, "EU")
    assert "model" in report.diverged.divergence.moved
    assert report.model_calls == {"openai:gpt-4.1-mini": 0, "openai:gpt-4o-mini": 0}


def test_main_prints_the_transcript_and_zero_model_calls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0

    out = capsys.readouterr().out
    for number, topic in enumerate(ROUNDS, start=1):
        assert f"Round {number}: the {topic.title}" in out
    assert "Model calls: 0 (function:scripted-eu 0, function:scripted-uk 0); world readings: 0" in out


def test_main_refuses_a_corrupt_recording_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(RECORDING.read_bytes()[:-10])

    assert main(["--recording", str(path)]) == 1

    err = capsys.readouterr().err
    assert f"{path}:" in err and "truncated" in err


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.negotiation", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_module_replays_offline_in_a_subprocess() -> None:
    done = _run()

    assert done.returncode == 0, done.stderr
    assert "Round 4: the final package" in done.stdout
    assert "Model calls: 0" in done.stdout
    assert "world readings: 0" in done.stdout


def test_the_module_shows_a_divergence_in_a_subprocess() -> None:
    done = _run("--diverge")

    assert done.returncode == 0, done.stderr
    assert "Diverged in round 3, at the UK negotiator (function:scripted-uk)" in done.stdout
    assert "what moved against the nearest recorded call: messages[0]" in done.stdout
    assert "Round 3:" not in done.stdout
    assert "Model calls: 0" in done.stdout


def test_recording_with_a_provider_lacking_its_key_says_so_and_writes_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    path = tmp_path / "openai.jsonl"

    done = _run("--record", "--provider", "openai", "--recording", str(path), env=env)

    assert done.returncode == 2
    assert "OPENAI_API_KEY" in done.stderr and "Nothing was recorded" in done.stderr
    assert not path.exists()


def test_the_header_command_rerecords_the_committed_file(tmp_path: Path) -> None:
    command = read_recording(RECORDING).header.rerecord.split()
    assert command[:3] == ["python", "-m", "examples.negotiation"]
    path = tmp_path / "again.jsonl"

    done = _run(*command[3:], "--recording", str(path))

    assert done.returncode == 0, done.stderr
    assert "Round 4: the final package" in done.stdout
    assert_records_the_committed_file(path)


def test_prompts_name_things_and_never_quote_an_id() -> None:
    report = asyncio.run(replay_negotiation(RECORDING))
    ids = {i for r in report.rounds for i in (r.treaty_id, r.eu_position_id, r.uk_position_id)}
    prompts = [
        text
        for n, topic in enumerate(ROUNDS, start=1)
        for text in (
            eu_prompt(n, topic, report.rounds[: n - 1]),
            uk_prompt(n, topic, report.rounds[: n - 1], report.rounds[n - 1].eu),
        )
    ]

    assert len(ids) == 1 + 2 * len(ROUNDS)
    assert not [i for i in ids for p in prompts if i in p]
    assert all(TREATY in p for p in prompts)


def test_the_regress_demo_gives_three_verdicts_on_the_one_recording(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--regress"]) == 0

    out = capsys.readouterr().out
    verdicts = [
        line.split(" ")[0] for line in out.splitlines() if line.split(" ")[0] in ("PASSED", "FAILED", "DIVERGED")
    ]
    assert verdicts == ["PASSED", "DIVERGED", "FAILED"]
    assert [line for line in out.splitlines() if line.startswith("(exit")] == ["(exit 0)", "(exit 3)", "(exit 1)"]
    assert "DIVERGED at turn 2 (1 of 8 turn(s) played, on_miss strict)" in out


def test_the_recording_as_committed_before_the_seal_replays_as_the_sealed_one_does(tmp_path: Path) -> None:
    # The negotiation as committed before recordings were sealed (issue #41): the same events, no seal. It was
    # committed next sealed once (kept as written before fingerprint deltas), and now re-recorded with deltas:
    # the same events. Both replay the same rounds with the same hits.
    old = ROOT / "tests" / "data" / "negotiation-unsealed.jsonl"
    sealed = ROOT / "tests" / "data" / "negotiation-whole-fingerprints.jsonl"
    assert read_recording(old).seal is None and read_recording(RECORDING).seal is not None
    assert old.read_text().splitlines()[1:] == sealed.read_text().splitlines()[1:]
    assert read_recording(old).events == read_recording(RECORDING).events

    before = asyncio.run(replay_negotiation(old, database=tmp_path / "old.db"))
    now = asyncio.run(replay_negotiation(RECORDING, database=tmp_path / "new.db"))

    assert before.diverged is None and now.diverged is None
    assert before.hits == now.hits == 59
    assert before.model_calls == now.model_calls == {"function:scripted-eu": 0, "function:scripted-uk": 0}
    assert before.rounds == now.rounds
