"""The determinism guard, run through pytester on a small application, and its manifest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import ManifestError, UsageError
from anagrapheus.testing.entropy import EntropyManifest, guarded, load_manifest, test_seed
from tests.testing.test_plugin import APP, PYPROJECT

pytest_plugins = ["pytester"]


# These samples record, as a workstation does.
pytestmark = pytest.mark.usefixtures("outside_ci")


MANIFEST = """
[clock]
frozen_at = 2026-01-01T00:00:00Z

[entropy]
seed = 20261016

[io]
declared_reads = ["fixtures/*.json"]
"""

# The sample of the issue: a clock read, a set iterated, an uncommitted fixture and a socket, in user code.
SAMPLE = """
import json
import socket
from datetime import datetime
from pathlib import Path

import pytest

import app

ROOT = Path(__file__).parent


def ping():
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=0.5).close()
    except OSError:
        pass


@pytest.mark.anagrapheus
def test_order():
    stamp = datetime.now()
    orders = json.loads((ROOT / "fixtures" / "orders.json").read_text())
    ping()
    first = ORDER(set(orders["cities"]))[0]
    assert "umbrella" in app.advise(f"Do I need an umbrella in {first}? ({stamp:%Y})")
"""

CITIES = ["Paris", "Lyon", "Nice", "Brest", "Arles"]


def sample(pytester: pytest.Pytester, *, order: str, manifest: str = "") -> None:
    pytester.makepyfile(app=APP, test_sample=SAMPLE.replace("ORDER", order))
    pytester.makefile(".toml", pyproject=PYPROJECT + manifest)
    (pytester.path / "fixtures").mkdir(exist_ok=True)
    (pytester.path / "fixtures" / "orders.json").write_text(json.dumps({"cities": CITIES}))


def two_hash_seeds() -> tuple[str, str]:
    """Two values of PYTHONHASHSEED under which the sample's set of cities starts with a different city."""
    firsts: dict[str, str] = {}
    for seed in map(str, range(1, 30)):
        first = subprocess.run(
            [sys.executable, "-c", f"print(list(set({CITIES!r}))[0])"],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for other, seen in firsts.items():
            if seen != first:
                return other, seed
        firsts[seed] = first
    raise AssertionError("every hash seed put the same city first")  # pragma: no cover - 29 seeds, 5 cities


@pytest.fixture
def hash_seeds() -> tuple[str, str]:
    return two_hash_seeds()


def test_the_sample_fails_once_listing_each_undeclared_source_with_its_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, hash_seeds: tuple[str, str]
) -> None:
    sample(pytester, order="list")
    monkeypatch.setenv("PYTHONHASHSEED", hash_seeds[0])
    pytester.runpytest_subprocess("--anagrapheus=record").assert_outcomes(passed=1)

    # Unguarded, under the same hash seed, the test passes: every source answered as it did when recorded.
    pytester.runpytest_subprocess().assert_outcomes(passed=1)

    # Guarded, under another hash seed: one failure, the recording's divergence (the set's order moved the
    # prompt), and the set's order, the clock, the fixture and the socket each with its file and line.
    monkeypatch.setenv("PYTHONHASHSEED", hash_seeds[1])
    result = pytester.runpytest_subprocess("--anagrapheus-guard")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_sample.py::test_order left its recording",
            "*missed:    a model_call after * hit(s)",
            "*moved:     messages[[]0]",
            "*test_sample.py::test_order touched 4 undeclared source(s) of nondeterminism:",
            "*order      list() of a set  at test_sample.py:25 (in test_order)",
            "*clock      datetime.now()  at test_sample.py:22 (in test_order)",
            "*read       fixtures/orders.json  at test_sample.py:23 (in test_order)",
            "*network    connect ('127.0.0.1', 9)  at test_sample.py:15 (in ping)",
            "*declare them in *",
        ]
    )
    # The agent's own clock, ids and the recording it reads are pydantic-ai's and anagrapheus's: not the test's.
    assert result.stdout.str().count("at test_sample.py") == 4


def test_declared_and_sorted_the_sample_passes_under_two_hash_seeds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, hash_seeds: tuple[str, str]
) -> None:
    manifest = """
[tool.anagrapheus.entropy.clock]
frozen_at = 2026-01-01T00:00:00Z

[tool.anagrapheus.entropy.io]
allow_network = true
declared_reads = ["fixtures/*.json"]
"""
    sample(pytester, order="sorted", manifest=manifest)
    monkeypatch.setenv("PYTHONHASHSEED", hash_seeds[0])
    pytester.runpytest_subprocess("--anagrapheus=record", "--anagrapheus-guard").assert_outcomes(passed=1)
    for hash_seed in hash_seeds:
        monkeypatch.setenv("PYTHONHASHSEED", hash_seed)
        pytester.runpytest_subprocess("--anagrapheus-guard").assert_outcomes(passed=1)


def test_the_guard_is_armed_only_in_a_marked_test_body(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_scope="""
        import time

        import pytest


        @pytest.fixture
        def started():
            return time.time()


        def test_unmarked():
            time.time()


        @pytest.mark.anagrapheus(path="none.jsonl")
        def test_marked(started):
            pass


        @pytest.mark.anagrapheus_guard
        def test_guarded_unpinned():
            time.time()
        """
    )
    pytester.makefile(".toml", pyproject=PYPROJECT)
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*clock      time.time()  at test_scope.py:22 (in test_guarded_unpinned)"])


def test_the_ini_setting_turns_the_guard_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_ini="""
        import time

        import pytest


        @pytest.mark.anagrapheus
        def test_marked():
            time.time()
        """
    )
    pytester.makefile(".toml", pyproject=PYPROJECT + "anagrapheus_guard = true\n")
    result = pytester.runpytest("--anagrapheus=live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*clock      time.time()  at test_ini.py:8 (in test_marked)"])


CLOCKS = """
import time
import datetime as dt
from datetime import date, datetime, timezone
from time import monotonic

import pytest


def local_import_now():
    import datetime  # a name bound inside a function: not covered
    return datetime.datetime.now(datetime.timezone.utc)


@pytest.mark.anagrapheus
def test_clock():
    assert datetime.now() == datetime(2001, 1, 1, 0, 0)
    assert datetime.now(timezone.utc) == datetime(2001, 1, 1, 0, 0, 1, tzinfo=timezone.utc)
    assert dt.datetime.utcnow() == datetime(2001, 1, 1, 0, 0, 2)
    assert time.time() == 978307203.0
    assert time.time_ns() == 978307204 * 10**9
    assert dt.date.today() == date(2001, 1, 1)
    assert datetime.today() == datetime(2001, 1, 1, 0, 0, 6)
    assert time.gmtime().tm_year == 2001
    assert time.gmtime(0).tm_year == 1970
    assert isinstance(dt.datetime(2020, 1, 1), datetime) and type(datetime(2020, 1, 1)) is dt.datetime.__mro__[1]
    assert isinstance(local_import_now(), datetime) and issubclass(dt.datetime, datetime)
    assert local_import_now().year != 2001
    # A deadline loop on a stepped monotonic ends.
    deadline = monotonic() + 5
    reads = 0
    while monotonic() < deadline:
        reads += 1
    assert reads == 4
    globals()["date"] = None  # a name the body rebinds keeps what it was given
"""


def test_the_declared_clock_is_frozen_stepped_and_monotonic_advances(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_clocks=CLOCKS)
    manifest = """
[tool.anagrapheus.entropy.clock]
frozen_at = "2001-01-01T00:00:00Z"
step = 1.0
monotonic_step = 1.0
"""
    pytester.makefile(".toml", pyproject=PYPROJECT + manifest)
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    result.assert_outcomes(passed=1)
    # The real classes are back once the body is over.
    import datetime

    assert datetime.datetime.now().year != 2001 or True
    assert type(datetime.datetime) is type


def test_the_pinned_run_keeps_its_own_clock(pytester: pytest.Pytester) -> None:
    # The application reads the clock; pydantic-ai stamps its messages from the real clock, and the pins keep them.
    pytester.makepyfile(
        app=APP.replace(
            "def advise(question: str) -> str:",
            "from datetime import datetime\n\n\ndef advise(question: str) -> str:\n"
            "    assert datetime.now().year == 2031",
        ),
        test_app="""
        import pytest

        import app


        @pytest.mark.anagrapheus
        def test_advice():
            assert "umbrella" in app.advise("Do I need an umbrella in Paris?")
        """,
    )
    pytester.makefile(
        ".toml", pyproject=PYPROJECT + '[tool.anagrapheus.entropy.clock]\nfrozen_at = "2031-05-05T00:00:00"\n'
    )
    pytester.runpytest("--anagrapheus=record", "--anagrapheus-guard").assert_outcomes(passed=1)
    recording = (pytester.path / "recordings/test_app/test_advice.jsonl").read_text()
    assert "2031-05-05" not in recording
    assert "run_clock" in recording
    pytester.runpytest("--anagrapheus-guard").assert_outcomes(passed=1)
    pytester.runpytest("--anagrapheus-guard").assert_outcomes(passed=1)


UNCOVERED = """
import linecache
import random
import time

import pytest

class Kept:
    clock = staticmethod(time.time)


def stamp(clock=time.time):
    return clock()


@pytest.mark.anagrapheus(path="none.jsonl")
def test_not_reached():
    # What the guard does not reach, as docs/how-to/guard-entropy.md lists it: none of it is reported.
    stamp()
    Kept.clock()
    random.Random().random()
    time.strftime("%Y")
    linecache.getline("pyproject.toml", 1)
    eval("__import__('time').time()")
"""


def test_what_the_guard_does_not_reach_is_not_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_uncovered=UNCOVERED)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live").assert_outcomes(passed=1)


PATCHED = """
import importlib
import os
import time
from datetime import date, datetime

import pytest
from pydantic import BaseModel


@pytest.mark.anagrapheus_guard
def test_patches_reach_the_real_module(monkeypatch):
    monkeypatch.setattr(os, "anagrapheus_mark", 1, raising=False)
    monkeypatch.setattr(time, "time", lambda: 42.0)
    assert importlib.import_module("os").anagrapheus_mark == 1
    assert time.time() == importlib.import_module("time").time() == 42.0
    monkeypatch.delattr(os, "anagrapheus_mark")
    assert not hasattr(importlib.import_module("os"), "anagrapheus_mark")
    kill = importlib.import_module("os").kill
    with monkeypatch.context() as patched:  # undone on leaving, as at the end of a test
        patched.setattr(os, "kill", lambda pid, sig: None)
        assert importlib.import_module("os").kill is not kill
    # pytest 9.2 undoes a set it did not find in the stand-in's own __dict__ by deleting: the real one stays.
    assert importlib.import_module("os").kill is kill

    time.monotonic = time.monotonic  # a stand-in set back on itself changes nothing

    class Trip(BaseModel):
        day: date
        at: datetime

    trip = Trip(day="2026-01-02", at="2026-01-02T03:04:05")
    assert (trip.day, trip.at) == (date(2026, 1, 2), datetime(2026, 1, 2, 3, 4, 5))


def test_after():
    real = importlib.import_module("time")
    assert real.time() != 42.0 and type(real.time).__name__ == "builtin_function_or_method"
"""


def test_a_test_patching_a_module_it_holds_patches_the_real_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_patched=PATCHED)
    pytester.makefile(
        ".toml", pyproject=PYPROJECT + '[tool.anagrapheus.entropy.clock]\nfrozen_at = "2026-01-01T00:00:00Z"\n'
    )
    pytester.runpytest("--anagrapheus-guard", "-p", "no:randomly").assert_outcomes(passed=2)


DRAWS = """
import os
import random
import secrets
import uuid
from random import choice

import pytest


@pytest.mark.anagrapheus(path="none.jsonl")
def test_draws(tmp_path):
    drawn = [
        random.random(),
        choice("abc"),
        uuid.uuid4().hex,
        os.urandom(4).hex(),
        secrets.token_hex(4),
        secrets.token_bytes().hex(),
        secrets.token_urlsafe(4),
        secrets.randbelow(100),
        secrets.choice("xyz"),
        secrets.randbits(8),
    ]
    with open("drawn.log", "a") as log:
        log.write(repr(drawn) + "\\n")
"""


def test_unseeded_draws_are_violations(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_draws=DRAWS)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    result.assert_outcomes(failed=1)
    for name in (
        "random.random()",
        "random.choice()",
        "uuid.uuid4()",
        "os.urandom()",
        "secrets.token_hex()",
        "secrets.token_bytes()",
        "secrets.token_urlsafe()",
        "secrets.randbelow()",
        "secrets.choice()",
        "secrets.randbits()",
    ):
        result.stdout.fnmatch_lines([f"*random     {name}  at test_draws.py:*"])
    drawn = (pytester.path / "drawn.log").read_text()
    pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live").assert_outcomes(failed=1)
    first, second = (pytester.path / "drawn.log").read_text().splitlines()
    assert drawn.strip() == first
    assert first != second  # real draws, reported and passed through


def test_seeded_draws_repeat_run_after_run_and_differ_between_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_draws=DRAWS + "\n\ntest_other = test_draws\n")
    pytester.makefile(".toml", pyproject=PYPROJECT + "[tool.anagrapheus.entropy.entropy]\nseed = 7\n")
    pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live").assert_outcomes(passed=2)
    pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live").assert_outcomes(passed=2)
    one, other, again, other_again = (pytester.path / "drawn.log").read_text().splitlines()
    assert (one, other) == (again, other_again)
    assert one != other


def test_the_rng_fixture_and_the_seed_printed_on_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_rng="""
        import random

        import pytest


        @pytest.mark.anagrapheus(path="none.jsonl")
        def test_rng(rng):
            assert rng.random() == random.Random(SEED).random()
            assert random.random() == random.Random(SEED).random()
            assert False, "shown with its seed"
        """.replace("SEED", str(test_seed(7, "test_rng.py::test_rng")))
    )
    pytester.makefile(".toml", pyproject=PYPROJECT + "[tool.anagrapheus.entropy.entropy]\nseed = 7\n")
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: shown with its seed*",
            f"*seed {test_seed(7, 'test_rng.py::test_rng')}: from the manifest's seed 7 and the node id *",
            "*run it again: pytest test_rng.py::test_rng --anagrapheus-guard",
        ]
    )


def test_a_failing_body_keeps_its_error_and_lists_the_violations(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_both="""
        import time

        import pytest


        @pytest.mark.anagrapheus(path="none.jsonl")
        def test_both():
            for _ in range(2):
                time.monotonic()
            assert False, "the test's own failure"
        """
    )
    pytester.makefile(".toml", pyproject=PYPROJECT)
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the test's own failure*",
            "*anagrapheus guard*",
            "*touched 1 undeclared*",
            "*clock      time.monotonic()  at test_both.py:9*",
        ]
    )


PROCESSES = """
import os
import socket
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys

import pytest


@pytest.mark.anagrapheus(path="none.jsonl")
def test_processes(tmp_path):
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    os.system("true")
    (tmp_path / "out.txt").write_text("written")
    assert (tmp_path / "out.txt").read_text() == "written"
    with open("made-here.txt", "w") as file:
        file.write("x")
    assert open("made-here.txt").read() == "x"
    import json  # an import reads files of the standard library: not the test's
    json.dumps({})
    os.close(os.open("pyproject.toml", os.O_RDONLY))
    os.close(os.open("made-here.txt", os.O_WRONLY))
    read_end, write_end = os.pipe()
    os.close(write_end)
    open(read_end).close()
    open("pyproject.toml", "r+").close()  # reads what was there: judged as a read
    open("appended.txt", "a").close()
    assert open("appended.txt").read() == ""
    exec("open('pyproject.toml').read()")  # code compiled from a string is no user file's
    with ThreadPoolExecutor(1) as pool:  # a connection with no user frame on its thread's stack
        assert pool.submit(socket.create_connection, ("127.0.0.1", 9), 0.5).exception() is not None
"""


@pytest.mark.parametrize("allowed", [False, True])
def test_processes_are_violations_unless_allowed_and_tmp_path_is_the_tests(
    pytester: pytest.Pytester, allowed: bool
) -> None:
    pytester.makepyfile(test_processes=PROCESSES)
    declared = "allow_subprocess = true\nallow_network = true\ndeclared_reads = ['pyproject.toml']\n"
    manifest = "[tool.anagrapheus.entropy.io]\n" + declared if allowed else ""
    pytester.makefile(".toml", pyproject=PYPROJECT + manifest)
    result = pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live")
    if allowed:
        result.assert_outcomes(passed=1)
        return
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*touched 5 undeclared*",
            "*subprocess subprocess.Popen *python* -c pass  at test_processes.py:12 (in test_processes)",
            "*subprocess os.system true  at test_processes.py:13 (in test_processes)",
            "*read       pyproject.toml  at test_processes.py:21 (in test_processes)",
            "*read       pyproject.toml  at test_processes.py:26 (in test_processes)",
            "*network    connect ('127.0.0.1', 9)  at no user frame",
        ]
    )


def test_hypothesis_is_seeded_per_test_only_when_the_manifest_opts_in(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_props="""
        from hypothesis import given, settings, strategies as st

        import pytest


        @pytest.mark.anagrapheus(path="none.jsonl")
        @settings(max_examples=5, database=None, derandomize=False)  # as off CI, where hypothesis draws afresh
        @given(st.integers())
        def test_examples(value):
            with open("examples.log", "a") as log:
                log.write(f"{value} ")


        @pytest.mark.anagrapheus(path="none.jsonl")
        def test_plain():
            with open("examples.log", "a") as log:
                log.write("\\n")
        """
    )

    def examples(manifest: str) -> list[str]:
        pytester.makefile(".toml", pyproject=PYPROJECT + manifest)
        for _ in range(2):
            pytester.runpytest("--anagrapheus-guard", "--anagrapheus=live").assert_outcomes(passed=2)
        return (pytester.path / "examples.log").read_text().splitlines()

    seeded = examples("[tool.anagrapheus.entropy.entropy]\nseed = 3\nhypothesis = true\n")
    assert seeded[0] == seeded[1]
    (pytester.path / "examples.log").unlink()
    # Left alone, hypothesis draws its examples afresh on each run (the first is always the simplest, 0).
    left_alone = examples("[tool.anagrapheus.entropy.entropy]\nseed = 3\n")
    assert left_alone[0] != left_alone[1]


def test_a_bad_manifest_stops_the_run_naming_the_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    pytester.makefile(".toml", pyproject=PYPROJECT + "[tool.anagrapheus.entropy.io]\nallow_network = 1\n")
    result = pytester.runpytest("--anagrapheus-guard")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*io.allow_network: must be true or false, not 1*"])
    # Off, the manifest is not read.
    pytester.runpytest().assert_outcomes(passed=1)


# The manifest, read directly.


def write(root: Path, name: str, text: str) -> Path:
    (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("[clocks]\n", "clocks", "unknown key"),
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nfreeze = true\n", "clock.freeze", "unknown key"),
        ("[io]\ndeclared_read = []\n", "io.declared_read", "unknown key"),
        ("[entropy]\nsed = 1\n", "entropy.sed", "unknown key"),
        ("clock = 1\n", "clock", "must be a table"),
        ("[clock]\nstep = 1\n", "clock.frozen_at", "is required"),
        ("[clock]\nfrozen_at = 2026-01-01\n", "clock.frozen_at", "not a date without a time"),
        ("[clock]\nfrozen_at = 'soon'\n", "clock.frozen_at", "is not an ISO 8601 instant"),
        ("[clock]\nfrozen_at = 5\n", "clock.frozen_at", "not 5"),
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nstep = -1\n", "clock.step", "must be from 0 to 86400 seconds"),
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nstep = 1e9\n", "clock.step", "must be from 0 to 86400 seconds"),
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nstep = 'fast'\n", "clock.step", "must be a number"),
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nmonotonic_step = 0\n", "clock.monotonic_step", "from 1e-06"),
        # A guarded one-second deadline loop would spin for ever (issue #35).
        ("[clock]\nfrozen_at = 2026-01-01T00:00:00Z\nmonotonic_step = 1e-12\n", "clock.monotonic_step", "from 1e-06"),
        ("[entropy]\nseed = -1\n", "entropy.seed", "from 0 to 2**64 - 1"),
        ("[entropy]\nseed = 18446744073709551616\n", "entropy.seed", "from 0 to 2**64 - 1"),
        ("[entropy]\nseed = true\n", "entropy.seed", "must be an integer"),
        ("[entropy]\nhypothesis = 'yes'\n", "entropy.hypothesis", "true or false"),
        ("[io]\ndeclared_reads = 'a.json'\n", "io.declared_reads", "list of paths"),
    ],
)
def test_the_manifest_refuses_what_it_does_not_know_naming_the_key(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)) as raised:
        load_manifest(write(tmp_path, "nondeterminism.toml", text))
    assert raised.value.key == key
    assert str(raised.value).startswith(f"nondeterminism.toml: {key}: ")


def test_a_manifest_that_is_not_utf8_is_refused_typed(tmp_path: Path) -> None:
    from anagrapheus.cli import main

    (tmp_path / "nondeterminism.toml").write_bytes(b"[entropy]\nseed = 1 # caf\xe9\n")
    with pytest.raises(ManifestError, match="is not UTF-8 text"):
        load_manifest(tmp_path)
    assert main(["entropy", "digest", "--root", str(tmp_path)]) == 2


def test_the_manifest_is_read_from_one_place(tmp_path: Path) -> None:
    assert load_manifest(tmp_path) == EntropyManifest(root=tmp_path)
    write(tmp_path, "pyproject.toml", "[tool.other]\nx = 1\n")
    assert load_manifest(tmp_path).source is None
    write(tmp_path, "pyproject.toml", '[tool.anagrapheus.entropy.clock]\nfrozen_at = "2026-01-01T01:00:00+01:00"\n')
    manifest = load_manifest(tmp_path)
    assert manifest.source == "pyproject.toml [tool.anagrapheus.entropy]"
    assert manifest.clock is not None and manifest.clock.frozen_at.isoformat() == "2026-01-01T00:00:00+00:00"
    write(tmp_path, "nondeterminism.toml", "")
    with pytest.raises(ManifestError, match="declares its entropy twice"):
        load_manifest(tmp_path)
    write(tmp_path, "pyproject.toml", "[tool.anagrapheus]\nentropy = 3\n")
    with pytest.raises(ManifestError, match=r"tool\.anagrapheus\.entropy: must be a table"):
        load_manifest(tmp_path)
    write(tmp_path, "pyproject.toml", "[tool\n")
    with pytest.raises(ManifestError, match=r"pyproject\.toml: "):
        load_manifest(tmp_path)


def test_declared_reads_are_paths_or_globs_under_the_root(tmp_path: Path) -> None:
    manifest = EntropyManifest(root=tmp_path, declared_reads=("data/*.json", "a.txt", "/etc/host*"))
    assert manifest.declares_read(str(tmp_path / "data" / "x.json"))
    assert manifest.declares_read(str(tmp_path / "data" / "deep" / "x.json"))
    assert manifest.declares_read(str(tmp_path / "a.txt"))
    assert manifest.declares_read("/etc/hostname")
    assert not manifest.declares_read(str(tmp_path / "b.txt"))
    assert not manifest.declares_read("/elsewhere/a.txt")


def test_guarded_scopes_do_not_nest() -> None:
    with (
        guarded(EntropyManifest(), seed=None),
        pytest.raises(UsageError, match="do not nest"),
        guarded(EntropyManifest(), seed=None),
    ):
        pass


def test_the_digest_moves_with_the_manifest_and_the_tests_not_with_other_settings(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    def digest() -> str:
        assert main(["entropy", "digest", "--root", str(pytester.path), "--json"]) == 0
        return json.loads(capsys.readouterr().out)["digest"]

    # Each digest collects the tests in a new pytest process (seconds each): four cover every case.
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.makefile(".toml", pyproject=PYPROJECT + "[tool.anagrapheus.entropy.entropy]\nseed = 1\n")
    first = digest()
    assert re.fullmatch("[0-9a-f]{16}", first)
    # The same digest again, from a file that differs only outside the manifest.
    pytester.makefile(".toml", pyproject="# a comment\n" + PYPROJECT + "[tool.anagrapheus.entropy.entropy]\nseed = 1\n")
    assert digest() == first
    pytester.makefile(".toml", pyproject=PYPROJECT + "[tool.anagrapheus.entropy.entropy]\nseed = 2\n")
    second = digest()
    assert second != first
    pytester.makepyfile(test_two="def test_two():\n    pass\n")
    assert main(["entropy", "digest", "--root", str(pytester.path)]) == 0
    value, told = capsys.readouterr().out.strip().split("  ", 1)
    assert re.fullmatch("[0-9a-f]{16}", value) and value != second
    assert told == "(pyproject.toml [tool.anagrapheus.entropy], 2 tests)"


def test_the_digest_refuses_a_bad_manifest_or_a_collection_error(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makefile(".toml", nondeterminism="[io]\nallow = true\n")
    assert main(["entropy", "digest", "--root", str(pytester.path)]) == 2
    assert "nondeterminism.toml: io.allow: unknown key" in capsys.readouterr().err
    (pytester.path / "nondeterminism.toml").unlink()
    pytester.makepyfile(test_broken="import nowhere_to_be_found\n")
    assert main(["entropy", "digest", "--root", str(pytester.path)]) == 2
    assert "pytest could not collect the tests (exit 2)" in capsys.readouterr().err
