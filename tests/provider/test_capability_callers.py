"""The caller rule: what identifies a tool call's caller is part of its key, or the call is refused (#34)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_serializer
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import HiddenCallerField, PinMiss, UnkeyedCaller
from anagrapheus.provider import pinned_tool
from anagrapheus.provider.keying.caller import identity_material
from anagrapheus.provider.keying.keys import walked
from anagrapheus.provider.tools import CALLER, WHOLE_DEPS, caller_of, tool_pin
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import pin_key


@dataclass
class Bank:
    """Deps as many applications have them: who calls, and a live handle no key can hold."""

    user: str
    lock: threading.Lock = field(default_factory=threading.Lock)


BALANCES = {"alice": 1200, "bob": 35}


def teller() -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(f"Your balance: {returned[0].content}")])
        return ModelResponse(parts=[ToolCallPart("balance", {})])

    return FunctionModel(answer, model_name="scripted-teller")


def bank_agent(reads: list[str]) -> Agent[Bank, str]:
    agent = Agent(teller(), deps_type=Bank)

    @agent.tool
    def balance(ctx: RunContext[Bank]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read the caller's balance."""
        reads.append(ctx.deps.user)
        return f"{BALANCES[ctx.deps.user]} EUR"

    return agent


def test_deps_that_cannot_be_keyed_refuse_the_call_before_the_tool_runs(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reads: list[str] = []
    ledger = PinLedger(store, types)
    with pytest.raises(UnkeyedCaller, match=r"tool 'balance' was called with deps of type Bank") as refused:
        bank_agent(reads).run_sync("Balance?", deps=Bank("alice"), capabilities=[Pinning(ledger)])
    assert reads == []
    assert "caller=lambda deps: deps.user_id" in str(refused.value)
    assert (
        refused.value.reason
        == "$: Bank has no JSON form (convert it deliberately first: for a model call, in a CallPolicy)"
    )


def test_a_caller_drawn_from_the_deps_keeps_each_callers_answers_apart_live_and_on_replay(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reads: list[str] = []
    ledger = PinLedger(store, types)
    pinning = Pinning(ledger, caller=lambda bank: bank.user)
    agent = bank_agent(reads)
    live = [agent.run_sync("Balance?", deps=Bank(user), capabilities=[pinning]).output for user in ("alice", "bob")]
    ledger.commit()
    assert live == ["Your balance: 1200 EUR", "Your balance: 35 EUR"]
    assert reads == ["alice", "bob"]

    # Bob's run in alice's place: his calls are keyed as his, so he is told his own balance, never hers.
    alone = ReplayPins.from_store(store, types)
    bob_first = agent.run_sync(
        "Balance?", deps=Bank("bob"), capabilities=[Pinning(alone, caller=lambda bank: bank.user)]
    )
    assert bob_first.output == "Your balance: 35 EUR"
    # And a caller the recording never served is a miss.
    with pytest.raises(PinMiss):
        agent.run_sync("Balance?", deps=Bank("carol"), capabilities=[Pinning(alone, caller=lambda bank: bank.user)])

    replay = ReplayPins.from_store(store, types)
    replayed = [
        agent.run_sync(
            "Balance?", deps=Bank(user), capabilities=[Pinning(replay, caller=lambda bank: bank.user)]
        ).output
        for user in ("alice", "bob")
    ]
    assert replayed == live
    assert reads == ["alice", "bob"]


def test_a_recording_made_before_callers_were_keyed_replays_from_its_pins(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # `caller=None` keys as every tool call was keyed before the rule: name and arguments only.
    reads: list[str] = []
    ledger = PinLedger(store, types)
    output = bank_agent(reads).run_sync("Balance?", deps=Bank("alice"), capabilities=[Pinning(ledger, caller=None)])
    ledger.commit()
    keys = {e.payload_json()["key"] for e in store.read() if e.type == "pin_promoted"}
    assert tool_pin("balance", {}).key in keys

    replay = ReplayPins.from_store(store, types)
    again = bank_agent(reads).run_sync(
        "Balance?", deps=Bank("alice"), capabilities=[Pinning(replay, caller=lambda bank: bank.user)]
    )
    assert again.output == output.output
    assert reads == ["alice"]
    # Every pin answers but the run's place under its inputs as the old rule keyed its caller: the run, asked as
    # another caller, is placed where it starts, and the pytest plugin does not count such a place as stale.
    assert list(replay.unused().values()) == ["run_place"]


def test_a_pinned_tool_keys_its_caller_as_the_capability_does(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reads: list[str] = []

    def balance(ctx: RunContext[str]) -> str:
        """Read the caller's balance."""
        reads.append(ctx.deps)
        return f"{BALANCES[ctx.deps]} EUR"

    ledger = PinLedger(store, types)
    live = Agent(teller(), deps_type=str, tools=[pinned_tool(ledger, balance)]).run_sync("Balance?", deps="alice")
    ledger.commit()
    assert live.output == "Your balance: 1200 EUR"

    replay = ReplayPins.from_store(store, types)
    replayed = Agent(teller(), deps_type=str, tools=[pinned_tool(replay, balance)])
    with pytest.raises(PinMiss):
        replayed.run_sync("Balance?", deps="bob")
    assert reads == ["alice"]


def test_a_caller_rule_failing_on_a_runs_deps_never_fails_a_run_that_calls_no_tool(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The rule reads a field these deps lack. Unpinned, a run that calls no tool never reads it, and so runs.
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("no tool needed")])

    def agent() -> Agent[object, str]:
        return Agent(FunctionModel(answer, model_name="scripted-clerk"), deps_type=object)

    plain = agent().run_sync("Hello?", deps=object())
    ledger = PinLedger(store, types)
    rule = Pinning(ledger, caller=lambda deps: deps.user_id)
    pinned = agent().run_sync("Hello?", deps=object(), capabilities=[rule])
    ledger.commit()
    assert pinned.output == plain.output

    replay = ReplayPins.from_store(store, types)
    again = agent().run_sync("Hello?", deps=object(), capabilities=[Pinning(replay, caller=lambda deps: deps.user_id)])
    assert again.all_messages() == pinned.all_messages()


class Login(BaseModel):
    """Deps whose distinguishing field is left out of their dump."""

    bank: str = "north"
    account: str = Field(exclude=True)


class Session(BaseModel):
    """Deps whose distinguishing state is a private attribute."""

    bank: str = "north"
    _account: str = PrivateAttr(default="")

    @classmethod
    def of(cls, account: str) -> Session:
        session = cls()
        session._account = account
        return session


@dataclass
class Visit:
    """A dataclass whose distinguishing state is set outside its fields."""

    bank: str = "north"

    @classmethod
    def of(cls, account: str) -> Visit:
        visit = cls()
        visit.account = account  # pyright: ignore[reportAttributeAccessIssue]
        return visit


def counter(reads: list[str]) -> Agent[object, str]:
    agent = Agent(teller(), deps_type=object)

    @agent.tool
    def balance(ctx: RunContext[object]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read the caller's balance."""
        deps = ctx.deps
        user = getattr(deps, "account", None) or getattr(deps, "_account", "")
        reads.append(user)
        return f"{BALANCES[user]} EUR"

    return agent


@pytest.mark.parametrize(
    "deps_of",
    [lambda user: Login(account=user), Session.of, Visit.of],
    ids=["excluded field", "private attribute", "attribute outside the fields"],
)
def test_callers_told_apart_only_by_what_their_dump_hides_never_share_an_answer(
    store: SQLiteEventStore, types: EventTypeRegistry, deps_of: Callable[[str], object]
) -> None:
    reads: list[str] = []
    ledger = PinLedger(store, types)
    alice = counter(reads).run_sync("Balance?", deps=deps_of("alice"), capabilities=[Pinning(ledger)])
    ledger.commit()
    assert alice.output == "Your balance: 1200 EUR"

    # Bob replaying alice's recording: his deps dump as hers do, yet he is a caller it never served.
    replay = ReplayPins.from_store(store, types)
    with pytest.raises(PinMiss):
        counter(reads).run_sync("Balance?", deps=deps_of("bob"), capabilities=[Pinning(replay)])
    again = counter(reads).run_sync(
        "Balance?", deps=deps_of("alice"), capabilities=[Pinning(ReplayPins.from_store(store, types))]
    )
    assert again.output == alice.output
    assert reads == ["alice"]


class Client(BaseModel):
    """Deps holding a live handle, left out of their dump."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bank: str = "north"
    lock: Any = Field(exclude=True, default_factory=threading.Lock)


def test_a_hidden_field_no_key_can_see_refuses_the_call_naming_the_field_and_what_to_declare(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reads: list[str] = []
    with pytest.raises(HiddenCallerField) as refused:
        counter(reads).run_sync("Balance?", deps=Client(), capabilities=[Pinning(PinLedger(store, types))])
    assert reads == []
    assert isinstance(refused.value, UnkeyedCaller)
    assert refused.value.field == "$.lock"
    message = str(refused.value)
    assert "whose field $.lock is left out of its dump (Field(exclude=True)" in message
    assert "Pinning(caller=lambda deps: deps.user_id)" in message


class Vault(BaseModel):
    """Deps holding a secret."""

    user: str
    pin: SecretStr


def test_secret_deps_are_refused_saying_they_are_a_secret_and_what_to_declare(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reads: list[str] = []
    deps = Vault(user="alice", pin=SecretStr("4821"))
    with pytest.raises(UnkeyedCaller) as refused:
        counter(reads).run_sync("Balance?", deps=deps, capabilities=[Pinning(PinLedger(store, types))])
    assert refused.value.reason.startswith("$.pin: SecretStr is a secret, which never joins a key")
    assert "nested too deeply" not in str(refused.value)
    assert "Pinning(caller=lambda deps: deps.user_id)" in str(refused.value)


class Teller(BaseModel):
    """Deps whose dump is the whole caller."""

    user: str


def test_deps_whose_dump_hides_nothing_key_their_caller_as_before() -> None:
    # The digest recordings made before hidden state was keyed hold: the dump's alone, so they keep replaying.
    before = "p1:caller:a5cd97f8496e61268797de605913bd8a29ac3af68ec6af1bea67fdb50c2c0ebf"
    assert pin_key(CALLER, {"user": "alice"}) == before
    assert caller_of(Teller(user="alice"), WHOLE_DEPS) == before
    assert caller_of(Login(bank="north", account="alice"), WHOLE_DEPS) != pin_key(CALLER, {"bank": "north"})


class Aliased(BaseModel):
    """A model dumped by its aliases: an aliased field is in the dump, not hidden."""

    model_config = ConfigDict(serialize_by_alias=True)

    account: str = Field(serialization_alias="acct")
    token: str = Field(exclude=True, default="")


class Masked(BaseModel):
    """A model whose own serializer writes no field: every field is hidden from its dump."""

    account: str

    @model_serializer
    def _masked(self) -> str:
        return "masked"


def test_hidden_state_is_found_inside_containers_under_aliases_and_behind_a_custom_serializer() -> None:
    def digest(deps: object) -> str | None:
        return caller_of(deps, WHOLE_DEPS)

    # Inside a dict or a list: each caller keys apart.
    assert digest({"who": [Login(account="alice")]}) != digest({"who": [Login(account="bob")]})
    assert identity_material({"who": [Login(account="alice")]})["$hidden"] == {"$.who[0].account": "alice"}
    # An aliased field is in the dump, not hidden; the excluded one is.
    assert identity_material(Aliased(account="alice", token="t1"))["$hidden"] == {"$.token": "t1"}
    # A serializer writing the same for every caller hides every field: the fields join the digest.
    assert digest(Masked(account="alice")) != digest(Masked(account="bob"))
    # A pydantic-ai message is keyed by its own layout, which hides nothing.
    assert identity_material({"part": TextPart("hello")}) == walked({"part": TextPart("hello")})


def test_a_caller_rule_drawing_an_identity_sees_what_that_identity_hides() -> None:
    by_login = caller_of(Teller(user="x"), lambda deps: Login(account=deps.user))
    assert by_login != caller_of(Teller(user="y"), lambda deps: Login(account=deps.user))
