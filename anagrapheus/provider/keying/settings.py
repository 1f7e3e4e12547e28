"""Which model settings go into a call's key: a deliberate decision for every setting pydantic-ai defines.

A setting missing from both tables is kept: reduction is by exclusion, so a setting a future pydantic-ai adds
changes the key until someone decides it only affects delivery.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "DROPPED_EXTRA_BODY_ENTRIES",
    "DROPPED_SETTINGS",
    "KEPT_SETTINGS",
    "REDUCED_SETTINGS",
    "reduced_settings",
]

_DELIVERY = "delivery only: how or how fast the request travels, not what is drawn"
_CACHE = "prompt caching: where the provider may reuse work, not what it draws"
_TIER = "service tier: capacity and price, not what is drawn"
_SESSION = "names the session or end user behind the call; differs per session, never changes the draw"
_LOCAL = "bookkeeping attached to the request for logs and billing, not read by the model"
_DRAW = "changes how the model draws"
_TOLD = "changes what the model is told or may do"
_RETURNED = "changes what the pinned response contains"
_CONTENT = "names content the model reads (a server-side cache, container or earlier response)"
_WHERE = "where the provider runs inference (and its price), not what is drawn"

DROPPED_SETTINGS: Final[Mapping[str, str]] = {
    "timeout": _DELIVERY,
    "request_timeout": _DELIVERY,
    "first_event_timeout": _DELIVERY,
    "max_retries": _DELIVERY,
    "extra_headers": _DELIVERY,
    "openai_transport": _DELIVERY,
    "openai_background": _DELIVERY + " (polling a background response)",
    "openai_continuous_usage_stats": _DELIVERY + " (usage chunks in a stream)",
    "openrouter_usage": _DELIVERY + " (usage accounting)",
    "service_tier": _TIER,
    "openai_service_tier": _TIER,
    "anthropic_service_tier": _TIER,
    "bedrock_service_tier": _TIER,
    "google_cloud_service_tier": _TIER,
    "google_interactions_service_tier": _TIER,
    "groq_service_tier": _TIER,
    "anthropic_inference_geo": _WHERE,
    "cache": _CACHE,
    "anthropic_cache": _CACHE,
    "anthropic_cache_instructions": _CACHE,
    "anthropic_cache_messages": _CACHE,
    "anthropic_cache_tool_definitions": _CACHE,
    "anthropic_cache_diagnostics": _CACHE,
    "bedrock_cache_instructions": _CACHE,
    "bedrock_cache_messages": _CACHE,
    "bedrock_cache_tool_definitions": _CACHE,
    "openrouter_cache_instructions": _CACHE,
    "openrouter_cache_messages": _CACHE,
    "openrouter_cache_tool_definitions": _CACHE,
    "openai_prompt_cache_key": _CACHE,
    "openai_prompt_cache_retention": _CACHE,
    "openai_prompt_cache_options": _CACHE,
    "openai_prompt_cache_diagnostics": _CACHE,
    "openai_cache_instructions": _CACHE,
    "mistral_prompt_cache_key": _CACHE,
    "openai_user": _SESSION,
    "xai_user": _SESSION,
    "openai_safety_identifier": _SESSION + " (a hashed end-user id)",
    "bedrock_request_metadata": _LOCAL,
    "google_labels": _LOCAL,
}
"""Settings left out of the key entirely, with the reason."""

REDUCED_SETTINGS: Final[Mapping[str, tuple[str, ...]]] = {
    "anthropic_metadata": ("user_id",),
}
"""Settings kept in the key except for these entries (each names the session or end user)."""

DROPPED_EXTRA_BODY_ENTRIES: Final[tuple[tuple[str, ...], ...]] = (
    ("session_id",),
    ("user",),
    ("safety_identifier",),
    ("prompt_cache_key",),
    ("metadata", "user_id"),
)
"""Paths inside `extra_body` left out of the key: session and end-user ids. Everything else in it is kept."""

KEPT_SETTINGS: Final[Mapping[str, str]] = {
    "max_tokens": _DRAW,
    "temperature": _DRAW,
    "top_p": _DRAW,
    "top_k": _DRAW,
    "seed": _DRAW,
    "presence_penalty": _DRAW,
    "frequency_penalty": _DRAW,
    "logit_bias": _DRAW,
    "stop_sequences": _DRAW,
    "thinking": _DRAW,
    "parallel_tool_calls": _TOLD,
    "tool_choice": _TOLD,
    "framing_announcement": _TOLD + " (pydantic-ai adds an announcement to the system prompt)",
    "citations": _RETURNED,
    "extra_body": _DRAW + " (draw-changing entries such as reasoning travel here; see the dropped entries)",
    "anthropic_metadata": "kept without its user_id",
    "anthropic_thinking": _DRAW,
    "anthropic_effort": _DRAW,
    "anthropic_task_budget": _DRAW,
    "anthropic_container": _CONTENT,
    "anthropic_code_execution_tool_version": _TOLD,
    "anthropic_web_tools_allowed_callers": _TOLD,
    "anthropic_eager_input_streaming": _RETURNED + " (tool arguments are streamed unvalidated)",
    "anthropic_betas": _TOLD,
    "anthropic_speed": _DRAW + " (a different inference mode)",
    "anthropic_context_management": _TOLD + " (the provider compacts the context)",
    "bedrock_guardrail_config": _RETURNED,
    "bedrock_performance_configuration": _DRAW + " (latency-optimised inference)",
    "bedrock_additional_model_response_fields_paths": _RETURNED,
    "bedrock_prompt_variables": _TOLD,
    "bedrock_additional_model_requests_fields": _DRAW,
    "bedrock_inference_profile": _DRAW + " (the profile can name a different model)",
    "cerebras_disable_reasoning": _DRAW,
    "cerebras_clear_thinking": _TOLD,
    "decision_boolean_threshold": _RETURNED,
    "decision_route_threshold": _RETURNED,
    "google_safety_settings": _RETURNED,
    "google_thinking_config": _DRAW,
    "google_video_resolution": _TOLD,
    "google_cached_content": _CONTENT,
    "google_logprobs": _RETURNED,
    "google_top_logprobs": _RETURNED,
    "google_model_armor_config": _RETURNED,
    "groq_reasoning_format": _RETURNED,
    "groq_reasoning_effort": _DRAW,
    "mcp_model_preferences": _DRAW + " (the client picks the model)",
    "openai_reasoning_effort": _DRAW,
    "openai_logprobs": _RETURNED,
    "openai_top_logprobs": _RETURNED,
    "openai_store": _RETURNED + " (stored responses change how reasoning is returned)",
    "openai_moderation": _RETURNED,
    "openai_text_verbosity": _DRAW,
    "openai_prediction": _TOLD,
    "openai_include_raw_annotations": _RETURNED,
    "openai_include_unmapped_response_data": _RETURNED,
    "openai_native_tools": _TOLD,
    "openai_reasoning_mode": _DRAW,
    "openai_reasoning_context": _TOLD,
    "openai_reasoning_summary": _RETURNED,
    "openai_send_reasoning_ids": _TOLD,
    "openai_truncation": _TOLD,
    "openai_previous_response_id": _CONTENT,
    "openai_conversation_id": _CONTENT,
    "openai_include_code_execution_outputs": _RETURNED,
    "openai_include_web_search_sources": _RETURNED,
    "openai_include_file_search_results": _RETURNED,
    "openai_context_management": _TOLD + " (the provider compacts the context)",
    "openrouter_models": _DRAW + " (fallback models)",
    "openrouter_provider": _DRAW + " (the route, and so the weights' host and quantisation)",
    "openrouter_preset": _DRAW,
    "openrouter_transforms": _TOLD,
    "openrouter_reasoning": _DRAW,
    "snowflake_reasoning": _DRAW,
    "typesafe_boolean_threshold": _RETURNED,
    "typesafe_tool_call_threshold": _RETURNED,
    "xai_logprobs": _RETURNED,
    "xai_top_logprobs": _RETURNED,
    "xai_store_messages": _CONTENT,
    "xai_previous_response_id": _CONTENT,
    "xai_include_encrypted_content": _RETURNED,
    "xai_include_code_execution_output": _RETURNED,
    "xai_include_web_search_output": _RETURNED,
    "xai_include_inline_citations": _RETURNED,
    "xai_include_mcp_output": _RETURNED,
    "xai_include_x_search_output": _RETURNED,
    "xai_include_collections_search_output": _RETURNED,
    "xai_include_attachment_search_output": _RETURNED,
    "xai_reasoning_effort": _DRAW,
    "xai_max_turns": _TOLD,
    "xai_agent_count": _DRAW,
    "zai_clear_thinking": _TOLD,
    # Added by pydantic-ai 2.78.
    "thinking_summary": _RETURNED + " (readable thinking, or signatures only)",
    "anthropic_thinking_display": _RETURNED + " (readable thinking, or signatures only)",
    "anthropic_previous_message_id": _CONTENT + " (a message thread the request continues)",
    "bedrock_thinking_display": _RETURNED + " (readable thinking, or signatures only)",
    "google_interactions_generation_config": _DRAW,
    "google_interactions_native_tools": _TOLD,
    "google_interactions_response_format": _RETURNED,
    "google_interactions_safety_settings": _RETURNED,
    "google_interactions_thinking_level": _DRAW,
    "google_interactions_thinking_summaries": _RETURNED,
    "huggingface_logprobs": _RETURNED,
    "huggingface_top_logprobs": _RETURNED,
    "openai_include_web_search_results": _RETURNED + " (and sent back on later requests)",
}
"""Settings decided to stay in the key, with the reason (any setting in neither table is kept too)."""


_EMPTY_MEANS_ABSENT = frozenset({*REDUCED_SETTINGS, "extra_body"})


def _without(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    """Return a dict `value` without the entries at `paths`; a nested dict left empty goes too."""
    if not isinstance(value, Mapping):
        return value
    out: dict[Any, Any] = dict(value)  # pyright: ignore[reportUnknownArgumentType]
    for path in paths:
        head, rest = path[0], path[1:]
        if head not in out:
            continue
        if not rest:
            del out[head]
            continue
        inner = _without(out[head], (rest,))
        if isinstance(inner, dict) and not inner:
            del out[head]
        else:
            out[head] = inner
    return out


def reduced_settings(
    settings: Mapping[str, Any] | None, *, dropped: Mapping[str, str] = DROPPED_SETTINGS
) -> dict[str, Any]:
    """Reduce effective settings to what is keyed: drop delivery-only and session settings, keep everything else.

    A setting that is `None`, or a dict left empty once its volatile entries are removed, counts as absent.
    What is kept is the key's material once walked (`MaterialWalk`), with the rest of the request.
    """
    out: dict[str, Any] = {}
    if not settings:
        return out
    for name, setting in settings.items():
        value: Any = setting
        if value is None or name in dropped:
            continue
        if name == "extra_body":
            value = _without(value, DROPPED_EXTRA_BODY_ENTRIES)
        elif name in REDUCED_SETTINGS:
            value = _without(value, tuple((entry,) for entry in REDUCED_SETTINGS[name]))
        if name in _EMPTY_MEANS_ABSENT and value == {}:
            continue
        out[name] = value
    return out
