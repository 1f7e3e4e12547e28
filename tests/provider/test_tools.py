"""pinned_tool: same schema as the bare tool, keyed on name and arguments, drawn once, replayed without running."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import threading
from datetime import date
from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from anagrapheus.errors import CanonicalError, PinResultError, UsageError
from anagrapheus.provider import PinnedModel, UnpinnedCancellationWarning, pinned_tool
from anagrapheus.provider.cancelled_askings import CANCELLED_ASKING, cancelled_asking_key
from anagrapheus.provider.tools import ToolPin, is_pinned_tool, tool_pin, tool_result_from_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore, pin_key
from tests.conftest import Scripted

PROMPT = "How many harbours has Paris?"


class Catch(BaseModel):
    species: str
    tonnes: int


def harbour_count(city: str, *, include_marinas: bool = False) -> dict[str, Any]:
    """Count the harbours of a city.

    Args:
        city: The city to look up.
        include_marinas: Whether marinas count as harbours.
    """
    return {"city": city, "harbours": 3, "marinas": include_marinas}


async def landed(ctx: RunContext[None], city: str, catch: Catch, on: date | None = None) -> str:
    """Say what was landed in a city."""
    return f"{catch.tonnes}t of {catch.species} landed in {city}"


def tool_defs(*tools: Any) -> list[ToolDefinition]:
    """The tool definitions pydantic-ai sends the model for these tools."""
    seen: list[ToolDefinition] = []

    def capture(_messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("done")])

    Agent(FunctionModel(capture, model_name="capture"), tools=list(tools)).run_sync("hi")
    return seen


@pytest.mark.parametrize("func", [harbour_count, landed])
def test_the_wrapper_keeps_the_schema_docstring_and_run_context(func: Any, ledger: PinLedger) -> None:
    wrapped = pinned_tool(ledger, func)
    assert inspect.iscoroutinefunction(wrapped)
    assert wrapped.__name__ == func.__name__ and wrapped.__doc__ == func.__doc__
    assert Tool(wrapped).takes_ctx == Tool(func).takes_ctx
    assert tool_defs(wrapped) == tool_defs(func)


@pytest.mark.anyio
async def test_a_run_with_pinned_tools_replays_without_running_them(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    ran: list[str] = []
    loop_thread = threading.get_ident()

    def harbours(city: str) -> str:
        """Count a city's harbours (a sync tool: runs in a worker thread)."""
        ran.append(f"sync on {'loop' if threading.get_ident() == loop_thread else 'worker'}")
        return f"{city} has 3 harbours"

    async def quota(ctx: RunContext[None], city: str) -> str:
        """Look up a city's quota."""
        ran.append("async")
        return f"{city} quota 120t"

    def agent(resolver: Any, model: FunctionModel) -> Agent[None, str]:
        return Agent(
            PinnedModel(model, resolver), tools=[pinned_tool(resolver, harbours), pinned_tool(resolver, quota)]
        )

    live = Scripted("scripted-uk")
    recorded = await agent(ledger, live.model).run(PROMPT)
    assert sorted(ran) == ["async", "sync on worker"]
    assert sorted(pin.kind for pin in ledger.pins()) == ["model_call", "model_call", "tool_call", "tool_call"]
    ledger.commit()

    ran.clear()
    replayed = Scripted("scripted-uk")
    result = await agent(ReplayPins.from_events(store.read(), types), replayed.model).run(PROMPT)
    assert (ran, replayed.calls) == ([], 0)
    assert result.output == recorded.output == "The UK holds firm on fisheries. Paris has 3 harbours; Paris quota 120t"


@pytest.mark.anyio
async def test_the_key_is_the_name_and_bound_arguments_with_defaults(ledger: PinLedger) -> None:
    tool = pinned_tool(ledger, harbour_count)
    await tool("Paris")
    await tool(city="Paris", include_marinas=False)
    (pin,) = ledger.pins()
    assert pin.key == pin_key(
        "tool_call", {"tool": "harbour_count", "args": {"city": "Paris", "include_marinas": False}}
    )
    assert pin.attempts == 2
    await pinned_tool(ledger, harbour_count, name="harbours")("Paris")
    assert len(ledger.pins()) == 2


@pytest.mark.anyio
async def test_the_run_context_stays_out_of_the_key_and_rich_arguments_are_keyed_as_json(
    ledger: PinLedger,
) -> None:
    tool = pinned_tool(ledger, landed)
    catch = Catch(species="cod", tonnes=12)
    first = await tool(object.__new__(RunContext), "Hull", catch)  # pyright: ignore[reportArgumentType]
    again = await tool(object.__new__(RunContext), "Hull", catch=catch)  # pyright: ignore[reportArgumentType]
    assert first == again == "12t of cod landed in Hull"
    (pin,) = ledger.pins()
    material = {"tool": "landed", "args": {"city": "Hull", "catch": {"species": "cod", "tonnes": 12}, "on": None}}
    assert pin.key == pin_key("tool_call", material)
    assert json.loads(pin.fingerprint or "{}").keys() == {"tool", "args.city", "args.catch", "args.on"}


@pytest.mark.anyio
async def test_a_result_that_cannot_be_rebuilt_as_itself_is_refused_at_draw_time(ledger: PinLedger) -> None:
    class Local(BaseModel):  # defined in a function: its annotation (a string here) names no class a replay can find
        species: str

    def fetch_catch(city: str) -> Local:
        return Local(species="cod")

    refused = r"tool 'fetch_catch' returned .*Local, which the signature of tool 'fetch_catch' does not declare"
    with pytest.raises(PinResultError, match=refused) as no:
        await pinned_tool(ledger, fetch_catch)("Hull")
    # The message says what to do instead.
    assert "Name it in the return annotation (-> " in str(no.value) and "or return its JSON" in str(no.value)
    assert ledger.pins() == []


@pytest.mark.anyio
async def test_a_model_result_is_pinned_with_its_type_and_rebuilt_as_itself(ledger: PinLedger) -> None:
    def fetch_catch(city: str) -> Catch:
        return Catch(species="cod", tonnes=1)

    pinned = pinned_tool(ledger, fetch_catch)
    assert await pinned("Hull") == Catch(species="cod", tonnes=1)
    assert type(await pinned("Hull")) is Catch


@pytest.mark.anyio
async def test_an_argument_that_cannot_be_json_is_refused_before_the_tool_runs(ledger: PinLedger) -> None:
    ran: list[object] = []

    def inspect_object(thing: object) -> str:
        ran.append(thing)
        return "seen"

    with pytest.raises(CanonicalError, match="argument 'thing' of tool 'inspect_object'") as refused:
        await pinned_tool(ledger, inspect_object)({"seen": [object()]})
    assert refused.value.path == "$.args.thing.seen[0]"
    assert ran == []


@pytest.mark.anyio
async def test_first_draw_and_replay_return_what_the_tool_returned(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    def survey(city: str) -> dict[str, Any]:
        return {"open": True, "city": city, "depths": (4.0, 7.5)}

    first = await pinned_tool(ledger, survey)("Hull")
    ledger.commit()
    replayed = await pinned_tool(ReplayPins.from_events(store.read(), types), survey)("Hull")
    # The tuple, the integral float and the key order come back as the tool returned them, on both paths.
    for value in (first, replayed):
        assert value == survey("Hull")
        assert list(value) == ["open", "city", "depths"]
        assert type(value["depths"]) is tuple and type(value["depths"][0]) is float


@pytest.mark.anyio
async def test_strict_replay_names_the_argument_that_moved(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    await pinned_tool(ledger, harbour_count)("Paris")
    ledger.commit()
    ran: list[str] = []

    def harbour_count_spy(city: str, *, include_marinas: bool = False) -> dict[str, Any]:
        ran.append(city)
        return {}

    tool = pinned_tool(ReplayPins.from_events(store.read(), types), harbour_count_spy, name="harbour_count")
    with pytest.raises(PinMiss) as miss:
        await tool("Hull")
    assert miss.value.divergence.kind == "tool_call"
    assert miss.value.divergence.moved == ("args.city",)
    assert ran == []


class ThreadWitness:
    """Delegates to a real ledger, noting the thread each resolver call arrives on."""

    def __init__(self, ledger: PinLedger) -> None:
        self.ledger = ledger
        self.threads: set[int] = set()

    async def aresolve(self, key: str, **options: Any) -> Any:
        self.threads.add(threading.get_ident())
        return await self.ledger.aresolve(key, **options)


@pytest.mark.anyio
async def test_parallel_sync_tools_run_in_workers_and_touch_the_resolver_on_the_loop(ledger: PinLedger) -> None:
    bodies: set[int] = set()
    started = threading.Barrier(3, timeout=5)

    def depth(city: str) -> int:
        bodies.add(threading.get_ident())
        started.wait()  # all three bodies are in flight at once, each in its own worker
        return len(city)

    witness = ThreadWitness(ledger)
    tool = pinned_tool(witness, depth)  # pyright: ignore[reportArgumentType]
    async with anyio.create_task_group() as group:
        for city in ("Hull", "Brest", "Vigo"):
            group.start_soon(tool, city)
    assert witness.threads == {threading.get_ident()}
    assert len(bodies) == 3 and threading.get_ident() not in bodies
    assert sorted(tool_result_from_raw(json.loads(pin.raw_text)) for pin in ledger.pins()) == [4, 4, 5]


def test_part_of_the_deps_joins_the_key_under_its_own_field() -> None:
    def key(**deps: object) -> ToolPin:
        return tool_pin("fleet", {"city": "Paris"}, **deps)

    breton = key(deps={"region": "Breton"})
    assert breton.key == pin_key(
        "tool_call", {"tool": "fleet", "args": {"city": "Paris"}, "deps": {"region": "Breton"}}
    )
    assert breton.fingerprint.keys() == {"tool", "args.city", "deps.region"}
    # No deps keyed, deps keyed as None, and other deps: three keys.
    assert len({key().key, key(deps=None).key, breton.key, key(deps={"region": "Basque"}).key}) == 4


def test_deps_that_cannot_be_keyed_are_refused_naming_the_tool_and_where() -> None:
    with pytest.raises(CanonicalError) as refused:
        tool_pin("fleet", {"city": "Paris"}, deps={"regions": [object()]})
    assert refused.value.path == "$.deps.regions[0]"
    assert str(refused.value).startswith("the deps keyed for tool 'fleet' cannot be keyed: ")


def test_a_callable_without_a_name_needs_one(ledger: PinLedger) -> None:
    nameless = functools.partial(harbour_count, include_marinas=True)
    with pytest.raises(UsageError, match=r"^pinned_tool needs name=\.\.\. for a callable without a __name__$"):
        pinned_tool(ledger, nameless)
    assert pinned_tool(ledger, nameless, name="harbours").__name__ == "harbours"


def test_a_pinned_tool_is_known_as_one_and_its_function_is_not(ledger: PinLedger) -> None:
    assert is_pinned_tool(pinned_tool(ledger, harbour_count))
    assert not is_pinned_tool(harbour_count)


def test_a_sync_tool_cancelled_while_its_body_runs_is_pinned_as_it_ran(ledger: PinLedger) -> None:
    # pydantic-ai cancels the tool calls beside one that raised; a sync body already running in its worker thread
    # runs to its end all the same (a thread cannot be stopped), so the world was reached: its result is pinned,
    # the cancellation still reaches the caller, and a retry answers it from the pin (#40's kill-free twin).
    started, release = threading.Event(), threading.Event()
    reached: list[str] = []

    def tide(port: str) -> str:
        """Read the tide table."""
        started.set()
        release.wait(10)
        reached.append(port)
        return f"{port}: high water at 14:02"

    pinned = pinned_tool(ledger, tide)

    async def cancelled_then_retried() -> str:
        call = asyncio.ensure_future(pinned("Brest"))
        await asyncio.to_thread(started.wait, 10)
        call.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await pinned("Brest")

    assert anyio.run(cancelled_then_retried) == "Brest: high water at 14:02"
    assert reached == ["Brest"]
    # Beside the call's pin, that its first asking was cancelled: a replay delivers that asking as cancelled.
    key = tool_pin("tide", {"port": "Brest"}).key
    assert {pin.kind: pin.key for pin in ledger.pins()} == {
        "tool_call": key,
        CANCELLED_ASKING: cancelled_asking_key(key, 1),
    }


def test_a_cancellation_whose_pin_cannot_be_taken_is_warned_of_and_still_reaches_the_caller(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The store goes away while the tool's body awaits: the cancellation still reaches the caller, and the pin
    # saying the asking was cancelled, which a replay needs to deliver it so, is missing: that is said, not dropped.
    # The unit is resumed (its id given), so taking the pin reads the store, which fails.
    ledger = PinLedger(store, types, unit_id="01900000-0000-7000-8000-000000000043")

    async def tide(port: str) -> str:
        """Read the tide table."""
        started.set()
        await asyncio.sleep(10)
        return f"{port}: high water at 14:02"

    async def cancelled(call_tide: Any) -> None:
        call = asyncio.ensure_future(call_tide("Brest"))
        await started.wait()
        store.close()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    started = asyncio.Event()
    with pytest.warns(
        UnpinnedCancellationWarning, match=r"^anagrapheus: asking 1 of \S*tool_call:\S* was cancelled live"
    ):
        asyncio.run(cancelled(pinned_tool(ledger, tide)))


def test_a_replayed_asking_that_was_cancelled_live_waits_to_be_cancelled_and_a_later_one_is_answered(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    started, release = threading.Event(), threading.Event()

    def tide(port: str) -> str:
        """Read the tide table."""
        started.set()
        release.wait(10)
        return f"{port}: high water at 14:02"

    async def cancelled_then_retried(call_tide: Any) -> str:
        call = asyncio.ensure_future(call_tide("Brest"))
        await asyncio.to_thread(started.wait, 10)
        call.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await call_tide("Brest")

    ledger = PinLedger(store, types)
    assert asyncio.run(cancelled_then_retried(pinned_tool(ledger, tide))) == "Brest: high water at 14:02"
    ledger.commit()

    async def replayed(call_tide: Any) -> tuple[bool, str]:
        # The first asking does not return at once: it waits to be cancelled, as it was live.
        call = asyncio.ensure_future(call_tide("Brest"))
        for _ in range(3):
            await asyncio.sleep(0)
        waited = not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The retry's asking is answered from the pin.
        return waited, await call_tide("Brest")

    replay = ReplayPins.from_store(store, types)
    assert asyncio.run(replayed(pinned_tool(replay, tide))) == (True, "Brest: high water at 14:02")
    assert replay.unused() == {}

    async def not_cancelled(call_tide: Any) -> list[str]:
        # Never cancelled (the replay went elsewhere), the asking is answered after a bounded wait: no hang.
        return [await call_tide("Brest"), await call_tide("Brest")]

    again = ReplayPins.from_store(store, types)
    assert asyncio.run(not_cancelled(pinned_tool(again, tide))) == ["Brest: high water at 14:02"] * 2
    # The difference is reported: the pin saying that asking was cancelled is left unused.
    marker = cancelled_asking_key(tool_pin("tide", {"port": "Brest"}).key, 1)
    assert again.unused() == {marker: CANCELLED_ASKING}
