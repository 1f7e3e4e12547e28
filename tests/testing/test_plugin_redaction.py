"""The pytest plugin's `redact=`: the user's own rules (personal data) written as placeholders, not refused."""

from __future__ import annotations

import pytest

from tests.testing.test_plugin import RECORDING, calls

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("outside_ci")

# The model's last answer repeats who asked: personal data in what the recording holds.
MAILER = """
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

import app


def _answer(messages, info):
    app._count("model")
    returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("forecast", {"city": "Paris"})])
    asked = str(messages[0].parts[-1].content).split(":")[0]
    return ModelResponse(parts=[TextPart(f"{asked}: pack an umbrella, {returns[0].content}.")])


def advise(question: str) -> str:
    return Agent(FunctionModel(_answer, model_name="scripted-mailer"), tools=[app.forecast]).run_sync(question).output
"""

TEST_MAILED = """
import pytest

from anagrapheus.timeline import EMAIL_RULE, SecretRule

import mailer as app

TICKET = SecretRule("ticket", r"TKT-[0-9]{{6}}", hint="TKT-")


@pytest.mark.anagrapheus(redact={redact})
def test_advice():
    assert "umbrella" in app.advise("For ana@example.org, ticket TKT-123456: do I need an umbrella in Paris?")
"""


@pytest.mark.parametrize(
    "redact", ["[EMAIL_RULE, TICKET]", "'rules:PERSONAL'", "'rules:personal'"], ids=["rules", "name", "factory"]
)
def test_the_markers_rules_write_personal_data_as_placeholders(project: pytest.Pytester, redact: str) -> None:
    project.makepyfile(mailer=MAILER)
    project.makepyfile(
        rules="""
from anagrapheus import SecretScanner, SecretRule
from anagrapheus.timeline import DEFAULT_RULES, EMAIL_RULE

PERSONAL = SecretScanner((*DEFAULT_RULES, EMAIL_RULE, SecretRule("ticket", r"TKT-[0-9]{6}", hint="TKT-")))


def personal():
    return PERSONAL
"""
    )
    project.makepyfile(test_app=TEST_MAILED.format(redact=redact))
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert calls(project) == ["model", "tool", "model"]

    text = (project.path / RECORDING).read_text()
    assert "ana@example.org" not in text and "TKT-123456" not in text
    assert "[redacted:email:1]" in text and "[redacted:ticket:1]" in text
    # The address ends where the run ends (its last answer): the redacted file still replays, placeholder and all.
    project.runpytest().assert_outcomes(passed=1)
    assert calls(project) == []


def test_without_redact_personal_data_is_written_and_a_wrong_value_is_refused(project: pytest.Pytester) -> None:
    project.makepyfile(mailer=MAILER)
    project.makepyfile(test_app=TEST_MAILED.replace("(redact={redact})", ""))
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    assert "ana@example.org" in (project.path / RECORDING).read_text()

    for redact, complaint in (
        ("'nowhere:RULES'", ": redact nowhere:RULES: cannot import nowhere (No module named 'nowhere')"),
        ("['email']", "redact takes a SecretScanner, SecretRules or 'module:NAME' naming either, not ['email']"),
        ("[]", "redact takes a SecretScanner, SecretRules or 'module:NAME' naming either, not []"),
    ):
        project.makepyfile(test_app=TEST_MAILED.format(redact=redact))
        assert complaint in project.runpytest().stdout.str()


def test_redact_true_in_pyproject_is_the_default_rules(project: pytest.Pytester) -> None:
    project.makepyfile(mailer=MAILER)
    project.makepyfile(test_app=TEST_MAILED.replace("(redact={redact})", ""))
    project.makefile(
        ".toml", pyproject=(project.path / "pyproject.toml").read_text() + "\n[tool.anagrapheus]\nredact = true\n"
    )
    project.runpytest("--anagrapheus=record").assert_outcomes(passed=1)
    # The default rules know credentials, not personal data: the address is written.
    assert "ana@example.org" in (project.path / RECORDING).read_text()
