"""Every model setting pydantic-ai defines has a deliberate keyed-or-dropped decision, listed in the docs."""

from __future__ import annotations

import ast
from pathlib import Path

import pydantic_ai
import pytest
from pydantic_ai.models import ModelRequestParameters

from anagrapheus.provider import SemanticCallPolicy
from anagrapheus.provider.policy_settings import DROPPED_SETTINGS, KEPT_SETTINGS, REDUCED_SETTINGS

SOURCE = Path(pydantic_ai.__file__).parent
DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "call-policy.md"


def defined_settings() -> dict[str, str]:
    """Every key of `ModelSettings` and of each provider's `*ModelSettings` TypedDict, read from the source.

    Read rather than imported: most provider modules need an SDK that is an optional extra.
    """
    found: dict[str, str] = {}
    for path in [SOURCE / "settings.py", *sorted((SOURCE / "models").rglob("*.py"))]:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("ModelSettings"):
                for statement in node.body:
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                        found.setdefault(statement.target.id, node.name)
    return found


def test_the_source_scan_finds_the_settings_we_know() -> None:
    found = defined_settings()
    assert {"temperature", "timeout", "extra_body", "openai_user", "google_cached_content"} <= found.keys()
    assert len(found) > 100


@pytest.mark.parametrize("name", sorted(defined_settings()))
def test_every_setting_has_a_decision(name: str) -> None:
    assert (name in KEPT_SETTINGS) != (name in DROPPED_SETTINGS), (
        f"{name} ({defined_settings()[name]}) needs exactly one decision in anagrapheus/provider/policy_settings.py:"
        " keep it unless it only changes delivery or names the session"
    )


def test_the_decisions_name_only_real_settings() -> None:
    assert set(KEPT_SETTINGS) | set(DROPPED_SETTINGS) <= defined_settings().keys()
    assert set(REDUCED_SETTINGS) <= set(KEPT_SETTINGS)


def test_the_docs_list_every_decision() -> None:
    doc = DOC.read_text(encoding="utf-8")
    missing = [name for name in [*KEPT_SETTINGS, *DROPPED_SETTINGS] if f"`{name}`" not in doc]
    assert not missing, f"docs/how-to/call-policy.md does not list {missing}"


@pytest.mark.parametrize("name", sorted(DROPPED_SETTINGS))
def test_a_dropped_setting_leaves_the_key_alone(name: str) -> None:
    policy = SemanticCallPolicy()
    material = policy.material([], {"temperature": 0.1, name: "x"}, ModelRequestParameters(), model_id="m")  # pyright: ignore[reportArgumentType]
    assert material["settings"] == {"temperature": 0.1}


@pytest.mark.parametrize("name", sorted(KEPT_SETTINGS))
def test_a_kept_setting_is_in_the_key(name: str) -> None:
    policy = SemanticCallPolicy()
    material = policy.material([], {name: 1}, ModelRequestParameters(), model_id="m")  # pyright: ignore[reportArgumentType]
    assert material["settings"] == {name: 1}
