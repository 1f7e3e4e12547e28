"""Record mode through `aresolve`: a miss is drawn through the ledger with all the call gave, as `resolve` does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
    fingerprint_of,
    pin_key,
)
from anagrapheus.timeline.canonical import JSONValue


def call(prompt: str) -> tuple[str, dict[str, str]]:
    material = {"model": "scripted-uk", "messages": [prompt]}
    return pin_key("model_call", material), fingerprint_of(material)


class Codec:
    """Pins a ValueError as its message, and rebuilds it."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(record["message"])


def shout(raw: JSONValue) -> str:
    return str(raw).upper()


def recorded(store: SQLiteEventStore, types: EventTypeRegistry) -> list[Any]:
    ledger = PinLedger(store, types, unit_id="first")
    for prompt in ("one", "two"):
        key, fp = call(prompt)
        ledger.resolve(key, kind="model_call", effect=lambda p=prompt: f"answer to {p}", interpret=str, fingerprint=fp)
    ledger.commit()
    return list(store.read())


def test_a_miss_answered_by_aresolve_in_record_mode_is_pinned_with_its_kind_and_fingerprint(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded(store, types), types, on_miss="record", into=ledger)

    async def fresh() -> str:
        return "fresh answer to TWO"

    async def run() -> list[str]:
        answers = []
        for prompt in ("one", "TWO"):
            key, fp = call(prompt)
            answers.append(await replay.aresolve(key, kind="model_call", effect=fresh, interpret=shout, fingerprint=fp))
        return answers

    assert asyncio.run(run()) == ["ANSWER TO ONE", "FRESH ANSWER TO TWO"]
    decoded = [types.decode(e) for e in ledger.commit()]
    adopted, diverged, drawn = decoded
    assert isinstance(adopted, PinPromoted) and adopted.key == call("one")[0]
    assert isinstance(diverged, ReplayDiverged) and diverged.key == call("TWO")[0]
    assert diverged.moved == ("messages[0]",) and diverged.after_hits == 1
    assert isinstance(drawn, PinPromoted)
    assert (drawn.unit_id, drawn.key, drawn.kind, drawn.raw, drawn.fingerprint, drawn.failed) == (
        "rerun",
        call("TWO")[0],
        "model_call",
        "fresh answer to TWO",
        call("TWO")[1],
        False,
    )


def test_a_failure_drawn_by_aresolve_in_record_mode_is_pinned_through_the_codec(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded(store, types), types, on_miss="record", into=ledger)
    key, fp = call("THREE")

    async def refuse() -> str:
        raise ValueError("the provider refused")

    with pytest.raises(ValueError, match="the provider refused"):
        asyncio.run(
            replay.aresolve(key, kind="model_call", effect=refuse, interpret=str, fingerprint=fp, failure=Codec())
        )

    [*_, drawn] = [types.decode(e) for e in ledger.commit()]
    assert isinstance(drawn, PinPromoted)
    assert (drawn.key, drawn.kind, drawn.failed, drawn.raw) == (
        key,
        "model_call",
        True,
        {"error": {"message": "the provider refused"}},
    )
