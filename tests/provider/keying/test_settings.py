"""Every model setting pydantic-ai defines has a deliberate keyed-or-dropped decision, listed in the docs."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pydantic_ai
import pytest
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from anagrapheus.errors import CanonicalError
from anagrapheus.provider import SemanticCallPolicy, call_pin
from anagrapheus.provider.keying.settings import DROPPED_SETTINGS, KEPT_SETTINGS, REDUCED_SETTINGS

SOURCE = Path(pydantic_ai.__file__).parent
DOC = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "call-policy.md"


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
        f"{name} ({defined_settings()[name]}) needs exactly one decision in anagrapheus/provider/keying/settings.py:"
        " keep it unless it only changes delivery or names the session"
    )


# Decided ahead of the floor (2.68), which does not define them: the settings pydantic-ai 2.78 added.
SINCE_2_78 = frozenset(
    {
        "thinking_summary",
        "anthropic_inference_geo",
        "anthropic_previous_message_id",
        "anthropic_thinking_display",
        "bedrock_thinking_display",
        "google_interactions_generation_config",
        "google_interactions_native_tools",
        "google_interactions_response_format",
        "google_interactions_safety_settings",
        "google_interactions_service_tier",
        "google_interactions_thinking_level",
        "google_interactions_thinking_summaries",
        "groq_service_tier",
        "huggingface_logprobs",
        "huggingface_top_logprobs",
        "openai_include_web_search_results",
        "openai_safety_identifier",
    }
)


def test_the_decisions_name_only_real_settings() -> None:
    assert set(KEPT_SETTINGS) | set(DROPPED_SETTINGS) <= defined_settings().keys() | SINCE_2_78
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


# The reduction read against meaning, with settings that come together as an agent's run merges them.

USER_PROMPT = [ModelRequest(parts=[UserPromptPart("Round 1: state the UK position on fisheries.")])]


def key_of(settings: dict[str, Any] | None) -> str:
    return call_pin(SemanticCallPolicy(), USER_PROMPT, settings, ModelRequestParameters(), model_id="m").key  # pyright: ignore[reportArgumentType]


def test_a_setting_after_a_dropped_or_unset_one_still_moves_the_key() -> None:
    # Delivery settings and unset ones are skipped, never the end of the settings: what follows is read as ever.
    for before in ({"timeout": 10}, {"seed": None}, {"extra_body": {"user": "u1"}}):
        assert key_of({**before, "temperature": 0.1}) != key_of({**before, "temperature": 0.9})
        assert key_of({**before, "temperature": 0.1}) == key_of({"temperature": 0.1})


def test_every_session_id_in_extra_body_is_left_out_not_only_the_first() -> None:
    # Two ids that differ per session, side by side: neither may move the key.
    assert key_of({"extra_body": {"session_id": "s1", "user": "u1"}}) == key_of(
        {"extra_body": {"session_id": "s2", "user": "u2"}}
    )
    assert key_of({"extra_body": {"session_id": "s1", "user": "u1", "top_a": 1}}) == key_of(
        {"extra_body": {"top_a": 1}}
    )


def test_an_extra_body_with_nothing_but_session_ids_keys_like_none() -> None:
    # Nothing in it reaches the draw, so it is as if the setting were not set at all.
    assert key_of({"extra_body": {}}) == key_of(None)
    assert key_of({"extra_body": {"metadata": {"user_id": "u1"}}}) == key_of(None)
    assert key_of({"anthropic_metadata": {"user_id": "u1"}}) == key_of({})


def test_a_setting_with_no_json_form_is_refused_at_its_place_in_the_settings() -> None:
    with pytest.raises(CanonicalError) as refused:
        key_of({"temperature": 0.1, "logit_bias": {"100": object()}})
    assert refused.value.path == "$.settings.logit_bias.100"
