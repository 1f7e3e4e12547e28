"""One agent run per pydantic-ai surface, recorded or replayed through `Pinning`.

`python -m tests.fidelity_runs record|replay DIR` runs every surface against its own log in
`DIR/SURFACE.db` (a `PinLedger` that commits, or a strict `ReplayPins`) and writes to `DIR/MODE.json`
what each run produced: its messages, its output or exception, and how many model requests and
tool bodies ran in this process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from fastmcp.client.transports import StdioTransport
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResultEvent, ModelRetry, NativeOutput, PromptedOutput, RunContext, ToolOutput
from pydantic_ai.exceptions import ModelHTTPError, ModelUnavailableError
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import UsageLimits

from anagrapheus import EventTypeRegistry, PinLedger, Pinning, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.resolving.resolver import PinResolver

PROMPT = "Round 1: state the UK position on cod."
HARBOUR = Path(__file__).with_name("mcp_harbour.py")


class Verdict(BaseModel):
    """A structured answer."""

    species: str
    tonnes: int


@dataclass
class Counts:
    """How often the model and the tool bodies were reached in this process, and where MCP servers log starts."""

    model: int = 0
    tools: int = 0
    mcp_starts: Path = Path("mcp-starts.log")

    def servers_started(self) -> int:
        """How many MCP server processes have started so far (each logs a line)."""
        return len(self.mcp_starts.read_text().splitlines()) if self.mcp_starts.exists() else 0


COUNTS = Counts()


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    return [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call every function tool until each returned without a retry, then answer (structured when asked)."""
    COUNTS.model += 1
    returns = _returns(messages)
    if info.function_tools and (not returns or any(r.outcome == "retried" for r in returns)):
        return ModelResponse(parts=[ToolCallPart(t.name, {"species": "cod"}) for t in info.function_tools])
    seen = "; ".join(str(r.content) for r in returns)
    if info.output_tools:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"species": "cod", "tonnes": 12})])
    if info.model_request_parameters.output_mode in ("native", "prompted"):
        return ModelResponse(parts=[TextPart(json.dumps({"species": "cod", "tonnes": 12}))])
    return ModelResponse(parts=[ThinkingPart("weigh the quota"), TextPart(f"The UK holds firm. {seen}".strip())])


async def scripted_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    response = scripted(messages, info)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            for word in part.content.split(" "):
                yield word + " "
        elif isinstance(part, ToolCallPart):
            yield {index: DeltaToolCall(name=part.tool_name, json_args=json.dumps(part.args))}


def model(name: str = "scripted-uk") -> FunctionModel:
    return FunctionModel(scripted, stream_function=scripted_stream, model_name=name)


def quota(ctx: RunContext[str], species: str) -> str:
    """Look up the quota of a species for the deps' fleet."""
    COUNTS.tools += 1
    return f"{ctx.deps}: 12000t of {species}"


async def survey(species: str) -> dict[str, Any]:
    """Read the stock survey of a species."""
    COUNTS.tools += 1
    return {"species": species, "biomass": 310}


_retried: list[str] = []


def registry(species: str) -> str:
    """Ask the registry; it is busy the first time."""
    COUNTS.tools += 1
    _retried.append(species)
    if len(_retried) == 1:
        raise ModelRetry("the registry is busy, ask again")
    return f"{species} registered"


def agent(
    pinning: Pinning, *, tools: list[Any] | None = None, output_type: Any = str, **kwargs: Any
) -> Agent[Any, Any]:
    return Agent(
        kwargs.pop("model", None) or model(),
        deps_type=str,
        tools=tools if tools is not None else [quota, survey],
        output_type=output_type,
        capabilities=[pinning],
        **kwargs,
    )


Outcome = tuple[list[ModelMessage], Any]


async def run(pinning: Pinning) -> Outcome:
    result = await agent(pinning).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output


async def run_sync(pinning: Pinning) -> Outcome:
    result = await anyio.to_thread.run_sync(lambda: agent(pinning).run_sync(PROMPT, deps="Breton"))
    return result.all_messages(), result.output


async def run_stream_text(pinning: Pinning) -> Outcome:
    async with agent(pinning).run_stream(PROMPT, deps="Breton") as stream:
        chunks = [chunk async for chunk in stream.stream_text(delta=True)]
    return stream.all_messages(), chunks


async def run_stream_output(pinning: Pinning) -> Outcome:
    async with agent(pinning, output_type=Verdict).run_stream(PROMPT, deps="Breton") as stream:
        outputs = [o.model_dump() async for o in stream.stream_output(debounce_by=None)]
    return stream.all_messages(), outputs[-1]


async def run_stream_get_output(pinning: Pinning) -> Outcome:
    async with agent(pinning).run_stream(PROMPT, deps="Breton") as stream:
        output = await stream.get_output()
    return stream.all_messages(), output


async def run_stream_events(pinning: Pinning) -> Outcome:
    kinds: list[str] = []
    messages: list[ModelMessage] = []
    async with agent(pinning).run_stream_events(PROMPT, deps="Breton") as events:
        async for event in events:
            kinds.append(repr(event.delta) if isinstance(event, PartDeltaEvent) else type(event).__name__)
            if isinstance(event, AgentRunResultEvent):
                messages = event.result.all_messages()
    return messages, kinds


async def iterate(pinning: Pinning) -> Outcome:
    nodes: list[str] = []
    async with agent(pinning).iter(PROMPT, deps="Breton") as agent_run:
        async for node in agent_run:
            nodes.append(type(node).__name__)
    assert agent_run.result is not None
    return agent_run.result.all_messages(), nodes


async def event_stream_handler(pinning: Pinning) -> Outcome:
    kinds: list[str] = []

    async def handle(ctx: RunContext[str], events: AsyncIterator[Any]) -> None:
        async for event in events:
            kinds.append(repr(event.delta) if isinstance(event, PartDeltaEvent) else type(event).__name__)

    result = await agent(pinning).run(PROMPT, deps="Breton", event_stream_handler=handle)
    return result.all_messages(), [result.output, kinds]


async def tool_output(pinning: Pinning) -> Outcome:
    result = await agent(pinning, output_type=ToolOutput(Verdict)).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output.model_dump()


async def native_output(pinning: Pinning) -> Outcome:
    result = await agent(pinning, output_type=NativeOutput(Verdict)).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output.model_dump()


async def prompted_output(pinning: Pinning) -> Outcome:
    result = await agent(pinning, output_type=PromptedOutput(Verdict)).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output.model_dump()


async def multimodal_input(pinning: Pinning) -> Outcome:
    chart = BinaryContent(data=b"\x89PNG\r\n\x1a\n-catch-chart", media_type="image/png")
    result = await agent(pinning).run([PROMPT, chart], deps="Breton")
    return result.all_messages(), result.output


async def tool_model_retry(pinning: Pinning) -> Outcome:
    result = await agent(pinning, tools=[registry], retries=2).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output


async def output_validator_retry(pinning: Pinning) -> Outcome:
    checked: list[str] = []
    validated = agent(pinning)

    @validated.output_validator
    def firm_enough(output: str) -> str:
        checked.append(output)
        if len(checked) == 1:
            raise ModelRetry("say it again, more firmly")
        return output

    result = await validated.run(PROMPT, deps="Breton")
    return result.all_messages(), result.output


async def usage_limits(pinning: Pinning) -> Outcome:
    await agent(pinning).run(PROMPT, deps="Breton", usage_limits=UsageLimits(request_limit=1))
    raise AssertionError("the usage limit did not stop the run")


def _down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    COUNTS.model += 1
    raise ModelHTTPError.for_category(ModelUnavailableError, status_code=503, model_name="primary", body="down")


async def fallback_model(pinning: Pinning) -> Outcome:
    fallback = FallbackModel(FunctionModel(_down, model_name="primary"), model("secondary"))
    result = await agent(pinning, model=fallback).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output


async def delegation(pinning: Pinning) -> Outcome:
    async def ask_the_scientist(ctx: RunContext[str], species: str) -> str:
        """Ask the fisheries scientist (a sub-agent) about a species."""
        COUNTS.tools += 1
        scientist = Agent(model("scripted-scientist"), capabilities=[pinning])
        return (await scientist.run(f"What is the state of {species}?", usage=ctx.usage)).output

    result = await agent(pinning, tools=[ask_the_scientist]).run(PROMPT, deps="Breton")
    return result.all_messages(), result.output


async def message_history(pinning: Pinning) -> Outcome:
    first = await agent(pinning).run(PROMPT, deps="Breton")
    second = await agent(pinning).run("And on haddock?", deps="Breton", message_history=first.all_messages())
    return second.all_messages(), second.output


async def _dropping_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    COUNTS.model += 1
    yield "The UK "
    raise ConnectionError("the provider dropped the stream")


async def failed_stream(pinning: Pinning) -> Outcome:
    dropping = FunctionModel(scripted, stream_function=_dropping_stream, model_name="scripted-uk")
    async with agent(pinning, model=dropping, tools=[]).run_stream(PROMPT, deps="Breton") as stream:
        async for _ in stream.stream_text(delta=True, debounce_by=None):
            pass
    raise AssertionError("the stream did not fail")


async def _slow_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    COUNTS.model += 1
    for word in ("The ", "UK ", "holds ", "firm."):
        yield word
        await anyio.sleep(0.3)  # slower than the debounce groups deltas: the first delta is the first word


async def early_stop(pinning: Pinning) -> Outcome:
    slow = FunctionModel(scripted, stream_function=_slow_stream, model_name="scripted-uk")
    async with agent(pinning, model=slow, tools=[]).run_stream(PROMPT, deps="Breton") as stream:
        deltas = stream.stream_text(delta=True)  # pydantic-ai's default debounce
        first = await anext(deltas)
    return stream.all_messages(), first


async def stop_after_two_deltas(pinning: Pinning) -> Outcome:
    # Chunk boundaries are pinned (#45): the replay yields the same two deltas and stops where the live run did.
    deltas: list[str] = []
    async with agent(pinning, tools=[]).run_stream(PROMPT, deps="Breton") as stream:
        async for delta in stream.stream_text(delta=True, debounce_by=None):
            deltas.append(delta)
            if len(deltas) == 2:
                break
    return stream.all_messages(), deltas


async def _refusing_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    COUNTS.model += 1
    raise ModelHTTPError(500, "gemini", {"error": {"code": 500}})
    yield ""  # an async generator that fails before its first event, as an overloaded provider does


async def fallback_stream(pinning: Pinning) -> Outcome:
    down = FunctionModel(scripted, stream_function=_refusing_stream, model_name="gemini")
    async with agent(pinning, model=FallbackModel(down, model("mistral")), tools=[]).run_stream(
        PROMPT, deps="Breton"
    ) as stream:
        deltas = [delta async for delta in stream.stream_text(delta=True, debounce_by=None)]
    return stream.all_messages(), deltas


def _berths_first(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    COUNTS.model += 1
    returns = _returns(messages)
    if not returns:
        return ModelResponse(parts=[ToolCallPart("berths", {"port": "Brest"})])
    return ModelResponse(parts=[TextPart(f"{returns[0].content}; told: {info.instructions}")])


async def mcp_stdio(pinning: Pinning) -> Outcome:
    # A stdio MCP server (tests/mcp_harbour.py): its tool list, its instructions and its tool's answer are pinned.
    # keep_alive=False: the server ends with this run's session, not with the test run (see test_capability_mcp).
    harbour = MCPToolset(
        StdioTransport(
            sys.executable, [str(HARBOUR)], env={"ANAGRAPHEUS_MCP_STARTS": str(COUNTS.mcp_starts)}, keep_alive=False
        ),
        include_instructions=True,
        init_timeout=60,
    )
    berthing = Agent(FunctionModel(_berths_first, model_name="scripted-uk"), toolsets=[harbour], capabilities=[pinning])
    result = await berthing.run("Where can the fleet berth?")
    return result.all_messages(), result.output


SURFACES: dict[str, Callable[[Pinning], Awaitable[Outcome]]] = {
    f.__name__: f
    for f in (
        run,
        run_sync,
        run_stream_text,
        run_stream_output,
        run_stream_get_output,
        run_stream_events,
        iterate,
        event_stream_handler,
        tool_output,
        native_output,
        prompted_output,
        multimodal_input,
        tool_model_retry,
        output_validator_retry,
        usage_limits,
        fallback_model,
        delegation,
        message_history,
        failed_stream,
        early_stop,
        stop_after_two_deltas,
        fallback_stream,
        mcp_stdio,
    )
}


def _error(e: BaseException) -> dict[str, Any]:
    return {"type": f"{type(e).__module__}.{type(e).__qualname__}", "status": getattr(e, "status_code", None)}


async def run_surface(surface: str, mode: str, db: Path) -> dict[str, Any]:
    """Run one surface against its own log, recording (then committing) or replaying strictly."""
    COUNTS.model = COUNTS.tools = 0
    servers_before = COUNTS.servers_started()
    types = EventTypeRegistry()
    with SQLiteEventStore(db) as store:
        ledger = PinLedger(store, types) if mode == "record" else None
        resolver: PinResolver = ledger if ledger is not None else ReplayPins.from_events(store.read(), types)
        outcome: dict[str, Any] = {}
        try:
            messages, output = await SURFACES[surface](Pinning(resolver))
            # The JSON text itself: byte-equal messages are equal texts.
            outcome["messages"] = ModelMessagesTypeAdapter.dump_json(messages).decode()
            outcome["output"] = output
        except Exception as e:
            outcome["error"] = _error(e)
        if ledger is not None:
            ledger.commit()
    outcome["model_calls"], outcome["tool_calls"] = COUNTS.model, COUNTS.tools
    outcome["mcp_servers_started"] = COUNTS.servers_started() - servers_before
    return outcome


async def main(mode: str, directory: Path) -> None:
    """Run every surface, each against `directory/SURFACE.db`, and write `directory/MODE.json`."""
    COUNTS.mcp_starts = directory / f"mcp-starts-{mode}.log"
    outcomes = {surface: await run_surface(surface, mode, directory / f"{surface}.db") for surface in SURFACES}
    (directory / f"{mode}.json").write_text(json.dumps(outcomes, sort_keys=True, default=str))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]))
