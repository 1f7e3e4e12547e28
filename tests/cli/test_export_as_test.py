"""A production run becomes a pytest test in one command: recorded in one process, run by pytest in another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import UsageError
from anagrapheus.testing.rerun import ask_recorded_runs
from tests import rerun_agents

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = """
import sys
from anagrapheus import Pinning
from anagrapheus.provider import every_agent_run
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from tests.rerun_agents import support

with SQLiteEventStore(sys.argv[1]) as store:
    ledger = PinLedger(store, EventTypeRegistry(), unit_id="incident-42")
    with every_agent_run(Pinning(ledger)):
        first = support.run_sync("Where is my parcel?", deps="ann")
        support.run_sync("And tomorrow?", message_history=first.all_messages(), deps="ann")
    ledger.commit()
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANAGRAPHEUS_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("CI", None)
    return env


def _pytest(test: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", *options],
        cwd=test.parent,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_production_run_exported_as_a_test_passes_and_fails_when_the_prompt_changes(tmp_path: Path) -> None:
    database = tmp_path / "prod.db"
    subprocess.run([sys.executable, "-c", PRODUCTION, str(database)], cwd=ROOT, env=_env(), check=True, timeout=120)
    project = tmp_path / "project"
    test = project / "test_incident.py"

    argv = ["export", str(database), "--unit", "incident-42", "--agent", "tests.rerun_agents:support"]

    code = main([*argv, "--as-test", str(test)])

    assert code == 0
    assert (project / "recordings" / "test_incident" / "test_incident_42.jsonl").is_file()
    passed = _pytest(test)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed" in passed.stdout

    # Recorded again through the plugin, the recording keeps the inputs the test asks again, and passes again.
    recording = project / "recordings" / "test_incident" / "test_incident_42.jsonl"
    rerecorded = _pytest(test, "--anagrapheus=record")
    assert rerecorded.returncode == 0, rerecorded.stdout + rerecorded.stderr
    assert '"type":"run_inputs"' in recording.read_text()
    assert _pytest(test).returncode == 0

    # The agent's prompt changes: the test fails, naming what moved.
    test.write_text(test.read_text().replace("AGENT = _source.support", "AGENT = _source.reworded"))
    failed = _pytest(test)
    assert failed.returncode == 1
    assert "moved:     instructions[0]" in failed.stdout


def test_the_test_module_asks_with_the_recorded_deps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.testing.test_rerun import record

    database = record(tmp_path / "prod.db")
    test = tmp_path / "test_with_deps.py"
    argv = ["export", str(database), "--unit", "support-7", "--agent", "tests.rerun_agents:support"]
    assert main([*argv, "--deps", "tests.rerun_agents:recorded_deps", "--as-test", str(test)]) == 0
    assert "deps=DEPS" in test.read_text()
    assert "1 recording(s)" in capsys.readouterr().out
    recording = tmp_path / "recordings" / "test_with_deps" / "test_support_7.jsonl"
    # Outside the plugin the runs are asked of the agent as it is (here under no pins: the scripted model answers).
    assert ask_recorded_runs(recording, rerun_agents.support, deps=rerun_agents.recorded_deps) == 2
    with pytest.raises(AssertionError, match="the output moved"):
        ask_recorded_runs(recording, rerun_agents.chattier)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ([], "--as-test needs --agent MODULE:ATTR"),
        (["--agent", "tests.rerun_agents:not_an_agent"], "is not a pydantic-ai Agent"),
        (["--agent", "tests.rerun_agents:support", "-o", "x.jsonl"], "leave out -o"),
        (["--agent", "tests.rerun_agents:support", "--deps", "tests.rerun_agents:recorded_deps.__name__"], ""),
    ],
)
def test_as_test_refuses_what_it_cannot_write(
    extra: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.testing.test_rerun import record

    database = record(tmp_path / "prod.db")
    code = main(["export", str(database), "--unit", "support-7", "--as-test", str(tmp_path / "test_x.py"), *extra])
    if error:
        assert code == 2
        assert error in capsys.readouterr().err
    else:
        assert code == 0


def test_as_test_refuses_a_bad_module_name_and_a_unit_without_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.testing.test_rerun import record

    database = record(tmp_path / "prod.db")
    argv = ["export", str(database), "--unit", "support-7", "--agent", "tests.rerun_agents:support"]
    assert main([*argv, "--as-test", str(tmp_path / "not-a-module.py")]) == 2
    assert "named as a Python module" in capsys.readouterr().err
    assert main(["export", str(database), "--unit", "support-7"]) == 2
    assert "name the recording to write with -o FILE" in capsys.readouterr().err

    old = record(tmp_path / "old.db", record_inputs=False)
    argv = ["export", str(old), "--unit", "support-7", "--agent", "tests.rerun_agents:support"]
    assert main([*argv, "--as-test", str(tmp_path / "test_old.py")]) == 2
    assert "holds no recorded run inputs" in capsys.readouterr().err


def test_a_recording_without_inputs_cannot_be_asked_again(tmp_path: Path) -> None:
    # The negotiation as committed before run inputs were recorded.
    before_inputs = Path(__file__).parents[1] / "data" / "negotiation-before-inputs.jsonl"
    with pytest.raises(UsageError, match="export the unit again"):
        ask_recorded_runs(before_inputs, rerun_agents.support)


def test_as_test_reports_what_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from anagrapheus import Pinning
    from anagrapheus.provider import every_agent_run
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
    from tests.testing.test_rerun import record

    database = record(tmp_path / "prod.db")
    with SQLiteEventStore(database) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="leaky")
        with every_agent_run(Pinning(ledger)):
            rerun_agents.support.run_sync("My key is sk-ant-api03-" + "a" * 90, deps="ann")
        ledger.commit()
    argv = ["export", str(database), "--agent", "tests.rerun_agents:support"]

    assert main([*argv, "--unit", "leaky", "--as-test", str(tmp_path / "test_leaky.py")]) == 2
    assert "or export with --redact" in capsys.readouterr().err
    assert main([*argv, "--unit", "leaky", "--redact", "--as-test", str(tmp_path / "test_leaky.py")]) == 0

    (tmp_path / "a-file").write_text("")
    assert main([*argv, "--unit", "support-7", "--as-test", str(tmp_path / "a-file" / "test_x.py")]) == 2
    assert "cannot write the recording" in capsys.readouterr().err
    (tmp_path / "test_dir.py").mkdir()
    assert main([*argv, "--unit", "support-7", "--as-test", str(tmp_path / "test_dir.py")]) == 2
    assert "cannot write the test" in capsys.readouterr().err


# Hostile unit ids (issue #35): a unit id is data, pasted into no code, and no two units share a test.

HOSTILE_UNITS = [
    'x"""; import pathlib; pathlib.Path("PWNED").write_text("ran") #',
    "C:\\Users\\ann",
    "\\N{42}",
    '"""',
    "chat-1",
    "chat_1",
    "chat.1",
]


def test_hostile_unit_ids_give_a_module_that_compiles_runs_nothing_and_keeps_every_unit(tmp_path: Path) -> None:
    from tests.testing.test_rerun import record

    database = tmp_path / "prod.db"
    for unit in HOSTILE_UNITS:
        record(database, unit=unit)
    project = tmp_path / "project"
    test = project / "test_hostile.py"
    argv = ["export", str(database), "--agent", "tests.rerun_agents:support", "--as-test", str(test)]
    argv += [f"--unit={unit}" for unit in HOSTILE_UNITS]

    assert main(argv) == 0

    compile(test.read_text(encoding="utf-8"), str(test), "exec")
    recordings = sorted((project / "recordings" / "test_hostile").glob("*.jsonl"))
    assert len(recordings) == len(HOSTILE_UNITS)
    ran = _pytest(test)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{len(HOSTILE_UNITS)} passed" in ran.stdout
    assert not (project / "PWNED").exists() and not (ROOT / "PWNED").exists()


def test_as_test_never_writes_over_an_existing_file_without_force(tmp_path: Path) -> None:
    from tests.testing.test_rerun import record

    database = record(tmp_path / "prod.db")
    conftest = tmp_path / "conftest.py"
    conftest.write_text("# the user's own fixtures\n", encoding="utf-8")
    argv = ["export", str(database), "--unit", "support-7", "--agent", "tests.rerun_agents:support"]

    assert main([*argv, "--as-test", str(conftest)]) == 2
    assert conftest.read_text(encoding="utf-8") == "# the user's own fixtures\n"
    assert not (tmp_path / "recordings").exists()  # refused before anything was written
    assert main([*argv, "--as-test", str(tmp_path / "test_once.py")]) == 0
    assert main([*argv, "--as-test", str(tmp_path / "test_once.py")]) == 2
    assert main([*argv, "--as-test", str(tmp_path / "test_once.py"), "--force"]) == 0


def test_a_unit_id_holding_a_key_exported_with_redact_leaves_no_key_and_its_test_passes(tmp_path: Path) -> None:
    from tests.testing.test_rerun import record

    key = "sk-ant-api03-" + "f" * 90
    unit = f"support-{key}"
    database = record(tmp_path / "prod.db", unit=unit)
    project = tmp_path / "project"
    test = project / "test_leaky_unit.py"
    argv = ["export", str(database), "--unit", unit, "--agent", "tests.rerun_agents:support", "--as-test", str(test)]

    assert main(argv) == 2  # refused: the unit id is a secret
    assert main([*argv, "--redact"]) == 0

    written = [test, *(project / "recordings").rglob("*")]
    assert all(key not in str(path) and "f" * 40 not in str(path) for path in written)
    assert all(key not in path.read_text(encoding="utf-8") for path in written if path.is_file())
    ran = _pytest(test)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_a_unit_of_named_runs_whose_id_holds_a_key_exports_with_redact_and_replays(tmp_path: Path) -> None:
    # A named run's times are keyed on its name, not on a number: the alias keys them on the same name.
    from anagrapheus import Pinning
    from anagrapheus.provider import every_agent_run
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
    from tests import rerun_agents

    unit = "support-sk-ant-api03-" + "e" * 90
    database = tmp_path / "prod.db"
    with SQLiteEventStore(database) as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id=unit)
        with every_agent_run(Pinning(ledger)):
            first = rerun_agents.support.run_sync("Where is my parcel?", deps="ann", run_id="ticket-1")
            rerun_agents.support.run_sync(
                "And tomorrow?", message_history=first.all_messages(), deps="ann", run_id="ticket-2"
            )
        ledger.commit()
    test = tmp_path / "project" / "test_named_unit.py"
    argv = ["export", str(database), "--unit", unit, "--agent", "tests.rerun_agents:support", "--as-test", str(test)]

    assert main([*argv, "--redact"]) == 0
    # Replayed in this process (the subprocess the test above runs costs seconds): every pin is asked for, the
    # runs' times under the alias included, and the runs come back as they were.
    (recording,) = (tmp_path / "project" / "recordings").rglob("*.jsonl")
    replay = ReplayPins.from_recording(recording)
    with every_agent_run(Pinning(replay)):
        again = rerun_agents.support.run_sync("Where is my parcel?", deps="ann", run_id="ticket-1")
        rerun_agents.support.run_sync(
            "And tomorrow?", message_history=again.all_messages(), deps="ann", run_id="ticket-2"
        )
    assert again.all_messages() == first.all_messages()
    assert replay.unused() == {} and replay.divergence is None
