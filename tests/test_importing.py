"""`MODULE:ATTR` names, loaded one way for the command line and the pytest plugin: each bad name says what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import UnresolvedName, UsageError
from anagrapheus.importing import load_function, load_object, load_typed
from anagrapheus.timeline import EventTypeRegistry, UpcastRegistry
from examples.negotiation.runs import RECORDING

pytest_plugins = ["pytester"]

NOR = " (nor a class or function making one)"
BARE = ", and cannot be called without arguments to make one"

HELPERS = """
from anagrapheus.timeline import EventTypeRegistry


class Holder:
    class Inner:
        value = 3


NUMBER = 7


def registry():
    return EventTypeRegistry()


def needs_an_argument(name):
    return EventTypeRegistry()


def not_a_registry():
    return "a string"
"""


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of objects to name, importable as `named_helpers`."""
    (tmp_path / "named_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "named_helpers", raising=False)
    return "named_helpers"


@pytest.mark.parametrize("spec", ["named_helpers", "named_helpers:", ":NUMBER", "named_helpers:NUMBER:x"])
def test_a_name_without_module_and_attribute_is_refused_with_an_example(spec: str, helpers: str) -> None:
    with pytest.raises(UnresolvedName) as caught:
        load_object(spec)
    assert str(caught.value) == f"{spec}: expected MODULE:ATTR, such as myproject.agents:support_agent"
    assert (caught.value.spec, isinstance(caught.value, UsageError)) == (spec, True)


def test_a_module_that_does_not_import_is_named(helpers: str) -> None:
    with pytest.raises(UnresolvedName) as caught:
        load_object("named_helperz:NUMBER")
    assert caught.value.message == "cannot import named_helperz (No module named 'named_helperz'); is it on the path?"


def test_the_missing_part_of_a_dotted_attribute_is_named(helpers: str) -> None:
    assert load_object("named_helpers:Holder.Inner.value") == 3
    with pytest.raises(
        UnresolvedName, match=r"^named_helpers:Holder\.Outer\.value: named_helpers has no Holder\.Outer$"
    ):
        load_object("named_helpers:Holder.Outer.value")
    with pytest.raises(UnresolvedName, match=r"named_helpers has no NUMBR$"):
        load_object("named_helpers:NUMBR")


def test_an_error_inside_the_module_is_the_users_to_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_helpers.py").write_text("raise RuntimeError('the module itself is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="the module itself is broken"):
        load_object("broken_helpers:anything")


def test_a_kind_is_taken_as_it_is_or_made_by_a_class_or_a_function(helpers: str) -> None:
    assert isinstance(load_typed("named_helpers:registry", EventTypeRegistry, what="a registry"), EventTypeRegistry)
    made = load_typed("anagrapheus.timeline:EventTypeRegistry", EventTypeRegistry, what="a registry")
    assert isinstance(made, EventTypeRegistry)


@pytest.mark.parametrize(
    ("spec", "make", "message"),
    [
        ("named_helpers:NUMBER", True, f"is not a registry{NOR}: it is int"),
        ("named_helpers:not_a_registry", True, f"is not a registry{NOR}: it is str, once called"),
        ("named_helpers:registry", False, "is not a registry: it is function"),
        ("named_helpers:needs_an_argument", True, f"is not a registry{BARE}"),
        # A builtin without a signature to read is called, and what it made is named.
        ("builtins:ArithmeticError", True, f"is not a registry{NOR}: it is ArithmeticError, once called"),
    ],
)
def test_a_wrong_kind_says_what_it_is(spec: str, make: bool, message: str, helpers: str) -> None:
    with pytest.raises(UnresolvedName) as caught:
        load_typed(spec, EventTypeRegistry, what="a registry", make=make)
    assert caught.value.message == message


def test_a_function_is_anything_callable(helpers: str) -> None:
    assert isinstance(load_function("named_helpers:registry", what="a factory")(), EventTypeRegistry)
    with pytest.raises(UnresolvedName, match=r"^named_helpers:NUMBER: is not a factory: it is int$"):
        load_function("named_helpers:NUMBER", what="a factory")


# through the command line: bad input (exit 2), naming what was given


@pytest.mark.parametrize(
    ("option", "spec", "message"),
    [
        ("--events", "named_helpers", "expected MODULE:ATTR, such as myproject.agents:support_agent"),
        ("--events", "named_helperz:registry", "cannot import named_helperz (No module named 'named_helperz')"),
        ("--events", "named_helpers:registri", "named_helpers has no registri"),
        ("--events", "named_helpers:NUMBER", f"is not an EventTypeRegistry{NOR}: it is int"),
        ("--upcasts", "named_helpers:registry", f"is not an UpcastRegistry{NOR}: it is EventTypeRegistry, once called"),
    ],
)
def test_the_command_line_reports_a_bad_name_as_bad_input(
    option: str, spec: str, message: str, helpers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(RECORDING), option, spec]) == 2
    assert capsys.readouterr().err.startswith(f"bad input: {spec}: {message}")


def test_the_command_line_finds_the_projects_own_modules_from_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "project_registries.py").write_text("from anagrapheus.timeline import UpcastRegistry as upcasts\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["show", str(RECORDING), "--upcasts", "project_registries:upcasts", "--json"]) == 0
    assert sys.path[0] == str(tmp_path)
    assert isinstance(load_typed("project_registries:upcasts", UpcastRegistry, what="upcasts"), UpcastRegistry)


def test_rerun_and_regress_name_what_they_wanted(helpers: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rerun", str(RECORDING), "--agent", "named_helpers:NUMBER"]) == 2
    assert capsys.readouterr().err.startswith("bad input: named_helpers:NUMBER: is not a pydantic-ai Agent: it is int")
    assert main(["regress", "named_helpers:NUMBER", "--recording", str(RECORDING)]) == 2
    assert capsys.readouterr().err.startswith("bad input: named_helpers:NUMBER: is not a function: it is int")


# through the pytest plugin: a usage error naming the test and the policy

POLICIES = """
from anagrapheus.provider import SemanticCallPolicy

NOT_A_POLICY = 3


def needs_a_name(name):
    return SemanticCallPolicy()
"""

# Hypothesis and inline-snapshot are re-imported by every in-process run (seconds each); these runs need neither.
PYPROJECT = """
[tool.pytest.ini_options]
pythonpath = ["."]
addopts = "-p no:cacheprovider -p no:hypothesispytest -p no:inline_snapshot"
asyncio_default_fixture_loop_scope = "function"
"""

TEST = """
import pytest


@pytest.mark.anagrapheus(policy={policy!r})
def test_named():
    pass
"""


def test_the_plugin_reports_a_bad_policy_name_as_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(policies=POLICIES)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    for policy, complaint in (
        ("policies", "policy policies: expected MODULE:ATTR, such as myproject.agents:support_agent"),
        ("nowhere:Policy", "policy nowhere:Policy: cannot import nowhere (No module named 'nowhere')*"),
        ("policies:Missing", "policy policies:Missing: policies has no Missing"),
        ("policies:NOT_A_POLICY", f"policy policies:NOT_A_POLICY: is not a CallPolicy{NOR}: it is int"),
        ("policies:needs_a_name", f"policy policies:needs_a_name: is not a CallPolicy{BARE}"),
    ):
        pytester.makepyfile(test_named=TEST.format(policy=policy))
        result = pytester.runpytest()
        result.stdout.fnmatch_lines([f"*test_named.py::test_named: {complaint}"])
