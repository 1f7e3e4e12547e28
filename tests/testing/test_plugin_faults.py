"""The pytest plugin when something goes wrong: what a failing test shows, recordings two tests would share,
folders that cannot be written, and the call policy a recording is stamped with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.testing.test_plugin import RECORDING, TEST_ADVICE, calls

pytest_plugins = ["pytester"]


pytestmark = pytest.mark.usefixtures("outside_ci")


def test_a_failing_assertion_under_record_shows_as_pytest_shows_it(project: pytest.Pytester) -> None:
    # Reworded, so record draws afresh (the run leaves its recording), and asserting what the model never says.
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    recorded = (project.path / RECORDING).read_bytes()
    project.makepyfile(
        test_app=TEST_ADVICE.replace("Do I need", "Should I take").replace('"umbrella" in', '"sunscreen" in')
    )
    result = project.runpytest("--anagrapheus=record")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    # The test's own failure first, as pytest reports it: the assertion, rewritten, with its traceback.
    result.stdout.fnmatch_lines(
        [
            "*def test_advice():*",
            '>*assert "sunscreen" in app.advise(*',
            "E*AssertionError: assert 'sunscreen' in 'Pack an umbrella: rain in Paris.'*",
            "*- anagrapheus -*",
            "the test failed, so recordings/test_app/test_advice.jsonl was left as it was",
            "the run left the recording at a model_call after 2 hit(s) (moved: messages[[]0[]]) and drew from there on",
        ]
    )
    assert "left its recording" not in output
    assert "re-record:" not in output  # the command just run is no help
    assert (project.path / RECORDING).read_bytes() == recorded

    # Under rewrite nothing is replayed, so nothing was left: the section only says the file is untouched.
    result = project.runpytest("--anagrapheus=rewrite")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E*AssertionError*", "*- anagrapheus -*", "the test failed, so *test_advice.jsonl was left as it was"]
    )
    assert "the run left the recording" not in result.stdout.str()
    assert (project.path / RECORDING).read_bytes() == recorded


def test_a_failing_assertion_after_a_swallowed_miss_under_replay_shows_both(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    project.makepyfile(
        test_app="""
        import pytest

        import app


        @pytest.mark.anagrapheus
        def test_advice():
            try:
                answer = app.advise("Should I take an umbrella in Paris?")
            except Exception:
                answer = "no advice today"  # an application that falls back on any error
            assert "umbrella" in answer
        """
    )
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: assert 'umbrella' in 'no advice today'",
            "*- anagrapheus -*",
            "test_app.py::test_advice left its recording",
            "*moved:     messages[[]0[]]",
            "  re-record: pytest test_app.py::test_advice --anagrapheus=record",
        ]
    )


SECRET_APP = '''
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel


def config() -> str:
    """Read the service's configuration."""
    return "token=" + "sk-" + "proj-" + "Q" * 32


def _answer(messages, info):
    returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("config", {})])
    return ModelResponse(parts=[TextPart("configured")])


def run() -> str:
    return Agent(FunctionModel(_answer, model_name="scripted"), tools=[config]).run_sync("configure").output
'''


def test_a_secret_refusal_under_record_names_the_rule_and_where(project: pytest.Pytester) -> None:
    project.makepyfile(
        secret_app=SECRET_APP,
        test_secret="""
        import pytest

        import secret_app


        @pytest.mark.anagrapheus
        def test_configure():
            assert secret_app.run() == "configured"
        """,
    )
    result = project.runpytest("--anagrapheus=record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_secret.py::test_configure: refusing to write *recordings/test_secret/test_configure.jsonl:"
            " the event at seq * holds a value matching secret rule 'openai-key' at $.payload.raw*"
        ]
    )
    output = result.stdout.str()
    assert "left its recording" not in output
    assert "Traceback" not in output
    assert "sk-proj-" not in output
    assert not (project.path / "recordings/test_secret/test_configure.jsonl").exists()


def test_a_write_error_under_record_names_the_file_and_the_os_error(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    (project.path / RECORDING).mkdir(parents=True)  # a folder where the file goes
    result = project.runpytest("--anagrapheus=rewrite")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: *recordings/test_app/test_advice.jsonl:"
            " cannot write the recording (Is a directory)"
        ]
    )
    assert "left its recording" not in result.stdout.str()


def test_a_folder_that_cannot_be_made_is_refused_before_the_run_draws(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    (project.path / "recordings").write_text("a file where the recordings folder goes\n")
    result = project.runpytest("--anagrapheus=record")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: *recordings/test_app/test_advice.jsonl: its folder *recordings/test_app"
            " cannot be created or written (*recordings is not a directory): make the folder writable,"
            " or record to a path in a writable folder"
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert calls(project) == []  # refused before anything was paid for


def test_a_folder_that_goes_away_during_the_run_is_named_when_the_recording_is_written(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_app="""
        from pathlib import Path

        import pytest

        import app


        @pytest.mark.anagrapheus
        def test_advice():
            assert "umbrella" in app.advise("Do I need an umbrella in Paris?")
            Path("recordings").write_text("made while the test ran")
        """
    )
    result = project.runpytest("--anagrapheus=record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: *test_advice.jsonl: its folder *recordings/test_app"
            " cannot be created or written (*"
        ]
    )


# A mount namespace where the recordings folder is a read-only bind mount: as root nothing else is read-only.
_READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


_RECORD = ("--anagrapheus=record", "-p", "no:cacheprovider")


def test_a_read_only_recordings_folder_is_a_typed_error_naming_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    folder = project.path / "recordings"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            output = project.runpytest("--anagrapheus=record").stdout.str()
        finally:
            folder.chmod(0o755)
    else:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", _READ_ONLY, "sh", str(folder), "true"], check=False)
        if probe.returncode != 0:
            pytest.skip("needs a user that is not root, or a mount namespace (unshare -m) to mount a folder read-only")
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", _READ_ONLY, "sh", str(folder), sys.executable, "-m", "pytest", *_RECORD],
            cwd=project.path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = done.stdout
    assert (
        "test_app.py::test_advice: recordings/test_app/test_advice.jsonl: its folder"
        f" {folder}/test_app cannot be created or written ({folder} is read-only): make the folder writable,"
        " or record to a path in a writable folder"
    ) in output, output
    assert "1 error" in output
    assert calls(project) == []  # refused before anything was paid for


TEST_SHARED = """
import pytest

import app


@pytest.mark.anagrapheus(path="{path}")
def test_{name}():
    assert "umbrella" in app.advise("Do I need an umbrella in {city}?")
"""


def test_two_tests_recording_to_one_file_are_refused(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_paris=TEST_SHARED.format(path="../shared.jsonl", name="paris", city="Paris"),
        test_lyon=TEST_SHARED.format(path="../shared.jsonl", name="lyon", city="Lyon"),
    )
    (project.path / "sub").mkdir()
    for name in ("test_paris.py", "test_lyon.py"):
        (project.path / name).rename(project.path / "sub" / name)
    result = project.runpytest("--anagrapheus=record")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "sub/test_paris.py::test_paris: sub/test_paris.py::test_paris would write"
            " sub/../shared.jsonl, which sub/test_lyon.py::test_lyon records to in this session:"
            " the last to finish would replace the other's pins. Give each test its own path*"
        ]
    )
    # The refused test drew nothing; the first test's pins are in the file and replay.
    assert calls(project) == ["model", "tool", "model"]
    project.runpytest("sub/test_lyon.py").assert_outcomes(passed=1)
    assert calls(project) == []

    # One test run twice in a session (a rerun) records its own file again.
    rerun = project.runpytest("sub/test_lyon.py", "sub/test_lyon.py", "--keep-duplicates", "--anagrapheus=record")
    rerun.assert_outcomes(passed=2)

    # A later session may record the other test there: the claim lasts one session.
    project.runpytest("sub/test_paris.py", "--anagrapheus=record").assert_outcomes(passed=1)
    project.runpytest("sub/test_paris.py").assert_outcomes(passed=1)


def test_two_xdist_workers_recording_to_one_file_are_refused(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = '@pytest.mark.xdist_group("{group}")\n@pytest.mark.anagrapheus'
    for module, city in (("test_paris", "Paris"), ("test_lyon", "Lyon")):
        source = TEST_SHARED.format(path="shared.jsonl", name=city.lower(), city=city)
        project.makepyfile(**{module: source.replace("@pytest.mark.anagrapheus", marker.format(group=city))})
    # Each test says which worker ran it, before its fixtures are set up (where the refusal comes).
    project.makeconftest(
        """
        import os
        from pathlib import Path


        def pytest_runtest_setup(item):
            Path(f"worker-{item.name}").write_text(os.environ.get("PYTEST_XDIST_WORKER", ""))
        """
    )
    # A temporary folder of its own: the claims folder it must leave behind is looked for there, where no other
    # session (another xdist worker of this suite, say) makes one meanwhile.
    private = project.mkdir("tmp")
    monkeypatch.setenv("TMPDIR", str(private))
    result = project.runpytest_subprocess("-n", "2", "--dist=loadgroup", "--anagrapheus=record")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["test_*.py::test_*: test_*.py::test_* would write shared.jsonl, which test_*.py::test_* records to in this*"]
    )
    assert (project.path / "worker-test_paris").read_text() != (project.path / "worker-test_lyon").read_text()
    header = json.loads((project.path / "shared.jsonl").read_text().splitlines()[0])
    kept = header["description"].rsplit(" of ", 1)[1]
    project.runpytest(kept).assert_outcomes(passed=1)
    assert not list(private.glob("anagrapheus-claims-*"))


POLICIES = """
from anagrapheus.provider import SemanticCallPolicy


class Loose(SemanticCallPolicy):
    pass


class Strict(SemanticCallPolicy):
    name = "strict-in-house"
    version = 3
"""


def test_a_recording_is_stamped_with_the_markers_policy_and_refused_under_another(project: pytest.Pytester) -> None:
    project.makepyfile(policies=POLICIES)
    marked = TEST_ADVICE.replace("anagrapheus\n", "anagrapheus(policy={policy})\n")
    project.makepyfile(test_app=marked.format(policy='"policies:Loose"'))
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    header = json.loads((project.path / RECORDING).read_text().splitlines()[0])
    assert (header["provenance"]["call_policy"], header["provenance"]["call_policy_version"]) == (
        "policies.Loose",
        1,
    )
    project.runpytest().assert_outcomes(passed=1)

    for policy, named in (("None", "'semantic' v1"), ('"policies:Strict"', "'strict-in-house' v3")):
        project.makepyfile(test_app=marked.format(policy=policy))
        result = project.runpytest()
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(
            [
                "test_app.py::test_advice: *test_advice.jsonl:1: recorded under call policy 'policies.Loose' v1,"
                f" but loaded for {named}: its model-call keys would all miss.*"
                "re-record it with `pytest test_app.py::test_advice --anagrapheus=record`*"
            ]
        )
    assert calls(project) == ["model", "tool", "model"]  # only the first recording reached them

    # The command the refusal prints records under the new policy: every pin that still matches answers (Strict
    # keys what the default keys, so here all of them), the rest would be drawn, and the file is stamped anew.
    project.runpytest("test_app.py::test_advice", "--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == []
    header = json.loads((project.path / RECORDING).read_text().splitlines()[0])
    assert header["provenance"]["call_policy"] == "strict-in-house"
    project.runpytest().assert_outcomes(passed=1)
