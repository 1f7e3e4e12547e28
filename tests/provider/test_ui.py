"""A chat UI's request through pydantic-ai's AG-UI and Vercel AI adapters replays its event stream byte for byte."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from typing_extensions import override

from anagrapheus import Pinning
from anagrapheus.errors import PinMiss, PinResultError
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.provider.ui import UI_DRAW, dispatch_pinned
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.resolving.resolver import Resolver

pytestmark = pytest.mark.anyio


async def forecast_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """A provider that calls the tide tool in three chunks of arguments, then answers in four chunks of text."""
    if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
        for args in ('{"port"', ': "Dov', 'er"}'):
            yield {0: DeltaToolCall(name="tide" if args.startswith("{") else None, json_args=args, tool_call_id="t1")}
        return
    for word in ("High ", "water ", "at ", "noon."):
        yield word


def agent(*capabilities: Pinning) -> Agent[None, str]:
    made = Agent(FunctionModel(stream_function=forecast_stream, model_name="tides"), capabilities=[*capabilities])

    @made.tool_plain
    def tide(port: str) -> str:
        return f"{port}: high water 12:00"

    return made


AG_UI_BODY = {
    "threadId": "thread-1",
    "runId": "run-1",
    "state": {},
    "messages": [
        {"id": "m1", "role": "user", "content": "Tides at Dover?"},
        {"id": "m2", "role": "assistant", "content": "Which day?"},
        {"id": "m3", "role": "user", "content": "Today."},
    ],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}
VERCEL_BODY = {
    "trigger": "submit-message",
    "id": "chat-1",
    "messages": [
        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Tides at Dover?"}]},
        {"id": "m2", "role": "assistant", "parts": [{"type": "text", "text": "Which day?"}]},
        {"id": "m3", "role": "user", "parts": [{"type": "text", "text": "Today."}]},
    ],
}
ADAPTERS = [
    pytest.param(AGUIAdapter, AG_UI_BODY, id="ag-ui"),
    pytest.param(VercelAIAdapter, VERCEL_BODY, id="vercel-ai"),
]


async def post(
    adapter: type[Any], body: dict[str, Any], made: Agent[None, str], resolver: Resolver | None, **options: Any
) -> tuple[str, bytes]:
    """POST `body` to a Starlette app serving `adapter` through an ASGI client: the SSE body, the run's messages."""
    ran: list[bytes] = []

    def on_complete(result: AgentRunResult[Any]) -> None:
        ran.append(ModelMessagesTypeAdapter.dump_json(result.all_messages()))

    async def endpoint(request: Request) -> Response:
        if resolver is None:
            return await adapter.dispatch_request(request, agent=made, on_complete=on_complete, **options)
        return await dispatch_pinned(
            adapter, request, resolver=resolver, agent=made, on_complete=on_complete, **options
        )

    app = Starlette(routes=[Route("/chat", endpoint, methods=["POST"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ui.test") as client:
        response = await client.post("/chat", json=body, headers={"accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    (messages,) = ran
    return response.text, messages


def events(sse: str) -> list[Any]:
    """The events of an SSE body, parsed."""
    return [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)")


def unstamped(sse: str) -> str:
    """`sse` without the ids, times and durations drawn: what a live run shows the same pinned or not."""
    drawn = re.sub(r'"timestamp":\d+', '"timestamp":0', UUID.sub("<id>", sse))
    return re.sub(r'"PT[\d.]+S"', '"<duration>"', ISO_TIME.sub("<time>", drawn))


@pytest.mark.parametrize(("adapter", "body"), ADAPTERS)
async def test_a_replayed_request_streams_the_recorded_events_byte_for_byte(
    adapter: type[Any], body: dict[str, Any], store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned, unpinned_messages = await post(adapter, body, agent(), None)
    ledger = PinLedger(store, types)
    live, live_messages = await post(adapter, body, agent(Pinning(ledger)), ledger)
    assert UI_DRAW in [pin.kind for pin in ledger.pins()]
    ledger.commit()
    # Pinning changes no event and no message, only which ids and times are drawn.
    assert unstamped(live) == unstamped(unpinned)
    assert unstamped(live_messages.decode()) == unstamped(unpinned_messages.decode())
    kinds = [event.get("type") for event in events(live)]
    assert kinds.count("TEXT_MESSAGE_CONTENT") + kinds.count("text-delta") == 4  # one per chunk the provider sent
    assert kinds.count("TOOL_CALL_ARGS") + kinds.count("tool-input-delta") == 3

    with refuse_model_requests():
        replay = ReplayPins.from_store(store, types)
        replayed, replayed_messages = await post(adapter, body, agent(Pinning(replay)), replay)
    assert replayed == live
    assert events(replayed) == events(live)
    assert replayed_messages == live_messages  # the converted history's timestamps included


@pytest.mark.parametrize(("adapter", "body"), ADAPTERS)
async def test_the_same_request_twice_replays_each_with_its_own_draws(
    adapter: type[Any], body: dict[str, Any], store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    made = agent(Pinning(ledger))
    live = [await post(adapter, body, made, ledger) for _ in range(2)]
    ledger.commit()
    assert live[0][0] != live[1][0]  # fresh ids for the second request, as unpinned

    with refuse_model_requests():
        replay = ReplayPins.from_store(store, types)
        replayed_agent = agent(Pinning(replay))
        assert [await post(adapter, body, replayed_agent, replay) for _ in range(2)] == live


async def test_a_request_the_recording_never_saw_is_refused_naming_the_draw(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    await post(AGUIAdapter, AG_UI_BODY, agent(Pinning(ledger)), ledger)
    ledger.commit()

    other = {**AG_UI_BODY, "messages": [{"id": "m1", "role": "user", "content": "Tides at Calais?"}]}
    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests(), pytest.raises(PinMiss, match=f"p1:{UI_DRAW}:"):
        await post(AGUIAdapter, other, agent(Pinning(replay)), replay)


@dataclass(slots=True)
class Damaged(Resolver):
    """A resolver over a ledger that answers the UI draws from the `first`th on with `raw`, as a damaged log would."""

    ledger: PinLedger
    first: int
    raw: JSONValue
    drawn: int = 0

    def _answer(self, kind: str, options: dict[str, Any]) -> tuple[bool, Any]:
        if kind != UI_DRAW:
            return False, None
        self.drawn += 1
        return (True, options["interpret"](self.raw)) if self.drawn > self.first else (False, None)

    @override
    def resolve(self, key: str, *, kind: str, **options: Any) -> Any:
        damaged, answer = self._answer(kind, options)
        return answer if damaged else self.ledger.resolve(key, kind=kind, **options)

    @override
    async def aresolve(self, key: str, *, kind: str, **options: Any) -> Any:
        damaged, answer = self._answer(kind, options)
        return answer if damaged else await self.ledger.aresolve(key, kind=kind, **options)

    @override
    def resolve_stream(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve_stream(key, **options)


@pytest.mark.parametrize(
    ("adapter", "body", "first", "raw", "says"),
    [
        (AGUIAdapter, AG_UI_BODY, 0, "run-7", "holds 'run-7', not a UUID"),  # the run's id
        (AGUIAdapter, AG_UI_BODY, 1, "noon", "not a list of 3 times"),  # the converted history's times
        (AGUIAdapter, AG_UI_BODY, 1, ["noon", "noon", "noon"], "not an ISO 8601 time"),
        (AGUIAdapter, AG_UI_BODY, 1, [7, 7, 7], "holds 7, not an ISO 8601 time"),
        (AGUIAdapter, AG_UI_BODY, 2, "m-1", "not a UUID"),  # the stream's first id
        (VercelAIAdapter, VERCEL_BODY, 2, "m-1", "holds 'm-1', not a UUID"),
        (VercelAIAdapter, VERCEL_BODY, 2, 7, "holds 7, not a UUID string"),
    ],
)
async def test_a_damaged_draw_is_refused_saying_what_it_holds(
    adapter: type[Any], body: dict[str, Any], first: int, raw: JSONValue, says: str, ledger: PinLedger
) -> None:
    damaged = Damaged(ledger, first, raw)
    with pytest.raises(PinResultError, match=re.escape(f"a {UI_DRAW} pin ") + ".*" + re.escape(says)):
        await post(adapter, body, agent(Pinning(damaged)), damaged)


@pytest.mark.parametrize(("adapter", "body"), ADAPTERS)
async def test_a_request_the_adapter_refuses_is_answered_as_unpinned(
    adapter: type[Any], body: dict[str, Any], ledger: PinLedger
) -> None:
    made = agent(Pinning(ledger))

    async def answer(pinned: bool) -> httpx.Response:
        async def endpoint(request: Request) -> Response:
            if pinned:
                return await dispatch_pinned(adapter, request, resolver=ledger, agent=made)
            return await adapter.dispatch_request(request, agent=made)

        app = Starlette(routes=[Route("/chat", endpoint, methods=["POST"])])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ui.test") as client:
            return await client.post("/chat", content=b'{"messages": 7}', headers={"content-type": "application/json"})

    unpinned, pinned = await answer(False), await answer(True)
    assert pinned.status_code == unpinned.status_code == 422
    assert pinned.content == unpinned.content
    assert [pin.kind for pin in ledger.pins()] == [UI_DRAW]  # the run's id only, drawn before the body was read


async def test_two_chats_served_at_once_replay_each_its_own_stream(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    bodies = [
        {**AG_UI_BODY, "threadId": f"thread-{port}", "messages": [{"id": "m1", "role": "user", "content": port}]}
        for port in ("Dover", "Calais")
    ]

    async def both(resolver: Resolver, order: list[int]) -> dict[int, tuple[str, bytes]]:
        made = agent(Pinning(resolver))
        served: dict[int, tuple[str, bytes]] = {}

        async def serve(index: int) -> None:
            served[index] = await post(AGUIAdapter, bodies[index], made, resolver)

        async with anyio.create_task_group() as group:
            for index in order:
                group.start_soon(serve, index)
        return served

    ledger = PinLedger(store, types)
    live = await both(ledger, [0, 1])
    ledger.commit()
    with refuse_model_requests():
        replay = ReplayPins.from_store(store, types)
        replayed = await both(replay, [1, 0])
    for index in (0, 1):
        assert replayed[index][0] == live[index][0], index
        assert replayed[index][1] == live[index][1], index


@pytest.mark.parametrize(("adapter", "body"), ADAPTERS)
async def test_a_run_id_the_app_names_is_kept_and_replays(
    adapter: type[Any], body: dict[str, Any], store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = await post(adapter, body, agent(Pinning(ledger)), ledger, run_id="chat-7")
    ledger.commit()
    assert json.loads(live[1])[-1]["run_id"] == "chat-7"  # the run's own messages; the history's have none
    with refuse_model_requests():
        replay = ReplayPins.from_store(store, types)
        assert await post(adapter, body, agent(Pinning(replay)), replay, run_id="chat-7") == live
