"""The pytest plugin, run through pytester on a small application whose agent is built inside its own code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anagrapheus.testing.miss import read_miss

pytest_plugins = ["pytester"]

# The application under test: it builds its agent inside `advise`, where no test can reach it, and its
# model and tool count every call in calls.log, so that runs in other processes (xdist) are counted too.
APP = '''
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

CALLS = Path(__file__).with_name("calls.log")


def _count(what):
    with CALLS.open("a") as log:
        log.write(what + "\\n")


def forecast(city: str) -> str:
    """Read tomorrow's forecast for a city."""
    _count("tool")
    return f"rain in {city}"


def _answer(messages, info):
    _count("model")
    returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if not returns:
        city = "Lyon" if "Lyon" in str(messages[0].parts[-1].content) else "Paris"
        return ModelResponse(parts=[ToolCallPart("forecast", {"city": city})])
    return ModelResponse(parts=[TextPart(f"Pack an umbrella: {returns[0].content}.")])


def build_agent():
    return Agent(FunctionModel(_answer, model_name="scripted-weather"), tools=[forecast])


def advise(question: str) -> str:
    return build_agent().run_sync(question).output


async def advise_async(question: str) -> str:
    return (await build_agent().run(question)).output
'''

# Hypothesis and inline-snapshot are re-imported by every in-process run (seconds each); these runs need neither.
PYPROJECT = """
[tool.pytest.ini_options]
pythonpath = ["."]
addopts = "--strict-markers -p no:cacheprovider -p no:hypothesispytest -p no:inline_snapshot"
asyncio_default_fixture_loop_scope = "function"
"""

TEST_ADVICE = """
import pytest

import app


@pytest.mark.anagrapheus
def test_advice():
    assert "umbrella" in app.advise("Do I need an umbrella in Paris?")
"""

RECORDING = Path("recordings/test_app/test_advice.jsonl")


# Each test says which environment it runs in.
pytestmark = pytest.mark.usefixtures("outside_ci")


def calls(pytester: pytest.Pytester) -> list[str]:
    """Return and forget the calls the application's model and tool received."""
    log = pytester.path / "calls.log"
    if not log.exists():
        return []
    seen = log.read_text().split()
    log.unlink()
    return seen


def test_record_once_then_replay_reaches_nothing(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == ["model", "tool", "model"]
    recorded = (project.path / RECORDING).read_bytes()

    replayed = project.runpytest()
    replayed.assert_outcomes(passed=1)
    assert calls(project) == []
    # The summary says what the replay spared: the recording's two model calls, their tokens, their (absent) price.
    replayed.stdout.fnmatch_lines(
        [
            # The tokens are pydantic-ai's estimate for a FunctionModel, which may move between its releases.
            "anagrapheus: 1 test(s) replayed 2 model call(s) from their recordings: * input and * output tokens"
            " not drawn; cost not spent: unpriced (scripted-weather)"
        ]
    )

    # Recording an unchanged test again answers every call from the file and writes the same bytes.
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == []
    assert (project.path / RECORDING).read_bytes() == recorded
    # Sealed, as every recording written is (issue #41): an answer edited by hand fails the replay at its line.
    from anagrapheus.timeline import read_recording

    assert read_recording(project.path / RECORDING).seal is not None
    lines = recorded.decode().splitlines(keepends=True)
    edited = next(n for n, line in enumerate(lines) if '"kind":"model_call"' in line)
    lines[edited] = lines[edited].replace('"kind":"model_call"', '"attempts":3,"failed":false,"kind":"model_call"', 1)
    (project.path / RECORDING).write_text("".join(lines), encoding="utf-8")
    project.runpytest().stdout.fnmatch_lines(
        [f"*test_advice.jsonl:{edited + 1}: this line no longer matches the seal*"]
    )


def test_missing_recording_fails_with_the_command_that_creates_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no recording at *recordings/test_app/test_advice.jsonl; create it with:"
            " pytest test_app.py::test_advice --anagrapheus=record*"
        ]
    )
    assert calls(project) == []

    # A recording that cannot be read is an error naming the file and the line, not a replay.
    (project.path / RECORDING).parent.mkdir(parents=True)
    (project.path / RECORDING).write_text('{"format": "something else"}\n')
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_advice.jsonl:1: foreign file*"])
    assert calls(project) == []


def test_a_reworded_prompt_fails_saying_what_moved_and_how_to_record_again(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    recorded = (project.path / RECORDING).read_bytes()
    calls(project)

    project.makepyfile(test_app=TEST_ADVICE.replace("Do I need", "Should I take"))
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice left its recording",
            "  recording: recordings/test_app/test_advice.jsonl",
            "  missed:    a model_call after 2 hit(s)",  # the run's id and its first request's times
            "  moved:     messages[[]0[]]",
            "  re-record: pytest test_app.py::test_advice --anagrapheus=record",
            "  see it:    anagrapheus view --miss recordings/test_app/test_advice.jsonl.miss.json",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert calls(project) == []
    assert (project.path / RECORDING).read_bytes() == recorded
    # The miss is kept beside the recording, naming it, for a page that shows it.
    divergence, named = read_miss(project.path / "recordings/test_app/test_advice.jsonl.miss.json")
    assert named == str(project.path / RECORDING)
    assert divergence.moved == ("messages[0]",)

    # The command it prints records the new run, after which replay passes again. The tool call is asked
    # with the same arguments as before, so record mode answers it from the recording.
    project.runpytest("test_app.py::test_advice", "--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == ["model", "model"]
    project.runpytest().assert_outcomes(passed=1)


def test_a_miss_the_application_swallows_still_fails(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    project.makepyfile(
        test_app="""
        import pytest

        import app


        @pytest.mark.anagrapheus
        def test_advice():
            try:
                app.advise("Should I take an umbrella in Paris?")
            except Exception:
                pass  # an application that falls back on any error
        """
    )
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*left its recording", "*moved:     messages*"])


TEST_TWO_QUESTIONS = """
import pytest

import app

QUESTIONS = ["Do I need an umbrella in Paris?", "Do I need an umbrella in Lyon?"]


@pytest.mark.anagrapheus{marker}
def test_advice():
    for question in QUESTIONS[:{asked}]:
        assert "umbrella" in app.advise(question)
"""


def test_an_unused_pin_fails_unless_allowed(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_TWO_QUESTIONS.format(marker="", asked=2))
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    calls(project)

    project.makepyfile(test_app=TEST_TWO_QUESTIONS.format(marker="", asked=1))
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: 6 pin(s) in *test_advice.jsonl were never asked for"
            " (model_call, run_clock, run_id, tool_call): the recording is stale",
            "  re-record: pytest test_app.py::test_advice --anagrapheus=record",
        ]
    )

    project.makepyfile(test_app=TEST_TWO_QUESTIONS.format(marker="(allow_unused=True)", asked=1))
    project.runpytest().assert_outcomes(passed=1)

    project.makepyfile(test_app=TEST_TWO_QUESTIONS.format(marker="", asked=1))
    project.makefile(".toml", pyproject=PYPROJECT + "\n[tool.anagrapheus]\nallow_unused = true\n")
    project.runpytest().assert_outcomes(passed=1)
    assert calls(project) == []

    # Record mode keeps only the pins the test used, so the recording is fresh again.
    project.makefile(".toml", pyproject=PYPROJECT)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    project.runpytest().assert_outcomes(passed=1)
    assert calls(project) == []


TEST_ESCAPES = """
import socket
import threading

import pytest
from pydantic_ai import direct, models
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart
from pydantic_ai.models.test import TestModel

from anagrapheus.errors import RemoteConnectionRefused


class ProviderModel(TestModel):
    # A real provider's model checks ALLOW_MODEL_REQUESTS before it sends anything.
    async def request(self, messages, model_settings, model_request_parameters):
        models.check_allow_model_requests()
        return ModelResponse(parts=[TextPart("live")])


# None of these runs an agent, so they share one empty recording.
pytestmark = pytest.mark.anagrapheus(path="recordings/empty.jsonl")


def test_nothing():
    pass


def test_model_request_outside_the_pins():
    direct.model_request_sync(ProviderModel(), [ModelRequest.user_text_prompt("hi")])


def test_socket_to_a_remote_host():
    with pytest.raises(RemoteConnectionRefused):
        socket.create_connection(("203.0.113.7", 443), timeout=1)
    raise AssertionError("refused")


def test_loopback_stays_reachable():
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: server.accept()[0].close(), daemon=True).start()
    socket.create_connection(server.getsockname(), timeout=5).close()
    server.close()
"""


def test_a_live_request_under_replay_is_refused(project: pytest.Pytester) -> None:
    project.makepyfile(test_escapes=TEST_ESCAPES)
    project.runpytest("test_escapes.py::test_nothing", "--anagrapheus=record").assert_outcomes(passed=1)
    result = project.runpytest()
    result.assert_outcomes(failed=2, passed=2)
    result.stdout.fnmatch_lines(["*Model requests are not allowed, since ALLOW_MODEL_REQUESTS is False*"])
    result.stdout.fnmatch_lines(["*AssertionError: refused*"])


def test_record_is_refused_under_ci_unless_forced(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    monkeypatch.setenv("CI", "true")
    for mode in ("record", "rewrite"):
        result = project.runpytest(f"--anagrapheus={mode}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--anagrapheus={mode} is refused because CI is set*--anagrapheus-force*"])
    monkeypatch.setenv("ANAGRAPHEUS_MODE", "record")
    assert project.runpytest().ret == pytest.ExitCode.USAGE_ERROR
    assert calls(project) == []
    assert not (project.path / RECORDING).exists()

    project.runpytest("--anagrapheus-force").assert_outcomes(passed=1)
    assert (project.path / RECORDING).exists()
    monkeypatch.delenv("ANAGRAPHEUS_MODE")
    project.runpytest().assert_outcomes(passed=1)


def test_parametrised_tests_get_one_file_each(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_cities="""
        import pytest

        import app

        pytestmark = pytest.mark.anagrapheus


        @pytest.mark.parametrize("city", ["Paris", "Lyon", "Lyon/Paris?"])
        def test_advice(city):
            assert "umbrella" in app.advise(f"Do I need an umbrella in {city}?")


        class TestTrip:
            def test_advice(self):
                assert "umbrella" in app.advise("Do I need an umbrella in Paris?")
        """
    )
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=4)
    files = {path.name for path in (project.path / "recordings/test_cities").iterdir()}
    lossy = {name for name in files if name.startswith("test_advice.Lyon_Paris_-") and name.endswith(".jsonl")}
    assert len(lossy) == 1
    assert files - lossy == {"TestTrip.test_advice.jsonl", "test_advice.Lyon.jsonl", "test_advice.Paris.jsonl"}
    calls(project)
    project.runpytest().assert_outcomes(passed=4)
    assert calls(project) == []


def test_a_failing_test_writes_nothing(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE.replace('"umbrella" in', '"sunscreen" in'))
    project.runpytest("--anagrapheus=record").assert_outcomes(failed=1)
    assert calls(project) == ["model", "tool", "model"]
    assert not (project.path / "recordings").exists()

    # Nor does a failing re-record touch the recording that is there.
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    recorded = (project.path / RECORDING).read_bytes()
    project.makepyfile(test_app=TEST_ADVICE.replace("Do I need", "Should I take").replace('"umbrella" in', '"x" in'))
    project.runpytest("--anagrapheus=record").assert_outcomes(failed=1)
    assert (project.path / RECORDING).read_bytes() == recorded


def test_rewrite_draws_everything_and_live_records_nothing(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    recorded = (project.path / RECORDING).read_bytes()
    calls(project)
    project.runpytest("--anagrapheus=rewrite").assert_outcomes(passed=1)
    assert calls(project) == ["model", "tool", "model"]
    (project.path / RECORDING).unlink()
    project.runpytest("--anagrapheus=live").assert_outcomes(passed=1)
    assert calls(project) == ["model", "tool", "model"]
    assert not (project.path / RECORDING).exists()
    assert recorded


def test_async_tests_under_anyio_and_pytest_asyncio(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_async="""
        import pytest

        import app


        @pytest.fixture
        def anyio_backend():
            return "asyncio"


        @pytest.mark.anyio
        @pytest.mark.anagrapheus
        async def test_under_anyio():
            assert "umbrella" in await app.advise_async("Do I need an umbrella in Paris?")


        @pytest.mark.asyncio
        @pytest.mark.anagrapheus
        async def test_under_pytest_asyncio():
            assert "umbrella" in await app.advise_async("Do I need an umbrella in Lyon?")
        """
    )
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=2)
    assert len(calls(project)) == 6
    project.runpytest().assert_outcomes(passed=2)
    assert calls(project) == []


def test_the_fixture_gives_the_capability_resolver_and_path(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_explicit="""
        from pydantic_ai import Agent
        from pydantic_ai.models.test import TestModel

        from anagrapheus.timeline import PinResolver

        import app


        def test_explicit(anagrapheus):
            assert anagrapheus.path.name == "test_explicit.jsonl"
            assert isinstance(anagrapheus.resolver, PinResolver)
            # Given to an agent explicitly, it pins once: the ambient copy is not added a second time.
            Agent(TestModel(), capabilities=[anagrapheus.capability]).run_sync("hello")
            Agent(TestModel()).run_sync("hello", capabilities=[anagrapheus.capability])
            assert "umbrella" in app.advise("Do I need an umbrella in Paris?")
        """
    )
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    project.runpytest().assert_outcomes(passed=1)
    assert calls(project) == ["model", "tool", "model"]


def test_marker_fixture_and_pyproject_set_the_path_and_policy(project: pytest.Pytester) -> None:
    project.makefile(
        ".toml",
        pyproject=PYPROJECT + '\n[tool.anagrapheus]\npath = "pins/{module}/{name}.jsonl"\npolicy = "policies:Loose"\n',
    )
    project.makepyfile(
        policies="""
        from anagrapheus.provider import SemanticCallPolicy

        USED = []


        class Loose(SemanticCallPolicy):
            def __init__(self):
                USED.append(self)
                super().__init__()
        """
    )
    project.makepyfile(
        test_paths="""
        import pytest

        import app
        import policies

        pytestmark = pytest.mark.anagrapheus(path="module-level/{name}.jsonl")


        def test_from_pyproject(anagrapheus):
            pass


        @pytest.mark.anagrapheus(path="here.jsonl")
        def test_from_marker(anagrapheus):
            assert anagrapheus.path.name == "here.jsonl"
            assert policies.USED
        """
    )
    project.makeconftest(
        """
        import pytest

        @pytest.fixture
        def anagrapheus_config():
            return {"allow_unused": True}
        """
    )
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=2)
    assert (project.path / "here.jsonl").exists()
    assert (project.path / "module-level/test_from_pyproject.jsonl").exists()

    project.makepyfile(test_paths=TEST_ADVICE.replace("test_advice", "test_from_pyproject"))
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert (project.path / "pins/test_paths/test_from_pyproject.jsonl").exists()


def test_an_unknown_mode_or_marker_keyword_is_refused(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_app=TEST_ADVICE.replace("anagrapheus\n", "anagrapheus(patth='x')\n"))
    monkeypatch.setenv("ANAGRAPHEUS_MODE", "recrod")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ANAGRAPHEUS_MODE='recrod' is not a mode*"])
    monkeypatch.delenv("ANAGRAPHEUS_MODE")
    result = project.runpytest()
    result.stdout.fnmatch_lines(["*takes only*allow_unused*path*policy*"])
    for marker, complaint in (
        ("path='{test}.jsonl'", "*may use only {test_dir}, {module} and {name}*"),
        ("allow_unused='no'", "*allow_unused must be true or false, not 'no'*"),
        ("policy='nowhere:Policy'", "*: policy nowhere:Policy: cannot import nowhere (No module named 'nowhere')*"),
    ):
        project.makepyfile(test_app=TEST_ADVICE.replace("anagrapheus\n", f"anagrapheus({marker})\n"))
        project.runpytest().stdout.fnmatch_lines([complaint])
    assert calls(project) == []


def test_under_xdist_each_worker_writes_its_own_tests_files(project: pytest.Pytester) -> None:
    for module in ("test_north", "test_south"):
        project.makepyfile(
            **{
                module: """
                import pytest

                import app

                pytestmark = pytest.mark.anagrapheus


                @pytest.mark.parametrize("city", ["Paris", "Lyon"])
                def test_advice(city):
                    assert city in app.advise(f"Do I need an umbrella in {city}?")
                """
            }
        )
    project.runpytest_subprocess("-n", "2", "--anagrapheus=record").assert_outcomes(passed=4)
    assert len(calls(project)) == 12
    written = sorted(str(path.relative_to(project.path)) for path in project.path.glob("recordings/*/*.jsonl"))
    assert written == [
        f"recordings/{module}/test_advice.{city}.jsonl"
        for module in ("test_north", "test_south")
        for city in ("Lyon", "Paris")
    ]
    assert not list(project.path.glob("recordings/**/.*.tmp"))
    project.runpytest().assert_outcomes(passed=4)
    assert calls(project) == []
    # What the workers' replays spared reaches the controller's summary.
    replayed = project.runpytest_subprocess("-n", "2")
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(["anagrapheus: 4 test(s) replayed 8 model call(s) from their recordings: *"])


def test_recording_names_are_file_safe_and_distinct() -> None:
    from anagrapheus.testing.plugin import recording_name

    assert recording_name("tests/test_app.py::test_advice") == "test_advice"
    assert recording_name("tests/test_app.py::TestTrip::test_advice[uk-1]") == "TestTrip.test_advice.uk-1"
    lossy = {recording_name(f"t.py::test[{param}]") for param in ("a/b", "a:b", "a b", "a_b")}
    assert len(lossy) == 4
    assert all(name.replace(".", "").replace("-", "").replace("_", "").isalnum() for name in lossy)
    assert len(recording_name("t.py::test[" + "x" * 500 + "]")) <= 130


def test_every_agent_run_reaches_agents_built_before_the_scope() -> None:
    from dataclasses import dataclass, field
    from typing import Any

    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models import Model
    from pydantic_ai.models.test import TestModel

    from anagrapheus.errors import UsageError
    from anagrapheus.provider.every_run import every_agent_run

    @dataclass
    class Spy(AbstractCapability[Any]):
        seen: list[str] = field(default_factory=list[str])

        def get_wrapper_model(self, model: Model) -> Model | None:
            self.seen.append(model.model_name)
            return None

    agent = Agent(TestModel())
    spy = Spy()
    with every_agent_run(spy):
        agent.run_sync("inside")
        with pytest.raises(UsageError, match="do not nest"), every_agent_run(Spy()):
            pass
    agent.run_sync("outside")
    assert spy.seen == ["test"]


def test_loopback_only_refuses_remote_hosts_and_restores_sockets() -> None:
    import socket

    from anagrapheus.errors import RemoteConnectionRefused
    from anagrapheus.testing.network import loopback_only

    connect = socket.socket.connect
    with loopback_only():
        for address in (("203.0.113.7", 80), ("example.com", 443), ("2001:db8::1", 80, 0, 0)):
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            with socket.socket(family) as sock, pytest.raises(RemoteConnectionRefused, match="loopback"):
                sock.connect(address)
        with socket.create_server(("127.0.0.1", 0)) as server:
            socket.create_connection(server.getsockname(), timeout=5).close()
    assert socket.socket.connect is connect


def test_replay_names_the_pins_never_asked_for(tmp_path: Path) -> None:
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types)
        for key, kind in (("k1", "model_call"), ("k2", "tool_call"), ("k3", "model_call")):
            ledger.resolve(key, kind=kind, effect=lambda: 1, interpret=lambda raw: raw)
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)
    assert replay.unused() == {"k1": "model_call", "k2": "tool_call", "k3": "model_call"}
    replay.resolve("k2", kind="tool_call", effect=lambda: 2, interpret=lambda raw: raw)
    replay.resolve("k2", kind="tool_call", effect=lambda: 2, interpret=lambda raw: raw)
    assert replay.unused() == {"k1": "model_call", "k3": "model_call"}


def test_the_how_to_loop_runs_as_written(pytester: pytest.Pytester) -> None:
    from tests.docs.test_docs import ROOT, blocks_of

    blocks = blocks_of(ROOT / "docs/how-to/test-with-pytest.md")
    titled = {b.info.split('title="')[1].rstrip('"'): b.code for b in blocks if 'title="' in b.info}
    shown = [b.code.splitlines() for b in blocks if b.info == "text"]
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.makepyfile(weather=titled["weather.py"], test_weather=titled["test_weather.py"])

    # Mark, then the first run says how to record.
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(shown[0])
    command = shown[0][0].rsplit("create it with: ", 1)[1].split()
    assert command[0] == "pytest"
    pytester.runpytest(*command[1:]).assert_outcomes(passed=1)
    assert (pytester.path / "recordings/test_weather/test_umbrella.jsonl").exists()

    # Replay reaches neither the model nor the tool.
    replayed = (
        titled["test_weather.py"]
        + '\n\ndef test_zz_reached():\n    assert weather.reached == {"model": 0, "tool": 0}\n'
    )
    pytester.makepyfile(test_weather=replayed)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    # What the replay spared (the tokens, pydantic-ai's estimate for a FunctionModel, may move between its releases).
    spared = [re.sub(r"\d+ (input|output)", r"* \1", line) for line in shown[1]]
    result.stdout.fnmatch_lines(spared)

    # A reworded question fails with the account the page shows, and its command records the change.
    reworded = titled["test_weather.py"].replace("Do I need an umbrella", "Should I take an umbrella")
    assert reworded != titled["test_weather.py"]
    pytester.makepyfile(test_weather=reworded)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([line.replace("[", "[[]") for line in shown[2]])
    rerecord = next(line for line in shown[2] if "re-record: " in line)
    pytester.runpytest(*rerecord.split("re-record: ", 1)[1].split()[1:]).assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)


RETRYING_TEST = """
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

import app

dropped = {"once": True}


def radio(to: str) -> str:
    \"\"\"Call someone on the radio.\"\"\"
    app._count("radio")
    if dropped.pop("once", False):
        raise ConnectionError("the radio link dropped")
    return f"{to} acknowledged"


def _answer(messages, info):
    app._count("model")
    if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
        return ModelResponse(parts=[TextPart("berth 4")])
    return ModelResponse(parts=[ToolCallPart("forecast", {"city": "Brest"}), ToolCallPart("radio", {"to": "pilot"})])


@pytest.mark.anagrapheus
def test_booking_retried():
    agent = Agent(FunctionModel(_answer, model_name="scripted-harbour"), tools=[app.forecast, radio])
    with Agent.parallel_tool_call_execution_mode("sequential"):
        with pytest.raises(ConnectionError):
            agent.run_sync("Book a berth")
        assert agent.run_sync("Book a berth").output == "berth 4"
"""


def test_a_retry_of_a_failed_run_takes_the_same_place_recorded_and_replayed(project: pytest.Pytester) -> None:
    # The retry rule (#40) under the plugin: the retry resumes the failed run live; a replay takes the same places.
    project.makepyfile(test_retry=RETRYING_TEST)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    # The tool and the radio run one after the other. Run at once, the radio's failure may cancel the tool call
    # while it runs: its result is pinned (test_capability_cancelled.py), but that failed run's last request then
    # holds no tool return while its replay, answered from the pin at once, holds one, so that request's times are
    # asked under another key and the replay calls the recording stale (docs/explanation/design.md).
    assert calls(project) == ["model", "tool", "radio", "radio", "model"]
    recorded = (project.path / "recordings/test_retry/test_booking_retried.jsonl").read_bytes()
    project.runpytest().assert_outcomes(passed=1)
    assert calls(project) == []
    # Recorded again unchanged: every call answered from the file, the same bytes written.
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == []
    assert (project.path / "recordings/test_retry/test_booking_retried.jsonl").read_bytes() == recorded


def test_drift_asks_the_model_live_and_fails_where_it_now_answers_otherwise(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    calls(project)
    recorded = (project.path / RECORDING).read_bytes()

    # Unchanged: the model is asked live, the tool answered from the recording, and the test passes.
    project.runpytest("--anagrapheus=drift").assert_outcomes(passed=1)
    assert calls(project) == ["model", "model"]

    # The provider now words its answer otherwise: the test fails naming the call, and the file is as it was.
    project.makepyfile(app=APP.replace("Pack an umbrella", "Bring an umbrella"))
    result = project.runpytest("--anagrapheus=drift")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: the provider now answers 1 model call(s) of"
            " recordings/test_app/test_advice.jsonl otherwise:",
            "  model_call #2: drifted: result.parts[0].content: 'Pack an umbrella: rain in Paris.'"
            " != 'Bring an umbrella: rain in Paris.'",
            "  re-record: pytest test_app.py::test_advice --anagrapheus=record",
        ]
    )
    assert calls(project) == ["model", "model"]
    assert (project.path / RECORDING).read_bytes() == recorded
    # Drift writes nothing, so CI may run it (record may not).
    monkeypatch.setenv("CI", "true")
    project.runpytest("--anagrapheus=drift").assert_outcomes(failed=1)
    assert project.runpytest("--anagrapheus=record").ret == pytest.ExitCode.USAGE_ERROR


def test_max_age_fails_a_replay_of_a_recording_older_than_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=TEST_ADVICE)
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    calls(project)

    # Recorded a moment ago (the instants its run was given): within thirty days, and past zero.
    project.makepyfile(test_app=TEST_ADVICE.replace("anagrapheus\n", "anagrapheus(max_age=30)\n"))
    project.runpytest().assert_outcomes(passed=1)
    project.makepyfile(test_app=TEST_ADVICE.replace("anagrapheus\n", "anagrapheus(max_age=timedelta(0))\n"))
    (project.path / "test_app.py").write_text(
        "from datetime import timedelta\n" + (project.path / "test_app.py").read_text()
    )
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "test_app.py::test_advice: recordings/test_app/test_advice.jsonl: older than max_age (0 days):"
            " * recorded 20* (0 days ago); record it again with `pytest test_app.py::test_advice --anagrapheus=record`"
        ]
    )
    assert calls(project) == []
    project.makepyfile(test_app=TEST_ADVICE.replace("anagrapheus\n", "anagrapheus(max_age='old')\n"))
    assert "max_age takes a timedelta or a number of days, not 'old'" in project.runpytest().stdout.str()
