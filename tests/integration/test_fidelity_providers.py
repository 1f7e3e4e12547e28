"""Fidelity on real provider classes: `OpenAIChatModel`, `OpenAIResponsesModel` and `AnthropicModel` over HTTP.

Each scenario runs three times against a loopback stub that speaks the API's JSON and server-sent events
(tests/provider_stub.py): unpinned, pinned live under a `PinLedger` (then committed), and replayed under
`ReplayPins` with the server down and every socket refused. The pinned live run must send the server what
the unpinned one sent (the same requests, byte for byte, in the same number), and the replay must return
what the pinned live run returned: `ModelMessagesTypeAdapter.dump_json(all_messages())` byte for byte (run
ids, timestamps and the provider's key order included), the usage, the output, and for a failed request the
same `ModelHTTPError` (class, status, model name, body with its key order, message).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResultEvent, models
from pydantic_ai.capabilities import NativeTool
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, PartDeltaEvent
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.native_tools import WebSearchTool
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RunUsage

from anagrapheus import EventTypeRegistry, PinLedger, Pinning, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.resolving.resolver import PinResolver
from tests.provider_stub import API, StubProvider, ToolCall, Turn, failure

PROMPT = "Round 1: state the UK position on cod."
APIS: tuple[API, ...] = ("chat", "responses", "anthropic")


class Verdict(BaseModel):
    """A structured answer."""

    species: str
    tonnes: int


def quota(species: str, year: int) -> str:
    """Look up the quota of a species for a year."""
    return f"{species} {year}: 12000t"


def survey(species: str) -> dict[str, Any]:
    """Read the stock survey of a species."""
    # Keys out of sorted order and an integral float: the pinned run must send the provider this very JSON.
    return {"species": species, "biomass": 310.0, "trend": "down"}


def build(api: API, url: str, *, retries: int = 0) -> Model:
    """The provider class for `api`, pointed at `url`, with the SDK's own retries as given."""
    # Plain HTTP on loopback: skipping certificate loading saves a third of a second per client.
    if api == "anthropic":
        http = anthropic.DefaultAsyncHttpxClient(verify=False)
        client = AsyncAnthropic(base_url=url, api_key="stub-key", max_retries=retries, http_client=http)
        return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client))
    http = openai.DefaultAsyncHttpxClient(verify=False)
    openai_client = AsyncOpenAI(base_url=f"{url}/v1", api_key="stub-key", max_retries=retries, http_client=http)
    if api == "responses":
        return OpenAIResponsesModel("o4-mini", provider=OpenAIProvider(openai_client=openai_client))
    return OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=openai_client))


async def closing(model: Model, run: Awaitable[None]) -> None:
    """Run, then close the model's HTTP clients on this event loop (not later, from a loop already closed)."""
    try:
        await run
    finally:
        for member in model.models if isinstance(model, FallbackModel) else [model]:
            await member.client.close()  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]


@dataclass
class Outcome:
    """What a run returned, as bytes and JSON that keep every key order."""

    runs: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    def ran(self, messages: list[ModelMessage], usage: RunUsage, output: object) -> None:
        self.runs.append(
            {
                "messages": ModelMessagesTypeAdapter.dump_json(messages).decode(),
                "usage": repr(usage),
                "output": repr(output),
            }
        )

    def failed(self, error: ModelHTTPError) -> None:
        self.runs.append(
            {
                "error": type(error).__qualname__,
                "classes": [c.__qualname__ for c in type(error).__mro__],
                "message": str(error),
                "status": error.status_code,
                "model": error.model_name,
                "body": json.dumps(error.body),
                "headers": json.dumps(error.headers),
            }
        )


Runner = Callable[[Agent[None, Any], Outcome], Awaitable[None]]


async def plain(agent: Agent[None, Any], outcome: Outcome) -> None:
    result = await agent.run(PROMPT)
    outcome.ran(result.all_messages(), result.usage, result.output)


async def run_stream(agent: Agent[None, Any], outcome: Outcome) -> None:
    async with agent.run_stream(PROMPT) as streamed:
        output = await streamed.get_output()
    outcome.ran(streamed.all_messages(), streamed.usage, output)


async def stream_events(agent: Agent[None, Any], outcome: Outcome) -> None:
    async with agent.run_stream_events(PROMPT) as events:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                result = event.result
                outcome.ran(result.all_messages(), result.usage, result.output)


async def iter_stream(agent: Agent[None, Any], outcome: Outcome) -> None:
    async with agent.iter(PROMPT) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for _ in stream:
                        pass
    assert run.result is not None
    outcome.ran(run.result.all_messages(), run.result.usage, run.result.output)


async def with_handler(agent: Agent[None, Any], outcome: Outcome) -> None:
    seen: list[str] = []

    async def handler(ctx: object, events: Any) -> None:
        async for event in events:
            # Every event, deltas included: a replayed stream yields the provider's chunks as they arrived (#45).
            seen.append(repr(event.delta) if isinstance(event, PartDeltaEvent) else type(event).__name__)

    result = await agent.run(PROMPT, event_stream_handler=handler)
    outcome.ran(result.all_messages(), result.usage, (result.output, seen))


async def fails_then_recovers(agent: Agent[None, Any], outcome: Outcome) -> None:
    """The app catches the provider's error and runs again, as apps do."""
    for _ in range(3):
        try:
            result = await agent.run(PROMPT)
        except ModelHTTPError as e:
            outcome.failed(e)
            continue
        outcome.ran(result.all_messages(), result.usage, result.output)
        return


TOOLS = Turn(
    thinking="The quota and the survey decide it.",
    calls=(
        ToolCall("quota", {"year": 2026, "species": "cod"}, "call_q1"),
        ToolCall("survey", {"species": "cod"}, "call_s1"),
    ),
)
ANSWER = Turn(thinking="Biomass is down; hold firm.", text="The UK holds firm on cod at 12000t.")
STRUCTURED = Turn(calls=(ToolCall("final_result", {"tonnes": 12000, "species": "cod"}, "call_f1"),))


@dataclass(frozen=True)
class Scenario:
    """One agent pattern: the replies the server gives and how the app runs the agent."""

    replies: tuple[Any, ...]
    runner: Runner
    tools: bool = False
    structured: bool = False
    retries: int = 0
    searches: bool = False


SEARCHED = Turn(
    searched=ToolCall("web_search", {"query": "cod quota 2026", "domain": "ices.dk"}, "srvtoolu_01"),
    text="ICES advises a cut; the UK holds firm.",
)


def scenarios(api: API) -> dict[str, Scenario]:
    overloaded = 529 if api == "anthropic" else 503
    native = {
        "native_search": Scenario((SEARCHED,), plain, searches=True),
        "native_search_stream": Scenario((SEARCHED,), run_stream, searches=True),
    }
    return (native if api == "anthropic" else {}) | {
        "thinking": Scenario((ANSWER,), plain),
        "tools": Scenario((TOOLS, ANSWER), plain, tools=True),
        "structured": Scenario((TOOLS, STRUCTURED), plain, tools=True, structured=True),
        "run_stream": Scenario((ANSWER,), run_stream),
        "run_stream_structured": Scenario((TOOLS, STRUCTURED), run_stream, tools=True, structured=True),
        "stream_events_tools": Scenario((TOOLS, ANSWER), stream_events, tools=True),
        "iter_stream_tools": Scenario((TOOLS, ANSWER), iter_stream, tools=True),
        "handler_tools": Scenario((TOOLS, ANSWER), with_handler, tools=True),
        "errors_then_recovery": Scenario(
            (failure(api, overloaded), failure(api, 429), TOOLS, ANSWER), fails_then_recovers, tools=True
        ),
        "sdk_retry_recovers": Scenario((failure(api, overloaded), ANSWER), plain, retries=1),
    }


CASES = [(api, name) for api in APIS for name in scenarios(api)]


def agent_for(model: Model, scenario: Scenario, resolver: PinResolver | None) -> Agent[None, Any]:
    capabilities: list[Any] = [] if resolver is None else [Pinning(resolver)]
    if scenario.searches:
        capabilities.append(NativeTool(WebSearchTool()))
    return Agent(
        model,
        output_type=Verdict if scenario.structured else str,
        tools=[quota, survey] if scenario.tools else [],
        capabilities=capabilities,
    )


@contextmanager
def sockets_refused() -> Generator[None]:
    """Refuse every connection, loopback included: a replay must not need the network at all."""

    def refuse(sock: socket.socket, address: object) -> Any:
        raise ConnectionRefusedError(f"replay tried to connect to {address!r}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        yield


@dataclass
class Trial:
    unpinned: Outcome
    live: Outcome
    replayed: Outcome
    sent_unpinned: list[tuple[str, bytes]]
    sent_live: list[tuple[str, bytes]]


def trial(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[str], Model],
    scenario: Scenario,
) -> Trial:
    """Run a scenario unpinned, pinned live (committed), then replayed with the server down and sockets refused."""
    types = EventTypeRegistry()
    unpinned, live, replayed = Outcome(), Outcome(), Outcome()
    with SQLiteEventStore(tmp_path / "pins.db") as store:
        with monkeypatch.context() as patch, StubProvider(list(scenario.replies)) as server:
            patch.setattr(models, "ALLOW_MODEL_REQUESTS", True)
            url = server.url
            asyncio.run(closing(model := make(url), scenario.runner(agent_for(model, scenario, None), unpinned)))
            sent_unpinned = server.restart_script()
            ledger = PinLedger(store, types, unit_id="unit-1")
            asyncio.run(closing(model := make(url), scenario.runner(agent_for(model, scenario, ledger), live)))
            ledger.commit()
            sent_live = server.restart_script()
        pins = ReplayPins.from_events(store.read(), types)
        with sockets_refused():
            asyncio.run(closing(model := make(url), scenario.runner(agent_for(model, scenario, pins), replayed)))
    return Trial(unpinned, live, replayed, sent_unpinned, sent_live)


def without_stamps(value: Any) -> Any:
    """`value` without the instants and ids a run is given: timestamps, run and conversation ids (order kept)."""
    if isinstance(value, dict):
        # (pydantic-ai 2.78 times each response from the wall clock too: `request_timestamp`, `duration`.)
        dropped = {"timestamp", "run_id", "conversation_id", "request_timestamp", "duration"}
        return {k: without_stamps(v) for k, v in value.items() if k not in dropped}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [without_stamps(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def comparable(outcome: Outcome) -> list[dict[str, Any]]:
    """An outcome as the unpinned run can match it: no instants, no ids, with every key order kept."""
    runs: list[dict[str, Any]] = []
    for run in outcome.runs:
        if "messages" in run:
            run = {**run, "messages": json.dumps(without_stamps(json.loads(run["messages"])))}
        runs.append(run)
    return runs


@pytest.mark.parametrize(("api", "name"), CASES, ids=[f"{api}-{name}" for api, name in CASES])
def test_a_provider_run_replays_byte_for_byte_and_pinning_changes_nothing_live(
    api: API, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = scenarios(api)[name]
    ran = trial(tmp_path, monkeypatch, lambda url: build(api, url, retries=scenario.retries), scenario)

    assert ran.sent_live == ran.sent_unpinned  # the server saw the same requests, byte for byte
    assert len(ran.sent_live) == len(scenario.replies)
    assert ran.live.runs and ran.replayed.runs == ran.live.runs
    assert comparable(ran.live) == comparable(ran.unpinned)


def test_a_fallback_over_real_providers_falls_back_on_replay_as_it_did_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The OpenAI member is overloaded (503); the fallback takes the Anthropic member. Replayed, the 503 must be
    # the same `ModelHTTPError` again, or the fallback would not fall back.
    scenario = Scenario((failure("chat", 503), ANSWER), plain)

    def make(url: str) -> Model:
        return FallbackModel(build("chat", url), build("anthropic", url))

    ran = trial(tmp_path, monkeypatch, make, scenario)

    assert ran.sent_live == ran.sent_unpinned
    assert ran.replayed.runs == ran.live.runs
    assert '"failed_attempts":[{' in ran.live.runs[0]["messages"]


def test_a_fallback_of_three_real_providers_under_run_stream_replays_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chat answers 503, Responses 429, Anthropic streams the answer: live and replayed, each failure is listed once
    # and timed as the recorded run timed it (#45: a streamed replay listed the first one twice and missed a pin).
    scenario = Scenario((failure("chat", 503), failure("responses", 429), ANSWER), run_stream)

    def make(url: str) -> Model:
        return FallbackModel(build("chat", url), build("responses", url), build("anthropic", url))

    ran = trial(tmp_path, monkeypatch, make, scenario)

    assert ran.sent_live == ran.sent_unpinned
    assert ran.replayed.runs == ran.live.runs
    assert comparable(ran.live) == comparable(ran.unpinned)
    assert len(json.loads(ran.live.runs[0]["messages"])[-1]["failed_attempts"]) == 2


def test_a_real_providers_datetime_detail_keeps_its_type_pinned_live_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenAIChatModel gives `provider_details['timestamp']` as a datetime; under Pinning it stays one (issue #34).
    def details(resolver: PinResolver | None, url: str) -> dict[str, Any]:
        model = build("chat", url)
        agent = Agent(model, capabilities=[] if resolver is None else [Pinning(resolver)])
        got: dict[str, Any] = {}

        async def run() -> None:
            response = (await agent.run("Hold?")).all_messages()[-1]
            got.update(getattr(response, "provider_details", None) or {})

        asyncio.run(closing(model, run()))
        return got

    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)
    with StubProvider([Turn(text="Fisheries hold.")] * 2) as server, SQLiteEventStore(tmp_path / "p.db") as store:
        plain = details(None, server.url)
        ledger = PinLedger(store, EventTypeRegistry())
        live = details(ledger, server.url)
        ledger.commit()
        replay = ReplayPins.from_store(store, EventTypeRegistry())
    replayed = details(replay, "http://127.0.0.1:9")

    assert isinstance(plain["timestamp"], datetime)
    assert live == replayed == plain
    assert [type(d["timestamp"]) for d in (live, replayed)] == [datetime, datetime]
