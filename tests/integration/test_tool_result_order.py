"""A pinned tool's result reaches the model exactly as the unpinned tool's does: live, reused and replayed.

Found by the fidelity suite: a tool's result was pinned as canonical JSON (keys sorted, `1.0` as `1`,
strings in NFC, tuples as lists), so a pinned live run sent the model another tool message than the
same run unpinned. A tool's result is now pinned as ordered text (`{"$anagrapheus.tool_result": 2,
"ordered_json": text}`); its key is unchanged, and a pin of the canonical form still replays.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic import BaseModel, TypeAdapter
from pydantic_ai import Agent, ToolOutput
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from anagrapheus import Pinning
from anagrapheus.cli import main
from anagrapheus.errors import PinResultError
from anagrapheus.provider import pinned_tool
from anagrapheus.provider.outputs import output_result_from_raw
from anagrapheus.provider.tools import TOOL_CALL, tool_pin, tool_result_from_raw, tool_result_raw
from anagrapheus.provider.typed import DeclaredTypes
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinResolver, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.ordered import ORDERED_FIELD, ordered_json, read_ordered
from tests.cli.test_cli import NEGOTIATION, ROOT
from tests.cli_fixtures import NEGOTIATION_LINES, rewritten
from tests.fidelity_runs import HARBOUR

PROMPT = "How is the cod stock off Hull?"
SURVEY = HARBOUR.with_name("mcp_survey.py")
WHEN = datetime(2026, 1, 5, tzinfo=UTC)
_definitions: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])


def survey(port: str) -> dict[str, Any]:
    """Read the stock survey at a port."""
    # Keys out of order, an integral float, a string not in NFC, a tuple inside a list: canonical JSON changes each.
    return {"port": port, "trend": "down", "biomass": 1.0, "name": "Sa\u0301o", "depths": [(4.0, 7.5)]}


class Seen:
    """A FunctionModel that calls every tool offered once, and keeps the messages it received, as JSON."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.tools: list[bytes] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(ModelMessagesTypeAdapter.dump_json(messages))
        self.tools.append(_definitions.dump_json(info.function_tools))
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(tool.name, {"port": "Hull"}, tool_call_id=f"call-{tool.name}")
                    for tool in info.function_tools
                ]
            )
        return ModelResponse(parts=[TextPart("done")])


def returns(messages: list[ModelMessage]) -> list[bytes]:
    """The tool-return parts of `messages`, each as pydantic-ai writes it (its content in its own key order)."""
    parts = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    # The timestamp is the run's own (pinned, so equal on replay, but not equal to an unpinned run's).
    return [ModelMessagesTypeAdapter.dump_json([ModelRequest(parts=[replace(p, timestamp=WHEN)])]) for p in parts]


def three_ways(
    store: SQLiteEventStore,
    types: EventTypeRegistry,
    make: Callable[[PinResolver | None, Seen], Agent[None, Any]],
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The tool returns the model received unpinned and pinned live, and those a replay of the pinned run holds."""
    unpinned, live = Seen(), Seen()
    make(None, unpinned).run_sync(PROMPT)
    ledger = PinLedger(store, types)
    make(ledger, live).run_sync(PROMPT)
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    replayed = make(replay, Seen()).run_sync(PROMPT)
    assert replay.unused() == {}
    assert len(unpinned.received) == len(live.received) == 2
    # The tools offered reach the model as they do unpinned too (an MCP server's listing, its schemas' key order).
    assert live.tools == unpinned.tools
    received = [returns(ModelMessagesTypeAdapter.validate_json(seen.received[1])) for seen in (unpinned, live)]
    return received[0], received[1], returns(replayed.all_messages())


def assert_sent_alike(unpinned: list[bytes], live: list[bytes], replayed: list[bytes]) -> None:
    assert unpinned
    # Byte for byte, as the model is sent them: key order, `1.0`, the string's own code points.
    assert live == unpinned
    assert replayed == unpinned
    content = json.loads(unpinned[0])[0]["parts"][0]["content"]
    assert list(content) == ["port", "trend", "biomass", "name", "depths"]
    assert b'"biomass":1.0' in unpinned[0] and content["name"] == "Sa\u0301o"


def test_a_capability_pinned_tool_sends_the_model_what_it_sends_unpinned(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def make(resolver: PinResolver | None, model: Seen) -> Agent[None, Any]:
        capabilities = [] if resolver is None else [Pinning(resolver)]
        return Agent(FunctionModel(model, model_name="m"), tools=[survey], capabilities=capabilities)

    assert_sent_alike(*three_ways(store, types, make))


def test_a_pinned_tool_sends_the_model_what_it_sends_unpinned(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def make(resolver: PinResolver | None, model: Seen) -> Agent[None, Any]:
        tool = survey if resolver is None else pinned_tool(resolver, survey)
        return Agent(FunctionModel(model, model_name="m"), tools=[tool])

    assert_sent_alike(*three_ways(store, types, make))


def test_an_mcp_tool_sends_the_model_what_it_sends_unpinned(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    def make(resolver: PinResolver | None, model: Seen) -> Agent[None, Any]:
        # keep_alive=False: the server ends with the run's session, not with the test run.
        transport = StdioTransport(sys.executable, [str(SURVEY)], keep_alive=False)
        server: AbstractToolset[None] = MCPToolset(transport, id="survey", init_timeout=60)
        capabilities = [] if resolver is None else [Pinning(resolver)]
        return Agent(
            FunctionModel(model, model_name="m"), deps_type=type(None), toolsets=[server], capabilities=capabilities
        )

    assert_sent_alike(*three_ways(store, types, make))


def test_a_tool_pin_keeps_its_key_and_an_older_sorted_pin_still_replays() -> None:
    result = survey("Hull")
    raw = tool_result_raw("survey", result)
    # The key is the call's, never the result's: the same as before the result was kept in order.
    assert tool_pin("survey", {"port": "Hull"}).key.startswith(f"p1:{TOOL_CALL}:")
    rebuilt = tool_result_from_raw(json.loads(canonical_json(raw)))
    assert rebuilt == result and list(rebuilt) == list(result) and type(rebuilt["depths"][0]) is tuple
    # A pin written as canonical JSON (before): read back as that JSON, as it always was.
    old = json.loads(canonical_json(result))
    assert tool_result_from_raw(old) == old and list(old) == sorted(result)


def test_an_output_function_and_a_listing_come_back_in_their_own_order(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def filed(port: str, tonnes: float) -> dict[str, Any]:
        """File the quota."""
        return {"port": port, "tonnes": tonnes, "at": "Sa\u0301o"}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"port": "Hull", "tonnes": 2.0})])

    def make(resolver: PinResolver) -> Agent[None, Any]:
        return Agent(FunctionModel(model), output_type=ToolOutput(filed), capabilities=[Pinning(resolver)])

    ledger = PinLedger(store, types)
    live = make(ledger).run_sync(PROMPT).output
    ledger.commit()
    replayed = make(ReplayPins.from_events(store.read(), types)).run_sync(PROMPT).output
    for output in (live, replayed):
        assert output == filed("Hull", 2.0) and list(output) == ["port", "tonnes", "at"]
        assert type(output["tonnes"]) is float
    # An output pin written as canonical JSON (before) still reads as that JSON.
    assert output_result_from_raw(None, {"at": "x", "port": "Hull"}) == {"at": "x", "port": "Hull"}


def test_diff_reads_inside_a_tool_pin_and_names_the_field_that_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    (line, *_) = [n for n, text in enumerate(NEGOTIATION_LINES, start=1) if '"kind":"tool_call"' in text]
    raw = json.loads(NEGOTIATION_LINES[line - 1])["payload"]["raw"]
    envelope: Any = read_ordered(raw)
    assert envelope["value"]["v"]["trend"] == "falling"
    envelope["value"]["v"]["trend"] = "rising"
    changed = rewritten(tmp_path, "changed.jsonl", line, {"raw": {**raw, ORDERED_FIELD: ordered_json(envelope)}})

    code = main(["diff", NEGOTIATION, str(changed)])

    assert code == 1
    assert "value.v.trend" in capsys.readouterr().out


def test_a_tool_pin_whose_ordered_text_is_not_a_result_is_refused() -> None:
    for text in ("[1]", '{"other": 1}', "{not json"):
        with pytest.raises(PinResultError):
            tool_result_from_raw({"$anagrapheus.tool_result": 2, ORDERED_FIELD: text})
    # Anything else beside the text is a plain JSON result that happens to look alike: returned as it is.
    odd = {"$anagrapheus.tool_result": 2, ORDERED_FIELD: "[1]", "other": 1}
    assert tool_result_from_raw(odd) == odd


class Stock(BaseModel):
    trend: str
    biomass: float


def test_a_model_inside_a_tuple_comes_back_as_itself_beside_a_dict_in_its_key_order() -> None:
    declared = DeclaredTypes(tuple[Stock, dict[str, float]], source="the signature of tool 'survey'")
    result = (Stock(trend="down", biomass=1.0), {"b": 1, "a": 2.0})
    raw = json.loads(canonical_json(tool_result_raw("survey", result, declared=declared)))
    back = tool_result_from_raw(raw, declared)
    assert back == (Stock(trend="down", biomass=1.0), {"b": 1, "a": 2.0})
    assert type(back[0]) is Stock
    assert list(back[0].model_dump()) == ["trend", "biomass"] and list(back[1]) == ["b", "a"]
    assert type(back[1]["a"]) is float


def test_a_repeat_answered_from_the_first_pin_sends_the_model_what_it_sends_unpinned(ledger: PinLedger) -> None:
    def twice(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) < 5:
            return ModelResponse(parts=[ToolCallPart("survey", {"port": "Hull"}, tool_call_id=f"c{len(messages)}")])
        return ModelResponse(parts=[TextPart("done")])

    def sent(capabilities: list[Pinning]) -> list[bytes]:
        result = Agent(FunctionModel(twice), tools=[survey], capabilities=capabilities).run_sync(PROMPT)
        return returns(result.all_messages())

    unpinned = sent([])
    # The second call is answered from the first call's pin (the opt-out of the repeat rule): the same message.
    reused = sent([Pinning(ledger, dedupe_repeats=True)])
    assert [pin.kind for pin in ledger.pins()].count(TOOL_CALL) == 1
    assert len(unpinned) == 2 and reused == unpinned
