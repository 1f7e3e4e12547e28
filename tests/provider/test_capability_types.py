"""Values keep their types under `Pinning`, live and on replay (#34): tool returns and provider details."""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

LANDED = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


class Species(enum.Enum):
    COD = "cod"
    HADDOCK = "haddock"


class Landing(BaseModel):
    species: Species
    tonnes: Decimal
    at: datetime


@dataclass
class Quota:
    species: str
    share: Decimal
    until: date


RETURNS: dict[str, object] = {
    "datetime": LANDED,
    "Decimal": Decimal("12.50"),
    "UUID": uuid.UUID("019b8d62-7a80-7a89-9391-e2ef91c13afc"),
    "Enum": Species.HADDOCK,
    "pydantic model": Landing(species=Species.COD, tonnes=Decimal("3.25"), at=LANDED),
    "dataclass": Quota("cod", Decimal("0.47"), date(2026, 12, 31)),
    "list of datetimes": [LANDED, datetime(2026, 1, 6, tzinfo=UTC)],
    "dict holding a Decimal": {"species": "cod", "tonnes": Decimal("7.5")},
}


# What the tool declares it returns: a replay rebuilds a typed value only as a class its signature names.
Returned = datetime | Decimal | uuid.UUID | Species | Landing | Quota | list[datetime] | dict[str, str | Decimal]


class Refused(Exception):
    """The world was reached during a strict replay."""


def run(returned: object, capabilities: list[Any], *, refusing: bool = False) -> tuple[AgentRunResult[str], list[str]]:
    bodies: list[str] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if refusing:
            raise Refused("the model was reached")
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        bodies.append(repr([p.model_response_str() for p in returns]))
        if returns:
            return ModelResponse(parts=[TextPart(f"noted {returns[0].model_response_str()}")])
        return ModelResponse(parts=[ToolCallPart("landing", {"port": "Peterhead"})])

    agent = Agent(FunctionModel(answer, model_name="scripted-harbour"), capabilities=capabilities)

    @agent.tool_plain
    def landing(port: str) -> Returned:  # pyright: ignore[reportUnusedFunction]
        """Read the last landing at a port."""
        if refusing:
            raise Refused("the tool was reached")
        return returned

    return agent.run_sync("What landed?"), bodies


def tool_return(result: AgentRunResult[str]) -> ToolReturnPart:
    return next(p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart))


def dumped_return(result: AgentRunResult[str]) -> dict[str, Any]:
    """The tool return as pydantic-ai dumps it, without its timestamp and call id (pinned, so they differ)."""
    part = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")[2]["parts"][0]
    return {name: value for name, value in part.items() if name not in ("timestamp", "tool_call_id")}


@pytest.mark.parametrize("returned", list(RETURNS.values()), ids=list(RETURNS))
def test_a_tool_return_keeps_its_type_pinned_live_and_replayed(
    returned: object, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    plain, plain_bodies = run(returned, [])

    ledger = PinLedger(store, types)
    live, live_bodies = run(returned, [Pinning(ledger)])
    ledger.commit()

    assert type(tool_return(live).content) is type(tool_return(plain).content) is type(returned)
    assert tool_return(live).content == tool_return(plain).content == returned
    assert dumped_return(live) == dumped_return(plain)
    assert live_bodies == plain_bodies
    assert live.output == plain.output

    replayed, _ = run(returned, [Pinning(ReplayPins.from_store(store, types))], refusing=True)
    assert type(tool_return(replayed).content) is type(returned)
    assert tool_return(replayed).content == returned
    assert ModelMessagesTypeAdapter.dump_json(replayed.all_messages()) == ModelMessagesTypeAdapter.dump_json(
        live.all_messages()
    )


def stamped(details: dict[str, Any]) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Fisheries hold.")], provider_details=dict(details))

    return answer


def test_provider_details_nested_in_a_list_or_dict_keep_their_types_pinned_live_and_replayed(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    details = {
        "usage": {"billed_at": LANDED, "cost": Decimal("0.0021"), "tiers": [Decimal("1.5"), "flat"]},
        "windows": [(1, 2), {"from": LANDED}],
        "finish_reason": "stop",
    }
    plain = Agent(FunctionModel(stamped(details), model_name="scripted-details")).run_sync("Hold?")

    ledger = PinLedger(store, types)
    pinned = Agent(
        FunctionModel(stamped(details), model_name="scripted-details"), capabilities=[Pinning(ledger)]
    ).run_sync("Hold?")
    ledger.commit()
    again = Agent(FunctionModel(stamped({}), model_name="scripted-details")).run_sync(
        "Hold?", capabilities=[Pinning(ReplayPins.from_store(store, types))]
    )

    def shape(value: Any) -> Any:
        """The value with the class of every leaf, list, tuple and dict beside it."""
        if isinstance(value, dict):
            return {k: shape(v) for k, v in cast(dict[str, Any], value).items()}
        if isinstance(value, (list, tuple)):
            return (type(value), [shape(v) for v in cast(list[Any], value)])
        return (type(value), value)

    for result in (plain, pinned, again):
        response = result.all_messages()[-1]
        assert isinstance(response, ModelResponse)
        assert shape(response.provider_details) == shape(details)
    assert ModelMessagesTypeAdapter.dump_json(again.all_messages()) == ModelMessagesTypeAdapter.dump_json(
        pinned.all_messages()
    )


def test_provider_details_keep_their_types_pinned_live_and_replayed(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    details = {"timestamp": LANDED, "finish_reason": "stop", "cost": Decimal("0.0021")}
    plain = Agent(FunctionModel(stamped(details), model_name="scripted-details")).run_sync("Hold?")

    ledger = PinLedger(store, types)
    live = Agent(FunctionModel(stamped(details), model_name="scripted-details"), capabilities=[Pinning(ledger)])
    pinned = live.run_sync("Hold?")
    ledger.commit()

    def response_details(result: AgentRunResult[str]) -> dict[str, Any]:
        response = result.all_messages()[-1]
        assert isinstance(response, ModelResponse) and response.provider_details is not None
        return response.provider_details

    assert response_details(pinned) == response_details(plain) == details
    assert {k: type(v) for k, v in response_details(pinned).items()} == {k: type(v) for k, v in details.items()}

    replay = Agent(FunctionModel(stamped({}), model_name="scripted-details"))
    again = replay.run_sync("Hold?", capabilities=[Pinning(ReplayPins.from_store(store, types))])
    assert response_details(again) == details
    assert {k: type(v) for k, v in response_details(again).items()} == {k: type(v) for k, v in details.items()}
    assert ModelMessagesTypeAdapter.dump_json(again.all_messages()) == ModelMessagesTypeAdapter.dump_json(
        pinned.all_messages()
    )


# Any JSON, with text NFC would change (U+F900, a combining accent, a KELVIN SIGN) in keys and values alike.
_texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6) | st.sampled_from(
    ["\uf900", "cafe\u0301", "\u212a", "\u00c5\u212b"]
)
# A field named like a credential (`SECRET`, `token`, `passwd`) is refused by the recording's secret scanner, by
# design, whatever it holds: such names stay out of what this property draws.
_names = _texts.filter(lambda name: re.search(r"(?i)secret|token|pass|pwd|key|auth|sig", name) is None)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(details=st.dictionaries(_names, _json, max_size=3), result=_json, text=_texts)
@example(details={"z": {"secret": False}}, result=None, text="\uf900")  # searched as NFC, kept as drawn
def test_any_json_in_provider_details_tool_results_and_messages_comes_back_exactly(
    tmp_path_factory: pytest.TempPathFactory, details: dict[str, Any], result: Any, text: str
) -> None:
    """Stored answers are never normalised (#45): only keys are computed from NFC text."""
    from anagrapheus.provider.inputs import recorded_runs
    from anagrapheus.testing.rerun import read_events
    from anagrapheus.timeline import RecordingHeader, write_recording

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 3:
            return ModelResponse(parts=[ToolCallPart("look", {"q": text})], provider_details=dict(details))
        return ModelResponse(parts=[TextPart(text), TextPart("said")], provider_details={"again": details})

    def agent() -> Agent[None, str]:
        made = Agent(FunctionModel(answer, model_name="scripted-any-json"))

        @made.tool_plain
        def look(q: str) -> Any:  # pyright: ignore[reportUnusedFunction]
            return result

        return made

    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(text)]),
        ModelResponse(parts=[TextPart(text)], provider_details=dict(details)),
    ]
    plain = agent().run_sync(text, message_history=history)
    folder = tmp_path_factory.mktemp("any-json")
    with SQLiteEventStore(folder / "run.db") as store:
        ledger = PinLedger(store, EventTypeRegistry())
        live = agent().run_sync(text, message_history=history, capabilities=[Pinning(ledger)])
        ledger.commit()
        path = write_recording(
            folder / "run.jsonl",
            store.read(namespace="anagrapheus"),
            header=RecordingHeader(description="Any JSON.", recorded_with="A scripted model.", rerecord="pytest"),
        )
    with refuse_model_requests():
        again = agent().run_sync(text, message_history=history, capabilities=[Pinning(ReplayPins.from_recording(path))])

    def contents(result: AgentRunResult[str]) -> list[object]:
        """What each message holds, less its wall-clock stamps and run ids (drawn anew by every unpinned run)."""
        dumped = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        stamps = {"timestamp", "run_id", "conversation_id", "tool_call_id"}
        return [[{k: v for k, v in part.items() if k not in stamps} for part in m["parts"]] for m in dumped]

    assert contents(live) == contents(plain)
    assert ModelMessagesTypeAdapter.dump_json(again.all_messages()) == ModelMessagesTypeAdapter.dump_json(
        live.all_messages()
    )
    (run,) = recorded_runs(read_events(path))
    assert run.prompt == text
