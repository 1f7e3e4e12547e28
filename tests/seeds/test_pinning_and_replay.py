"""The reference page "Pinning and Replay" (../shared/reference/pinning-and-replay.md), behaviour by behaviour.

Each test names the section of the page it holds (in our words). Where the project deliberately keeps another
rule than the page states, the test holds the project's rule and says so; docs/explanation/design.md lists each
such difference with why ("Where the project differs from the reference page").
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
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
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from anagrapheus import Pinning, mint_entity_id, register_builtin_events
from anagrapheus.errors import PartialPin, UsageError
from anagrapheus.provider import PinnedModel, PinnedStreamedResponse, SemanticCallPolicy, pinned_tool
from anagrapheus.provider.tools import WHOLE_DEPS
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinMiss,
    PinPromoted,
    PinsAbandoned,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
    UpcastRegistry,
    pin_events,
    pin_key,
    read_recording,
    write_recording,
)
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent
from tests.docs.test_reference_example import run_example
from tests.retry_turn import WAYS, Harbour, try_until_done

AS_WRITTEN = Path(__file__).with_name("pinning_replay_as_written.py")
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class Negotiator:
    """A scripted model that counts how often it is reached and answers each prompt with its own text."""

    def __init__(self, name: str = "scripted-uk") -> None:
        self.calls = 0
        self.model = FunctionModel(self._answer, stream_function=self._stream, model_name=name)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=[TextPart(f"answer #{self.calls} to {_prompt(messages)}")])

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        for word in ("The ", "UK ", "holds ", "firm."):
            yield word


def _prompt(messages: list[ModelMessage]) -> str:
    return next(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))  # type: ignore[misc]


def never() -> Any:
    raise AssertionError("the effect ran")


def key_of(
    messages: list[ModelMessage],
    *,
    model: str = "scripted-uk",
    settings: ModelSettings | None = None,
    parameters: ModelRequestParameters | None = None,
) -> str:
    """The key `PinnedModel` pins a request under (the default policy)."""
    pinned = PinnedModel(FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name=model), ReplayPins({}))
    return pinned.pin_for(messages, settings, parameters or ModelRequestParameters()).key


def asked(text: str) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(text)])]


# What pinning means


def test_the_worked_example_runs_as_written_and_prints_its_two_lines_and_nothing_else() -> None:
    """§ Replay is not running again: the page's `pinning_replay.py`, verbatim: two lines, no warning."""
    run_example(AS_WRITTEN, warnings="default")


def test_the_same_question_gets_the_same_key_and_the_second_asking_reuses_the_first_draw(ledger: PinLedger) -> None:
    """§ What pinning means: a key is what was asked, so asking it again in the unit reuses the draw."""
    draws = []
    key = pin_key("tool_call", {"tool": "quota", "args": {"species": "cod"}})
    for _ in range(2):
        ledger.resolve(key, kind="tool_call", effect=lambda: draws.append(1) or len(draws), interpret=lambda r: r)
    assert draws == [1]


def test_a_different_question_gets_a_different_key_and_is_never_answered_stale() -> None:
    """§ What pinning means: asking something different gets a key of its own."""
    assert key_of(asked("the UK position")) != key_of(asked("the EU position"))


@pytest.mark.parametrize("way", WAYS)
def test_within_a_unit_a_retried_turn_is_answered_from_the_pins_of_the_turn_that_failed(
    way: str, ledger: PinLedger
) -> None:
    """§ What pinning means: a turn that failed halfway and is retried does not draw its model calls again."""
    harbour = Harbour()
    assert try_until_done(harbour.agent(way, ledger))[0] == 1
    # The first request once (not once per attempt); the tide read once; the dropped radio call again.
    assert harbour.reached == {"model": 2, "tide": 1, "radio": 2}


def test_across_runs_replay_answers_from_the_log_without_reaching_the_model(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ What pinning means: committed pins are events, and a later run fed them gets the same answers."""
    uk = Negotiator()
    ledger = PinLedger(store, types)
    live = Agent(PinnedModel(uk.model, ledger)).run_sync("Round 1").output
    ledger.commit()
    again = Negotiator()
    replayed = Agent(PinnedModel(again.model, ReplayPins.from_events(store.read(), types))).run_sync("Round 1").output
    assert (replayed, again.calls) == (live, 0)


# Replay is not running again


def test_the_same_log_and_code_give_the_same_run_byte_for_byte(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Replay is not running again: replaying is not re-running; the run comes back as it was, message for message."""
    ledger = PinLedger(store, types)
    live = Agent(Negotiator().model, capabilities=[Pinning(ledger)]).run_sync("Round 1")
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    again = Agent(Negotiator().model, capabilities=[Pinning(replay)]).run_sync("Round 1")
    dump = ModelMessagesTypeAdapter.dump_json
    assert dump(again.all_messages()) == dump(live.all_messages())


def test_under_strict_replay_a_missing_pin_raises_before_the_effect_is_invoked() -> None:
    """§ Replay is not running again: "no model was reached" is assertable, since a miss raises before any call."""
    uk = Negotiator()
    with pytest.raises(PinMiss):
        Agent(PinnedModel(uk.model, ReplayPins({}))).run_sync("Round 1")
    assert uk.calls == 0


# The life of a pin


def test_a_unit_id_is_a_fresh_uuid7_unless_one_is_supplied(store: SQLiteEventStore) -> None:
    """§ The life of a pin: `unit_id` defaults to a new UUIDv7; a supplied one is kept."""
    first, second = PinLedger(store).unit_id, PinLedger(store).unit_id
    assert UUID7.match(first) and UUID7.match(second) and first != second
    assert PinLedger(store, unit_id="round-1").unit_id == "round-1"


def test_a_first_draw_lands_in_scratch_where_nothing_reading_the_log_sees_it(
    store: SQLiteEventStore, ledger: PinLedger
) -> None:
    """§ The life of a pin (Draw): the effect runs once, its result is in scratch and not in the log."""
    assert ledger.resolve("k", kind="tool_call", effect=lambda: {"cod": 81}, interpret=lambda r: r) == {"cod": 81}
    assert [pin.raw_text for pin in ledger.pins()] == ['{"cod":81}']
    assert list(store.read()) == []


def test_a_reuse_answers_from_scratch_and_counts_the_attempt(ledger: PinLedger) -> None:
    """§ The life of a pin (Reuse): the same key again in the unit gets the scratch result; attempts go up."""
    for _ in range(3):
        ledger.resolve("k", kind="tool_call", effect=lambda: time.monotonic(), interpret=lambda r: r)
    (pin,) = ledger.pins()
    assert pin.attempts == 3


def test_concurrent_askings_of_one_key_wait_for_the_draw_in_flight(ledger: PinLedger) -> None:
    """§ The life of a pin (Reuse): askers at once wait for the one draw rather than each calling the model."""
    draws = 0

    async def slow() -> str:
        nonlocal draws
        draws += 1
        await asyncio.sleep(0.05)
        return "drawn once"

    async def many() -> list[str]:
        return list(
            await asyncio.gather(
                *(ledger.aresolve("k", kind="model_call", effect=slow, interpret=lambda r: r) for _ in range(5))
            )
        )

    assert asyncio.run(many()) == ["drawn once"] * 5
    assert draws == 1


def test_concurrent_askings_from_threads_wait_for_the_draw_in_flight(ledger: PinLedger) -> None:
    """§ The life of a pin (Reuse): one key asked at once from several threads is drawn once (single flight)."""
    draws = 0
    gate = threading.Barrier(4)

    def slow() -> str:
        nonlocal draws
        draws += 1
        time.sleep(0.05)
        return "drawn once"

    answers: list[object] = []

    def ask() -> None:
        gate.wait()
        answers.append(ledger.resolve("k", kind="tool_call", effect=slow, interpret=lambda r: r))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (answers, draws) == (["drawn once"] * 4, 1)


def test_commit_moves_every_scratch_pin_into_the_log_as_pin_promoted_and_clears_scratch(
    store: SQLiteEventStore, ledger: PinLedger
) -> None:
    """§ The life of a pin (Commit): scratch pins become `PinPromoted` events; scratch is emptied."""
    for key in ("a", "b"):
        ledger.resolve(key, kind="tool_call", effect=lambda k=key: k, interpret=lambda r: r)
    committed = ledger.commit()
    assert [(e.type, e.payload_json()["key"]) for e in committed] == [("pin_promoted", "a"), ("pin_promoted", "b")]
    assert list(store.read()) == committed
    assert store.scratch_list(ledger.unit_id) == []


def test_abandon_drops_scratch_and_appends_one_summary_of_keys_and_attempts(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    """§ The life of a pin (Abandon): one `PinsAbandoned` with each key and its attempts, never the results."""
    for key in ("a", "a", "b"):
        ledger.resolve(key, kind="tool_call", effect=lambda: "secret result", interpret=lambda r: r)
    ledger.abandon(reason="the round was called off")
    (event,) = store.read()
    abandoned = types.decode(event)
    assert isinstance(abandoned, PinsAbandoned) and abandoned.reason == "the round was called off"
    assert sorted((pin.key, pin.attempts) for pin in abandoned.pins) == [("a", 2), ("b", 1)]
    assert "secret result" not in event.payload


def test_scratch_survives_a_crash_and_the_unit_reopened_reuses_its_draws(db_path: Path) -> None:
    """§ The life of a pin (Draw): scratch is in the database, so a unit left open is found and its draws reused."""
    store = SQLiteEventStore(db_path)
    PinLedger(store, unit_id="round-1").resolve("k", kind="tool_call", effect=lambda: "first", interpret=lambda r: r)
    store.close()  # as a process that died: nothing committed
    reopened = SQLiteEventStore(db_path)
    again = PinLedger(reopened, unit_id="round-1")
    assert again.resolve("k", kind="tool_call", effect=never, interpret=lambda r: r) == "first"
    reopened.close()


def test_a_replay_reads_the_pins_of_a_stream_or_of_one_unit(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ The life of a pin: `ReplayPins.from_events` collects `PinPromoted` events, all of them or one unit's."""
    for unit, answer in (("u1", "one"), ("u2", "two")):
        ledger = PinLedger(store, types, unit_id=unit)
        ledger.resolve("k", kind="tool_call", effect=lambda a=answer: a, interpret=lambda r: r)
        ledger.commit()
    only = ReplayPins.from_events(store.read(), types, unit_id="u2")
    assert only.resolve("k", kind="tool_call", effect=never, interpret=lambda r: r) == "two"


# Strict and record replay


def test_strict_is_the_default_and_its_miss_names_the_key_the_kind_and_the_hits_before_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Strict and record replay: a strict miss raises `PinMiss` whose divergence says key, kind and hits before."""
    ledger = PinLedger(store, types)
    ledger.resolve("seen", kind="tool_call", effect=lambda: 1, interpret=lambda r: r)
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    replay.resolve("seen", kind="tool_call", effect=never, interpret=lambda r: r)
    with pytest.raises(PinMiss) as miss:
        replay.resolve("new", kind="tool_call", effect=never, interpret=lambda r: r)
    divergence = miss.value.divergence
    assert (divergence.key, divergence.kind, divergence.after_hits) == ("new", "tool_call", 1)


def test_record_mode_is_refused_without_a_ledger_to_draw_into() -> None:
    """§ Strict and record replay: `on_miss="record"` needs `into=`."""
    with pytest.raises(UsageError, match="into"):
        ReplayPins.from_events([], on_miss="record")


def test_record_mode_draws_after_the_first_miss_and_its_commit_replays_strictly(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Strict and record replay: the first miss is the divergence; its commit holds ReplayDiverged and replays."""
    ledger = PinLedger(store, types, unit_id="before")
    for key in ("one", "two"):
        ledger.resolve(key, kind="tool_call", effect=lambda k=key: f"old {k}", interpret=lambda r: r)
    ledger.commit()
    into = PinLedger(store, types, unit_id="after")
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=into)
    answers = [
        replay.resolve(key, kind="tool_call", effect=lambda k=key: f"new {k}", interpret=lambda r: r)
        for key in ("one", "TWO")
    ]
    assert answers == ["old one", "new TWO"]
    committed = [types.decode(e) for e in into.commit()]
    assert [type(e).__name__ for e in committed] == ["PinPromoted", "ReplayDiverged", "PinPromoted"]
    assert isinstance(committed[1], ReplayDiverged) and committed[1].key == "TWO"
    strict = ReplayPins.from_events(store.read(), types, unit_id="after")
    assert [strict.resolve(k, kind="tool_call", effect=never, interpret=lambda r: r) for k in ("one", "TWO")] == answers


def test_swapping_one_roles_model_in_record_mode_redraws_exactly_that_roles_calls(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Strict and record replay: the model id is in every key, so only the swapped role's calls miss."""
    uk, eu = Negotiator("scripted-uk"), Negotiator("scripted-eu")
    ledger = PinLedger(store, types)
    for negotiator in (uk, eu):
        Agent(PinnedModel(negotiator.model, ledger)).run_sync("Round 1")
    ledger.commit()
    into = PinLedger(store, types)
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=into)
    uk_again, eu_swapped = Negotiator("scripted-uk"), Negotiator("scripted-eu-v2")
    for negotiator in (uk_again, eu_swapped):
        Agent(PinnedModel(negotiator.model, replay)).run_sync("Round 1")
    assert (uk_again.calls, eu_swapped.calls) == (0, 1)


def test_models_sharing_an_id_answer_each_others_pins_and_distinct_names_do_not(ledger: PinLedger) -> None:
    """§ Models that share an id share pins: two FunctionModels with one `model_name` share; distinct names do not."""
    first, same, other = Negotiator("scripted"), Negotiator("scripted"), Negotiator("scripted-other")
    for negotiator in (first, same, other):
        # A run per model; `dedupe_repeats` keeps the page's rule here (the run rule is the project's own, below).
        Agent(PinnedModel(negotiator.model, ledger, dedupe_repeats=True)).run_sync("Round 1")
    assert (first.calls, same.calls, other.calls) == (1, 0, 1)


# What counts as "the same call"


def test_a_key_is_p1_kind_and_the_sha256_of_the_canonical_material() -> None:
    """§ What counts as the same call: `pin_key(kind, material)` is `p1:<kind>:<sha256 of canonical JSON>`."""
    import hashlib

    key = pin_key("model_call", {"b": 1, "a": [1, 2]})
    assert key == "p1:model_call:" + hashlib.sha256(b'{"a":[1,2],"b":1}').hexdigest()
    assert key == pin_key("model_call", {"a": [1, 2], "b": 1})  # dict order is not meaning
    assert key != pin_key("model_call", {"a": [2, 1], "b": 1})  # list order is


def test_the_model_id_is_in_the_key() -> None:
    """§ What counts as the same call: the model's id is kept."""
    assert key_of(asked("Round 1"), model="scripted-uk") != key_of(asked("Round 1"), model="scripted-eu")


def test_tool_definitions_are_keyed_sorted_by_name() -> None:
    """§ What counts as the same call: tool definitions are kept, sorted by name (their order is not told)."""
    a, b = (ToolDefinition(name=n, parameters_json_schema={"type": "object"}) for n in ("a", "b"))
    ordered = key_of(asked("x"), parameters=ModelRequestParameters(function_tools=[a, b]))
    assert ordered == key_of(asked("x"), parameters=ModelRequestParameters(function_tools=[b, a]))
    changed = ToolDefinition(name="b", parameters_json_schema={"type": "object"}, description="now described")
    assert ordered != key_of(asked("x"), parameters=ModelRequestParameters(function_tools=[a, changed]))
    assert ordered != key_of(asked("x"))


def test_the_output_schema_is_in_the_key() -> None:
    """§ Why the output schema is in the key: a required output schema changes what the model generates."""

    def schema(name: str, field: str) -> ModelRequestParameters:
        parameters = {"type": "object", "properties": {field: {"type": "integer"}}, "required": [field]}
        return ModelRequestParameters(
            output_mode="tool", output_tools=[ToolDefinition(name=name, parameters_json_schema=parameters)]
        )

    position = key_of(asked("Round 1"), parameters=schema("final_result", "holds_firm"))
    assert position == key_of(asked("Round 1"), parameters=schema("final_result", "holds_firm"))
    assert position != key_of(asked("Round 1"), parameters=schema("final_result", "tonnes"))
    assert position != key_of(asked("Round 1"))


def test_effective_settings_are_keyed_the_models_own_merged_with_the_runs() -> None:
    """§ What counts as the same call: temperature, token limits, forced tool choice and the like are kept."""
    base = key_of(asked("x"))
    assert key_of(asked("x"), settings={"temperature": 0.2}) != base
    assert key_of(asked("x"), settings={"max_tokens": 50}) != base
    own = PinnedModel(
        FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name="scripted-uk", settings={"temperature": 0.2}),
        ReplayPins({}),
    )
    assert own.pin_for(asked("x"), None, ModelRequestParameters()).key == key_of(
        asked("x"), settings={"temperature": 0.2}
    )


def test_draw_changing_extra_body_entries_are_keyed() -> None:
    """§ What counts as the same call: `extra_body` entries such as reasoning or thinking stay in the key."""
    reasoning: ModelSettings = {"extra_body": {"reasoning": {"effort": "high"}}}
    assert key_of(asked("x"), settings=reasoning) != key_of(asked("x"))
    assert key_of(asked("x"), settings={"extra_body": {"reasoning": {"effort": "low"}}}) != key_of(
        asked("x"), settings=reasoning
    )


def test_timestamps_provider_ids_tool_call_ids_and_metadata_are_dropped() -> None:
    """§ What counts as the same call: what differs between two runs of one call (stamps, ids, details) is dropped."""
    from datetime import UTC, datetime

    def history(stamp: datetime, call_id: str, provider: str) -> list[ModelMessage]:
        return [
            ModelRequest(parts=[UserPromptPart("x", timestamp=stamp)], metadata={"trace": call_id}),
            ModelResponse(
                parts=[ToolCallPart("quota", {"s": "cod"}, tool_call_id=call_id)],
                timestamp=stamp,
                provider_name=provider,
                provider_response_id=call_id,
                provider_details={"region": provider},
            ),
            ModelRequest(parts=[ToolReturnPart("quota", "81", tool_call_id=call_id, timestamp=stamp)]),
        ]

    one = history(datetime(2026, 1, 1, tzinfo=UTC), "call-1", "openai")
    two = history(datetime(2026, 6, 1, tzinfo=UTC), "call-2", "azure")
    assert key_of(one) == key_of(two)


def test_delivery_only_settings_are_dropped() -> None:
    """§ What counts as the same call: timeout, extra headers, service tier and prompt-cache settings are dropped."""
    delivery: dict[str, Any] = {
        "timeout": 30,
        "extra_headers": {"x-request": "1"},
        "openai_service_tier": "flex",
        "anthropic_cache_instructions": True,
    }
    assert key_of(asked("x"), settings=delivery) == key_of(asked("x"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "session",
    [
        {"openai_user": "player-7"},
        {"anthropic_metadata": {"user_id": "player-7"}},
        {"extra_body": {"session_id": "game-7"}},
        {"extra_body": {"user": "player-7"}},
        {"extra_body": {"safety_identifier": "player-7"}},
        {"extra_body": {"prompt_cache_key": "game-7"}},
        {"extra_body": {"metadata": {"user_id": "player-7"}}},
    ],
    ids=lambda s: json.dumps(s),
)
def test_session_and_end_user_ids_are_dropped_and_only_those_leave_extra_body(session: dict[str, Any]) -> None:
    """§ What counts as the same call: the session and user ids the page names leave the key; nothing else does."""
    assert key_of(asked("x"), settings=session) == key_of(asked("x"))  # type: ignore[arg-type]
    kept: dict[str, Any] = {"extra_body": {**session.get("extra_body", {}), "reasoning": {"effort": "high"}}}
    assert key_of(asked("x"), settings=kept) != key_of(asked("x"))  # type: ignore[arg-type]


def test_project_rule_a_field_a_later_release_adds_is_keyed_only_once_set() -> None:
    """§ What counts as the same call, where the project differs: an unknown upstream field is keyed only when set.

    The page keeps every unknown field in the key; the project keys one only off its default, so an upgrade that
    adds a field (with its default) keeps every recording replaying. See design.md, "Where the project differs".
    """
    # `UserPromptPart` as a later pydantic-ai might ship it: the same class by name, one more field with a default.
    newer = dataclasses.make_dataclass(
        "UserPromptPart",
        [("brand_new_field", object, dataclasses.field(default="default", kw_only=True))],
        bases=(UserPromptPart,),
    )
    newer.__module__ = UserPromptPart.__module__
    message = [ModelRequest(parts=[UserPromptPart("x")])]
    assert key_of([ModelRequest(parts=[newer("x")])]) == key_of(message)
    assert key_of([ModelRequest(parts=[newer("x", brand_new_field="set")])]) != key_of(message)


def test_the_default_policy_is_the_semantic_call_policy_and_a_custom_one_decides_the_material() -> None:
    """§ What counts as the same call: `SemanticCallPolicy` is the default; the application may give its own."""
    model = FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name="m")
    assert isinstance(PinnedModel(model, ReplayPins({})).policy, SemanticCallPolicy)

    class PromptOnly(SemanticCallPolicy):
        def material(self, messages: Any, settings: Any, parameters: Any, *, model_id: str) -> Any:
            return {"prompt": _prompt(messages)}

    pinned = PinnedModel(model, ReplayPins({}), policy=PromptOnly())
    keyed = [pinned.pin_for(asked("x"), s, ModelRequestParameters()).key for s in ({"temperature": 0}, None)]
    assert keyed[0] == keyed[1]


# Drawing and interpreting


def test_the_raw_result_is_pinned_and_interpretation_runs_on_every_path_without_a_redraw(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Drawing and interpreting are kept apart: a changed interpretation reuses the pinned raw value."""
    ledger = PinLedger(store, types)
    assert ledger.resolve("k", kind="tool_call", effect=lambda: 81, interpret=lambda r: f"{r} kt") == "81 kt"
    assert ledger.resolve("k", kind="tool_call", effect=never, interpret=lambda r: r * 1000) == 81000
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    assert replay.resolve("k", kind="tool_call", effect=never, interpret=lambda r: -r) == -81


# Per request, not per run


def test_each_model_request_of_a_run_is_its_own_pin_and_the_run_replays_reaching_nothing(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Per request, not per run: a run with a tool makes two requests, two pins; replay reaches neither."""
    reached = {"model": 0, "tool": 0}

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reached["model"] += 1
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("quota", {"species": "cod"})])

    def quota(species: str) -> int:
        """Read the quota."""
        reached["tool"] += 1
        return 81

    def agent(resolver: Any) -> Agent[None, str]:
        return Agent(PinnedModel(FunctionModel(answer, model_name="m"), resolver), tools=[pinned_tool(resolver, quota)])

    ledger = PinLedger(store, types)
    agent(ledger).run_sync("Quota?")
    assert [pin.kind for pin in ledger.pins()] == ["model_call", "tool_call", "model_call"]
    ledger.commit()
    agent(ReplayPins.from_events(store.read(), types)).run_sync("Quota?")
    assert reached == {"model": 2, "tool": 1}


# Tools


def test_a_tool_is_keyed_on_its_name_and_arguments_never_its_run_context(ledger: PinLedger) -> None:
    """§ Tools: the key is the tool's name and arguments; the `RunContext` parameter is left out."""
    calls = 0

    def quota(ctx: RunContext[None], species: str) -> int:
        """Read the quota."""
        nonlocal calls
        calls += 1
        return 81 + calls

    tool = pinned_tool(ledger, quota, caller=None)
    # Two contexts that differ in everything a run fills in (not an agent run: no run rule to number them).
    contexts = [RunContext(deps=None, model=TestModel(), usage=None, prompt=p) for p in ("one", "two")]  # type: ignore[arg-type]
    assert [asyncio.run(tool(ctx, species="cod")) for ctx in contexts] == [82, 82]
    assert asyncio.run(tool(contexts[0], species="haddock")) == 83
    assert calls == 2


def test_a_pinned_tool_is_a_coroutine_that_runs_a_sync_body_in_a_worker_thread(ledger: PinLedger) -> None:
    """§ Tools: the wrapper is always a coroutine function; a sync body runs off the calling thread."""
    threads: list[int] = []

    def quota(species: str) -> int:
        """Read the quota."""
        threads.append(threading.get_ident())
        return 81

    tool = pinned_tool(ledger, quota)
    assert inspect.iscoroutinefunction(tool) and tool.__name__ == "quota" and tool.__doc__ == "Read the quota."
    assert asyncio.run(tool(species="cod")) == 81
    assert threads and threads[0] != threading.get_ident()


def test_a_replayed_tool_is_never_called(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ Tools: a world-reading tool pinned is drawn once and replayed thereafter."""
    ledger = PinLedger(store, types)
    assert asyncio.run(pinned_tool(ledger, lambda species: 81, name="quota")(species="cod")) == 81
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    assert asyncio.run(pinned_tool(replay, lambda species: never(), name="quota")(species="cod")) == 81


# Streaming


async def _streamed(agent: Agent[None, str]) -> str:
    async with agent.run_stream("Round 1") as run:
        return await run.get_output()


def test_a_stream_is_keyed_as_its_plain_twin_and_each_answers_the_other(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Streaming: a pin recorded streaming replays through a plain request, and the other way round."""
    ledger = PinLedger(store, types)
    streamed = asyncio.run(_streamed(Agent(PinnedModel(Negotiator().model, ledger))))
    ledger.commit()
    plain = Negotiator()
    replay = ReplayPins.from_events(store.read(), types)
    assert Agent(PinnedModel(plain.model, replay)).run_sync("Round 1").output == streamed == "The UK holds firm."
    assert plain.calls == 0

    ledger = PinLedger(store, types, unit_id="plain")
    said = Agent(PinnedModel(Negotiator().model, ledger)).run_sync("Round 1").output
    ledger.commit()
    streaming = Negotiator()
    replay = ReplayPins.from_events(store.read(), types, unit_id="plain")
    assert asyncio.run(_streamed(Agent(PinnedModel(streaming.model, replay)))) == said
    assert streaming.calls == 0


def test_a_replayed_stream_is_rebuilt_from_the_pin_for_run_stream(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Streaming: on replay `PinnedStreamedResponse` rebuilds the stream, so `run_stream()` works as before."""
    ledger = PinLedger(store, types)
    live = asyncio.run(_streamed(Agent(PinnedModel(Negotiator().model, ledger))))
    ledger.commit()
    pinned = PinnedModel(Negotiator().model, ReplayPins.from_events(store.read(), types))

    async def chunks() -> tuple[list[str], type]:
        async with Agent(pinned).run_stream("Round 1") as run:
            deltas = [d async for d in run.stream_text(delta=True, debounce_by=None)]
        async with pinned.request_stream(asked("Round 1"), None, ModelRequestParameters()) as response:
            kind = type(response)
        return deltas, kind

    deltas, kind = asyncio.run(chunks())
    assert "".join(deltas) == live and kind is PinnedStreamedResponse


def test_a_stream_abandoned_early_is_still_pinned_with_its_state_and_never_passed_off_as_whole(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Streaming: a partial stream is pinned with the state stamped on it; a plain request refuses it."""
    ledger = PinLedger(store, types)
    model = PinnedModel(Negotiator().model, ledger)

    async def first_delta() -> str:
        async with Agent(model).run_stream("Round 1") as run:
            return await anext(run.stream_text(delta=True, debounce_by=None))

    assert asyncio.run(first_delta()) == "The "
    (pin,) = [pin for pin in ledger.pins() if pin.kind == "model_call"]
    held = json.loads(json.loads(pin.raw_text)["ordered_json"])
    assert held["state"] in {"incomplete", "interrupted"} and held["parts"][0]["content"] == "The "
    ledger.commit()
    with pytest.raises(PartialPin):
        Agent(PinnedModel(Negotiator().model, ReplayPins.from_events(store.read(), types))).run_sync("Round 1")


# Ids are draws too


def test_a_minted_id_is_drawn_through_the_ledger_and_replays_as_the_same_entity(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """§ Ids are draws too: `mint_entity_id` draws through the resolver; a replay re-mints the recorded id."""
    ledger = PinLedger(store, types)
    minted = mint_entity_id({"kind": "vessel", "name": "Marie-Galante"}, resolver=ledger)
    assert mint_entity_id({"kind": "vessel", "name": "Marie-Galante"}, resolver=ledger) == minted
    ledger.commit()
    replay = ReplayPins.from_events(store.read(), types)
    assert mint_entity_id({"kind": "vessel", "name": "Marie-Galante"}, resolver=replay) == minted
    assert mint_entity_id({"kind": "vessel", "name": "Marie-Galante"}) != minted  # unpinned: a new draw


# Recordings on disk


def test_a_recording_is_a_header_then_one_canonical_stored_event_per_line_and_rerecords_byte_for_byte(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    """§ Recordings on disk: a header line, then each event as canonical JSON; the same events write the same file."""
    ledger = PinLedger(store, types, unit_id="round-1")
    ledger.resolve("k", kind="tool_call", effect=lambda: {"b": 2, "a": 1}, interpret=lambda r: r)
    ledger.commit()
    header = {"description": "round 1", "recorded_with": "scripted-uk", "rerecord": "python -m round1"}
    first = write_recording(tmp_path / "a.jsonl", pin_events(store.read()), header=header).read_text()
    second = write_recording(tmp_path / "b.jsonl", pin_events(store.read()), header=header).read_text()
    lines = first.splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["description"] == "round 1"
    assert json.dumps(json.loads(lines[1]), sort_keys=True, separators=(",", ":"), ensure_ascii=False) == lines[1]
    assert first == second
    recording = read_recording(tmp_path / "a.jsonl")
    replay = ReplayPins.from_events(recording.events, types)
    assert replay.resolve("k", kind="tool_call", effect=never, interpret=lambda r: r) == {"a": 1, "b": 2}


def test_pin_events_filters_a_stream_down_to_its_pins(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    """§ Recordings on disk: `pin_events(...)` keeps only the pins of a stream."""
    ledger = PinLedger(store, types, unit_id="kept")
    ledger.resolve("k", kind="tool_call", effect=lambda: 1, interpret=lambda r: r)
    ledger.commit()
    PinLedger(store, types, unit_id="dropped").abandon(reason="nothing drawn")
    assert [e.type for e in store.read()] == ["pin_promoted", "pins_abandoned"]
    assert [e.type for e in pin_events(store.read())] == ["pin_promoted"]


def test_a_recording_is_upcast_as_it_is_read_with_the_upcasts_given(store: SQLiteEventStore) -> None:
    """§ Recordings on disk: pass `upcasts=` to `ReplayPins.from_events`; an old pin schema still replays."""
    types = EventTypeRegistry()
    register_builtin_events(types)  # the page's call: quiet, and changing nothing
    old = '{"attempts":1,"key":"k","kind":"tool_call","raw":"old","unit_id":"u"}'
    store.append([PendingEvent(namespace=BUILTIN_NAMESPACE, type="pin_promoted", schema_version=1, payload=old)])
    replay = ReplayPins.from_events(store.read(), types, upcasts=UpcastRegistry())
    assert replay.resolve("k", kind="tool_call", effect=never, interpret=lambda r: r) == "old"
    assert PinPromoted.read(next(store.read()), types).failed is False


# Where the project keeps a rule of its own (docs/explanation/design.md, "Where the project differs")


def test_project_rule_a_repeat_in_one_run_after_its_answer_reaches_the_world_again(ledger: PinLedger) -> None:
    """§ The life of a pin (Reuse), where the project differs: a run asking again after the answer draws again.

    The page reuses every asking of a key in a unit. The project numbers a key's askings within one agent run (the
    repeat rule, #34), as an unpinned run reaches the world each time; `dedupe_repeats=True` keeps the page's rule.
    """
    samples = 0

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal samples
        samples += 1
        returns = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if returns < 2:
            return ModelResponse(parts=[ToolCallPart("poll", {"job": "survey"})])
        return ModelResponse(parts=[TextPart("done")])

    polls = 0

    def poll(job: str) -> int:
        """Poll a job."""
        nonlocal polls
        polls += 1
        return polls

    Agent(PinnedModel(FunctionModel(answer, model_name="m"), ledger), tools=[pinned_tool(ledger, poll)]).run_sync("go")
    assert polls == 2


def test_project_rule_a_new_run_after_a_finished_one_reaches_the_world_again(ledger: PinLedger) -> None:
    """§ What pinning means, where the project differs: a second run asking the same in the unit is a run of its own.

    The page would answer it from the first run's pins. The project gives each new run keys of its own (the run rule,
    #34), as unpinned; only a retry of a run that did not finish resumes it (the retry rule, #40).
    """
    uk = Negotiator()
    agent = Agent(PinnedModel(uk.model, ledger))
    assert [agent.run_sync("Round 1").output for _ in range(2)] == ["answer #1 to Round 1", "answer #2 to Round 1"]


def test_project_rule_a_tool_call_is_keyed_on_its_caller_too(store: SQLiteEventStore) -> None:
    """§ Tools, where the project differs: besides name and arguments, what identifies the caller joins the key.

    The page keys a tool on its name and arguments. The project adds a digest of the run's deps (the caller rule,
    #34), so one user is never answered with another's reading; `caller=None` keeps the page's key.
    """

    def balance(ctx: RunContext[str]) -> str:
        """Read the caller's balance."""
        return f"{ctx.deps}'s balance"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])  # type: ignore[union-attr]
        return ModelResponse(parts=[ToolCallPart("balance", {})])

    def asked_by_each(caller: Any) -> list[str]:
        # `dedupe_repeats=True` takes the run and repeat rules out: only what the key holds tells the calls apart.
        tool = pinned_tool(PinLedger(store), balance, dedupe_repeats=True, caller=caller)
        agent = Agent(FunctionModel(answer, model_name="m"), deps_type=str, tools=[tool])
        return [agent.run_sync("Balance?", deps=user).output for user in ("alice", "bob")]

    assert asked_by_each(WHOLE_DEPS) == ["alice's balance", "bob's balance"]
    assert asked_by_each(None) == ["alice's balance", "alice's balance"]  # the page's key: bob told alice's


def test_project_rule_a_retry_draws_again_the_call_that_failed(ledger: PinLedger) -> None:
    """§ What pinning means, where the project adds: a retry resumes the failed turn, but redraws what failed.

    The page's retry is answered from its pins; a failure pinned would fail every retry the same way, so the
    project answers the calls that succeeded and draws the one that failed again (#40).
    """
    harbour = Harbour()
    try_until_done(harbour.agent("pinning", ledger))
    assert harbour.reached["radio"] == 2
