"""The key rules tested against meaning: a real agent runs twice, changing one input; the key moves or it does not.

Nothing here reads the library's keep/drop tables. The expectations are written by hand from
pydantic-ai's documentation of each input: an input that shapes what the model answers (what it
is told, what it may do, how it draws, what the response contains) must move the key; an input
that only shapes delivery, caching, billing or local bookkeeping must not, and each such input
says why. A wrongly kept input costs a needless re-recording; a wrongly dropped one replays a
pin recorded under other conditions, a silent wrong answer.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import InstructionPart, ModelMessage, ModelResponse, TextPart, ToolKind
from pydantic_ai.models import Model, ModelRequestParameters

try:
    from pydantic_ai.models import DeferredCapabilityEntry  # pydantic-ai 2.78
except ImportError:  # the floor, 2.68
    DeferredCapabilityEntry = None
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.native_tools import WebSearchTool
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import Tool, ToolDefinition

from anagrapheus.errors import PinMiss
from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

PROMPT = "Round 1: state the UK position on fisheries."


def answer(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("The UK holds firm.")])


async def answer_streamed(_messages: list[ModelMessage], _info: AgentInfo) -> AsyncIterator[str]:
    yield "The UK holds firm."


def scripted(settings: ModelSettings | None = None) -> FunctionModel:
    # A profile that accepts every output mode, so each request parameter can be set without being refused.
    profile = ModelProfile(supports_image_output=True, supports_json_schema_output=True)
    return FunctionModel(
        answer, stream_function=answer_streamed, model_name="scripted-uk", settings=settings, profile=profile
    )


def quota(ctx: RunContext[None], city: str) -> str:
    """Look up the fishing quota landed in a city."""
    return f"{city}: 120t"


def first_key(store: SQLiteEventStore, types: EventTypeRegistry, run: Callable[[Model], None]) -> str:
    """Run an agent on a pinned model and return the key of its first model request."""
    ledger = PinLedger(store, types)
    run(PinnedModel(scripted(), ledger))
    return next(pin.key for pin in ledger.pins() if pin.kind == "model_call")


# Settings. Every generic setting is listed by hand; provider settings not listed below move the key.

MOVES = "moves"
GENERIC_SETTINGS: dict[str, tuple[object, object, str]] = {
    # name: (one value, another value, MOVES or the reason the key stays)
    "max_tokens": (100, 200, MOVES),
    "temperature": (0.1, 0.9, MOVES),
    "top_p": (0.5, 0.9, MOVES),
    "top_k": (5, 50, MOVES),
    "seed": (1, 2, MOVES),
    "presence_penalty": (0.0, 1.0, MOVES),
    "frequency_penalty": (0.0, 1.0, MOVES),
    "logit_bias": ({"100": 1}, {"100": -1}, MOVES),
    "stop_sequences": (["END"], ["STOP"], MOVES),
    "thinking": ("low", "high", MOVES),
    "parallel_tool_calls": (True, False, MOVES),
    "tool_choice": ("auto", "none", MOVES),
    "framing_announcement": ("always", "never", MOVES),
    "citations": (True, False, MOVES),
    "extra_body": ({"reasoning": {"effort": "low"}}, {"reasoning": {"effort": "high"}}, MOVES),
    "timeout": (10, 60, "how long the client waits for the answer, not what the answer is"),
    "request_timeout": (10, 60, "how long the client waits for the answer, not what the answer is"),
    "first_event_timeout": (5, 30, "how long the client waits for the first streamed event"),
    "max_retries": (0, 3, "how often delivery is retried; a pin records the answer that arrived"),
    "extra_headers": ({"X-Trace": "a"}, {"X-Trace": "b"}, "transport headers, read by no model"),
    "cache": (True, False, "where the provider may reuse prompt work, not what it draws"),
    "service_tier": ("default", "priority", "capacity and price, not the weights or sampling"),
    # pydantic-ai 2.78:
    "thinking_summary": (True, False, MOVES),
}

PROVIDER_SETTINGS_THAT_KEEP_THE_KEY: dict[str, str] = {
    # pydantic-ai 2.78:
    "groq_service_tier": "capacity and price",
    "google_interactions_service_tier": "capacity and price",
    "anthropic_inference_geo": "where inference runs, and its price",
    "openai_safety_identifier": "names the end user",
    "openai_transport": "delivery: HTTP or websocket",
    "openai_background": "delivery: the response is polled for instead of waited on",
    "openai_continuous_usage_stats": "delivery: usage chunks in a stream",
    "openrouter_usage": "accounting of usage, returned beside the answer",
    "openai_service_tier": "capacity and price",
    "anthropic_service_tier": "capacity and price",
    "bedrock_service_tier": "capacity and price",
    "google_cloud_service_tier": "capacity and price",
    "anthropic_cache": "prompt caching",
    "anthropic_cache_instructions": "prompt caching",
    "anthropic_cache_messages": "prompt caching",
    "anthropic_cache_tool_definitions": "prompt caching",
    "anthropic_cache_diagnostics": "prompt caching",
    "bedrock_cache_instructions": "prompt caching",
    "bedrock_cache_messages": "prompt caching",
    "bedrock_cache_tool_definitions": "prompt caching",
    "openrouter_cache_instructions": "prompt caching",
    "openrouter_cache_messages": "prompt caching",
    "openrouter_cache_tool_definitions": "prompt caching",
    "openai_prompt_cache_key": "prompt caching",
    "openai_prompt_cache_retention": "prompt caching",
    "openai_prompt_cache_options": "prompt caching",
    "openai_prompt_cache_diagnostics": "prompt caching",
    "openai_cache_instructions": "prompt caching",
    "mistral_prompt_cache_key": "prompt caching",
    "openai_user": "names the end user for abuse monitoring; differs per session",
    "xai_user": "names the end user; differs per session",
    "bedrock_request_metadata": "labels for logs and billing, not read by the model",
    "google_labels": "labels for billing, not read by the model",
}


def request_model_settings() -> set[str]:
    """Every setting of pydantic-ai's request models: the fields of ModelSettings and of its provider subclasses.

    Read from pydantic-ai's source, so a setting a new release adds is tested here without an edit.
    Realtime (voice session) settings are not request settings and are left out.
    """
    spec = importlib.util.find_spec("pydantic_ai")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    fields: dict[str, list[str]] = {}
    bases: dict[str, list[str]] = {}
    for source in root.rglob("*.py"):
        if "realtime" in source.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("ModelSettings"):
                bases[node.name] = [ast.unparse(base) for base in node.bases]
                fields[node.name] = [
                    statement.target.id
                    for statement in node.body
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                ]

    def is_request_settings(name: str) -> bool:
        return name == "ModelSettings" or any(is_request_settings(base) for base in bases.get(name, []))

    return {field for name in fields if is_request_settings(name) for field in fields[name]}


PROVIDER_SETTINGS = sorted(request_model_settings() - GENERIC_SETTINGS.keys())

# What pydantic-ai 2.78 added: listed above, and judged only where the installed release has it (the floor has not).
SINCE_2_78 = frozenset(
    {
        "thinking_summary",
        "groq_service_tier",
        "google_interactions_service_tier",
        "anthropic_inference_geo",
        "openai_safety_identifier",
        "deferred_capabilities",
        "durable",
        "ui_visibility",
    }
)


def installed(listed: dict[str, Any], declared: set[str]) -> dict[str, Any]:
    """The entries of `listed` the installed pydantic-ai declares (`declared`), and every older one."""
    return {name: entry for name, entry in listed.items() if name not in SINCE_2_78 or name in declared}


def test_every_generic_setting_is_listed_by_hand() -> None:
    declared = set(ModelSettings.__annotations__)
    assert set(installed(GENERIC_SETTINGS, declared)) == declared
    assert len(PROVIDER_SETTINGS) > 100
    assert set(installed(PROVIDER_SETTINGS_THAT_KEEP_THE_KEY, set(PROVIDER_SETTINGS))) <= set(PROVIDER_SETTINGS)


def run_with(settings: dict[str, Any]) -> Callable[[Model], None]:
    def run(model: Model) -> None:
        Agent(model, tools=[quota]).run_sync(PROMPT, model_settings=settings)  # pyright: ignore[reportArgumentType]

    return run


@pytest.mark.parametrize("name", installed(GENERIC_SETTINGS, set(ModelSettings.__annotations__)))
def test_a_generic_setting_moves_the_key_exactly_when_it_shapes_the_answer(
    store: SQLiteEventStore, types: EventTypeRegistry, name: str
) -> None:
    one, other, expected = GENERIC_SETTINGS[name]
    moved = first_key(store, types, run_with({name: one})) != first_key(store, types, run_with({name: other}))
    assert moved == (expected == MOVES), f"{name}: expected the key to {'move' if expected == MOVES else 'stay'}"


@pytest.mark.parametrize("name", PROVIDER_SETTINGS)
def test_a_provider_setting_moves_the_key_unless_it_only_shapes_delivery(
    store: SQLiteEventStore, types: EventTypeRegistry, name: str
) -> None:
    moved = first_key(store, types, run_with({name: "one"})) != first_key(store, types, run_with({name: "other"}))
    assert moved == (name not in PROVIDER_SETTINGS_THAT_KEEP_THE_KEY)


# Entries inside a setting: session and end-user ids travel inside otherwise draw-shaping settings.

INNER_ENTRIES: list[tuple[str, object, object, bool]] = [
    # (setting, one value, another, moves?)
    ("extra_body", {"user": "u1"}, {"user": "u2"}, False),  # the end user's id
    ("extra_body", {"session_id": "s1"}, {"session_id": "s2"}, False),  # the session's id
    ("extra_body", {"safety_identifier": "a"}, {"safety_identifier": "b"}, False),  # the end user, hashed
    ("extra_body", {"prompt_cache_key": "a"}, {"prompt_cache_key": "b"}, False),  # prompt caching
    ("extra_body", {"metadata": {"user_id": "a"}}, {"metadata": {"user_id": "b"}}, False),  # the end user's id
    ("extra_body", {"metadata": {"topic": "a"}}, {"metadata": {"topic": "b"}}, True),  # anything else is kept
    ("extra_body", {"user": "u1", "top_a": 1}, {"user": "u1", "top_a": 2}, True),
    ("anthropic_metadata", {"user_id": "a"}, {"user_id": "b"}, False),  # the end user's id
    ("anthropic_metadata", {"user_id": "a", "topic": "a"}, {"user_id": "a", "topic": "b"}, True),
]


@pytest.mark.parametrize(("name", "one", "other", "moves"), INNER_ENTRIES)
def test_session_ids_inside_a_setting_keep_the_key_and_nothing_else_does(
    store: SQLiteEventStore, types: EventTypeRegistry, name: str, one: object, other: object, moves: bool
) -> None:
    moved = first_key(store, types, run_with({name: one})) != first_key(store, types, run_with({name: other}))
    assert moved == moves


# ModelRequestParameters: each field changed on its way from the agent to the pinned model.


class Reparametrised(WrapperModel):
    """Sits between the agent and the pinned model, and changes one field of the request parameters."""

    def __init__(self, wrapped: Model, change: dict[str, Any]) -> None:
        super().__init__(wrapped)
        self.change = change

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        changed = dataclasses.replace(model_request_parameters, **self.change)
        return await self.wrapped.request(messages, model_settings, changed)


TOOL = ToolDefinition(name="quota", parameters_json_schema={"type": "object", "properties": {}}, description="Quota.")
OUTPUT = ToolDefinition(name="final_result", parameters_json_schema={"type": "object"}, kind="output")

PARAMETERS: dict[str, tuple[object, object, str]] = {
    "function_tools": ([TOOL], [dataclasses.replace(TOOL, description="Quota, in tonnes.")], MOVES),
    "native_tools": ([], [WebSearchTool()], MOVES),
    "output_mode": ("text", "tool", MOVES),
    "output_object": (None, OutputObjectDefinition(json_schema={"type": "object"}), MOVES),
    "output_tools": ([], [OUTPUT], MOVES),
    "prompted_output_template": (None, "Answer as {schema}", MOVES),
    "allow_text_output": (True, False, MOVES),
    "allow_image_output": (False, True, MOVES),
    "instruction_parts": (None, [InstructionPart("Be brief.")], MOVES),
    "instruction_visibility": (None, {"capability:refunds": "via_history"}, MOVES),
    "tool_visibility": ({"quota": "visible"}, {"quota": "withheld"}, MOVES),
    "revealed_tool_names": (set[str](), {"quota"}, MOVES),
    "introduced_tool_names": (set[str](), {"quota"}, MOVES),
    "deferred_capability_ids": (set[str](), {"refunds"}, MOVES),
    "thinking": (None, "high", MOVES),
    "_framing_announcement": (None, "always", MOVES),
    "_telemetry_mcp_url_ids": (None, {"mcp-1"}, "masks URLs in telemetry; never sent to the model"),
    "_telemetry_mcp_url_toolset_ids": (set[str](), {"mcp-1"}, "masks URLs in telemetry; never sent to the model"),
    "_telemetry_mcp_url_tool_names": (None, {"quota"}, "masks URLs in telemetry; never sent to the model"),
    "cache": (None, True, "where the provider may reuse prompt work, not what it draws"),
}
if DeferredCapabilityEntry is not None:  # pydantic-ai 2.78: the catalog of capabilities the model may load
    PARAMETERS["deferred_capabilities"] = ([], [DeferredCapabilityEntry(id="refunds", description="Refunds.")], MOVES)
REQUEST_PARAMETERS = {field.name for field in dataclasses.fields(ModelRequestParameters)}


def test_every_request_parameter_is_listed_by_hand() -> None:
    assert set(installed(PARAMETERS, REQUEST_PARAMETERS)) == REQUEST_PARAMETERS


def run_changing(change: dict[str, Any]) -> Callable[[Model], None]:
    def run(model: Model) -> None:
        Agent(Reparametrised(model, change), tools=[quota]).run_sync(PROMPT)

    return run


@pytest.mark.parametrize("name", installed(PARAMETERS, REQUEST_PARAMETERS))
def test_a_request_parameter_moves_the_key_exactly_when_it_shapes_the_answer(
    store: SQLiteEventStore, types: EventTypeRegistry, name: str
) -> None:
    one, other, expected = PARAMETERS[name]
    moved = first_key(store, types, run_changing({name: one})) != first_key(store, types, run_changing({name: other}))
    assert moved == (expected == MOVES), f"{name}: expected the key to {'move' if expected == MOVES else 'stay'}"


# ToolDefinition: each field changed by the tool's own prepare hook, as the agent runs it.

QUOTA_KIND = ToolKind("fisheries", "quota")
TOOL_FIELDS: dict[str, tuple[object, object, str]] = {
    "name": ("quota", "landings", MOVES),
    "parameters_json_schema": ({"type": "object"}, {"type": "object", "required": ["city"]}, MOVES),
    "description": ("Quota.", "Quota, in tonnes.", MOVES),
    "outer_typed_dict_key": (None, "response", MOVES),  # names the property the schema wraps an output in
    "strict": (None, True, MOVES),  # the provider constrains generation to the schema
    "kind": ("function", "external", MOVES),
    "defer_loading": (False, True, MOVES),  # hidden from the model until surfaced
    "unless_native": (None, "web_search", MOVES),  # dropped from the wire when the native tool is supported
    "with_native": (None, "tool_search", MOVES),  # the native tool's adapter decides its wire format
    "tool_kind": (None, QUOTA_KIND, MOVES),  # what the tool is, independent of its name
    "unless_tool_kind": (None, "tool-search", MOVES),  # left out when another tool has that kind
    "return_schema": (None, {"type": "object"}, MOVES),  # injected into the description, or sent natively
    "include_return_schema": (None, True, MOVES),
    "sequential": (False, True, "how the agent schedules the tool's execution, after the model asked"),
    "timeout": (None, 5.0, "how long the agent lets the tool run, after the model asked"),
    "metadata": (None, {"owner": "fisheries"}, "documented as never sent to the model"),
    "toolset_id": (None, "fisheries", "bookkeeping for capabilities; never sent to the model"),
    "capability_id": (
        None,
        "refunds",
        "reaches the model only through the request's tool_visibility, which moves the key itself",
    ),
    # pydantic-ai 2.78:
    "durable": (None, True, "whether a durable engine runs the tool as a step, after the model asked"),
    "ui_visibility": (None, "hidden", "what a UI event stream shows of the tool's calls; never sent to the model"),
}
TOOL_DEFINITION_FIELDS = {field.name for field in dataclasses.fields(ToolDefinition)}


def test_every_tool_definition_field_is_listed_by_hand() -> None:
    assert set(installed(TOOL_FIELDS, TOOL_DEFINITION_FIELDS)) == TOOL_DEFINITION_FIELDS


def run_with_tool(change: dict[str, Any]) -> Callable[[Model], None]:
    async def prepare(_ctx: RunContext[None], tool: ToolDefinition) -> ToolDefinition:
        return dataclasses.replace(tool, **change)

    def run(model: Model) -> None:
        Agent(model, tools=[Tool(quota, prepare=prepare)]).run_sync(PROMPT)

    return run


@pytest.mark.parametrize("name", installed(TOOL_FIELDS, TOOL_DEFINITION_FIELDS))
def test_a_tool_definition_field_moves_the_key_exactly_when_it_shapes_the_answer(
    store: SQLiteEventStore, types: EventTypeRegistry, name: str
) -> None:
    one, other, expected = TOOL_FIELDS[name]
    moved = first_key(store, types, run_with_tool({name: one})) != first_key(store, types, run_with_tool({name: other}))
    assert moved == (expected == MOVES), f"{name}: expected the key to {'move' if expected == MOVES else 'stay'}"


# Streamed and plain requests share a key, wherever the settings come from; and the settings are in it.

LEVELS = ["model", "agent", "run"]


def agent_at(level: str, model: Model, temperature: float) -> tuple[Agent[None, str], ModelSettings | None]:
    """An agent whose temperature is set at `level`; returns it with the settings to pass per run."""
    settings = ModelSettings(temperature=temperature)
    if level == "model":
        assert isinstance(model, PinnedModel)
        model = PinnedModel(scripted(settings), model.resolver)
    agent = Agent(model, model_settings=settings if level == "agent" else None)
    return agent, settings if level == "run" else None


async def run_mode(agent: Agent[None, str], mode: str, settings: ModelSettings | None) -> str:
    if mode == "run":
        return (await agent.run(PROMPT, model_settings=settings)).output
    async with agent.run_stream(PROMPT, model_settings=settings) as streamed:
        return await streamed.get_output()


@pytest.mark.anyio
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("recorded_by", "replayed_by"), [("run", "run_stream"), ("run_stream", "run")])
async def test_streamed_and_plain_requests_share_a_key_with_settings_at_every_level(
    store: SQLiteEventStore, types: EventTypeRegistry, level: str, recorded_by: str, replayed_by: str
) -> None:
    ledger = PinLedger(store, types)
    agent, settings = agent_at(level, PinnedModel(scripted(), ledger), 0.1)
    assert await run_mode(agent, recorded_by, settings) == "The UK holds firm."
    ledger.commit()

    replay = ReplayPins.from_events(store.read(), types)
    agent, settings = agent_at(level, PinnedModel(scripted(), replay), 0.1)
    assert await run_mode(agent, replayed_by, settings) == "The UK holds firm."
    assert replay.hits == 1

    # The same request at another temperature was never recorded: streamed or not, it is a miss.
    agent, settings = agent_at(level, PinnedModel(scripted(), replay), 0.9)
    with pytest.raises(PinMiss) as miss:
        await run_mode(agent, replayed_by, settings)
    assert miss.value.divergence.moved == ("settings.temperature",)
