"""A caller's digest gives nothing back: salted per unit and memory-hard, or keyed; old units replay as before (#41)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import CallerKeyMissing, PinMiss, PinResultError
from anagrapheus.provider import callers
from anagrapheus.provider.callers import CALLER_KEY_ENV, CALLER_SALT, CallerSalt, caller_digest, unit_salt
from anagrapheus.provider.inputs import recorded_runs
from anagrapheus.timeline import EventTypeRegistry, PinLedger, RecordingHeader, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.events import StoredEvent
from anagrapheus.timeline.recording import read_recording, write_recording
from anagrapheus.timeline.resolving.resolver import as_resolver


@dataclass
class Login:
    """Deps holding a guessable secret: a 4-digit PIN."""

    account: str
    pin: str


BALANCES = {"4821": "1200 EUR", "0007": "35 EUR"}
# Alice's PIN standing on its own: any run of hex digits (a key, an id) holds four given digits about once in 65,536
# places, so a bare substring test failed by chance in CI.
PIN_OUTSIDE_HEX = re.compile(r"(?<![0-9a-f])4821(?![0-9a-f])")


def teller() -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(f"You hold {returned[0].content}.")])
        return ModelResponse(parts=[ToolCallPart("balance", {})])

    return FunctionModel(answer, model_name="scripted-teller")


def bank(reads: list[str]) -> Agent[Login, str]:
    agent = Agent(teller(), deps_type=Login)

    @agent.tool
    def balance(ctx: RunContext[Login]) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read the caller's balance."""
        reads.append(ctx.deps.pin)
        return BALANCES[ctx.deps.pin]

    return agent


def record(folder: Path, types: EventTypeRegistry, deps: Login, *, unit_id: str | None = None) -> Path:
    with SQLiteEventStore(folder / "live.db") as store:
        ledger = PinLedger(store, types, unit_id=unit_id)
        bank([]).run_sync("Balance?", deps=deps, capabilities=[Pinning(ledger)])
        ledger.commit()
        header = RecordingHeader(description="A balance.", recorded_with="A scripted model.", rerecord="pytest")
        return write_recording(folder / "bank.jsonl", store.read(namespace="anagrapheus"), header=header)


def salt_in(path: Path, types: EventTypeRegistry) -> CallerSalt:
    replay = ReplayPins.from_recording(path, types)
    (key,) = [key for key, kind in replay.unused().items() if kind == CALLER_SALT]
    raw = replay.recorded(key)
    return CallerSalt.from_raw(raw)


def events_of(path: Path, types: EventTypeRegistry) -> list[StoredEvent]:
    return list(read_recording(path, registry=types).events)


def identity(deps: Login) -> str:
    return canonical_json({"account": deps.account, "pin": deps.pin})


def test_a_recording_holds_a_salted_memory_hard_digest_that_no_unsalted_guess_finds(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    alice = Login("alice", "4821")
    path = record(tmp_path, types, alice)
    text = path.read_text(encoding="utf-8")
    (run,) = recorded_runs(events_of(path, types))
    assert run.caller is not None and run.caller.startswith("p1:caller:s1-")
    # The attack that worked before: the sha256 of every guess. Neither the PIN's digest nor any guess is there.
    unsalted = hashlib.sha256(identity(alice).encode()).hexdigest()
    assert unsalted not in text and not PIN_OUTSIDE_HEX.search(text)
    assert not any(
        hashlib.sha256(identity(Login("alice", f"{guess:04}")).encode()).hexdigest() in text for guess in range(10_000)
    )
    # The digest is found only through the unit's salt, at scrypt's cost per guess.
    salt = salt_in(path, types)
    assert caller_digest(identity(alice), salt) == run.caller
    assert caller_digest(identity(Login("alice", "4822")), salt) != run.caller


def test_each_unit_draws_its_own_salt_so_one_caller_digests_apart_in_two_recordings(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    alice = Login("alice", "4821")
    first = recorded_runs(events_of(record(tmp_path / "a", types, alice), types))[0].caller
    second = recorded_runs(events_of(record(tmp_path / "b", types, alice), types))[0].caller
    assert first is not None and second is not None and first != second


def test_two_recordings_of_one_named_unit_hold_the_same_keys_so_a_pull_request_shows_what_changed(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    alice = Login("alice", "4821")

    def keys(folder: str) -> list[str]:
        path = record(tmp_path / folder, types, alice, unit_id="test_balance")
        return sorted(ReplayPins.from_recording(path, types).unused())

    assert keys("a") == keys("b")


def test_a_salted_recording_replays_each_caller_its_own_answer(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = record(tmp_path, types, Login("alice", "4821"))
    reads: list[str] = []
    again = bank(reads).run_sync(
        "Balance?", deps=Login("alice", "4821"), capabilities=[Pinning(ReplayPins.from_recording(path, types))]
    )
    assert again.output == "You hold 1200 EUR."
    with pytest.raises(PinMiss):
        bank(reads).run_sync(
            "Balance?", deps=Login("alice", "0007"), capabilities=[Pinning(ReplayPins.from_recording(path, types))]
        )
    assert reads == []


def test_a_caller_is_digested_once_per_salt_in_a_process() -> None:
    salt = CallerSalt("00" * 16, keyed=False)
    text = identity(Login("carol", "1234"))
    callers._stretched.cache_clear()  # pyright: ignore[reportPrivateUsage]
    first = caller_digest(text, salt)
    assert all(caller_digest(text, salt) == first for _ in range(1000))
    # One scrypt for the thousand and one digests; another salt is another digest, of its own.
    assert callers._stretched.cache_info().misses == 1  # pyright: ignore[reportPrivateUsage]
    assert caller_digest(text, CallerSalt("01" * 16, keyed=False)) != first
    assert callers._stretched.cache_info().misses == 2  # pyright: ignore[reportPrivateUsage]


def test_a_keyed_unit_digests_under_the_environments_key_which_no_recording_holds(
    tmp_path: Path, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "k3y-0f-the-team-" + "x" * 16
    monkeypatch.setenv(CALLER_KEY_ENV, key)
    path = record(tmp_path, types, Login("alice", "4821"))
    assert key not in path.read_text(encoding="utf-8")
    (run,) = recorded_runs(events_of(path, types))
    assert run.caller is not None and run.caller.startswith("p1:caller:k1-")
    assert salt_in(path, types).keyed

    replayed = bank([]).run_sync(
        "Balance?", deps=Login("alice", "4821"), capabilities=[Pinning(ReplayPins.from_recording(path, types))]
    )
    assert replayed.output == "You hold 1200 EUR."
    monkeypatch.delenv(CALLER_KEY_ENV)
    with pytest.raises(CallerKeyMissing, match=CALLER_KEY_ENV):
        bank([]).run_sync(
            "Balance?", deps=Login("alice", "4821"), capabilities=[Pinning(ReplayPins.from_recording(path, types))]
        )


def test_a_unit_recorded_before_salts_replays_under_its_unsalted_digests(
    tmp_path: Path, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recorded as anagrapheus did before #41: no salt pin, each caller under the sha256 of its identity.
    with monkeypatch.context() as before:
        before.setattr("anagrapheus.provider.tools.unit_salt", lambda resolver: None)
        path = record(tmp_path, types, Login("alice", "4821"))
    text = path.read_text(encoding="utf-8")
    assert CALLER_SALT not in text
    assert hashlib.sha256(identity(Login("alice", "4821")).encode()).hexdigest() in text

    replay = ReplayPins.from_recording(path, types)
    again = bank([]).run_sync("Balance?", deps=Login("alice", "4821"), capabilities=[Pinning(replay)])
    assert again.output == "You hold 1200 EUR."
    with pytest.raises(PinMiss):
        bank([]).run_sync(
            "Balance?", deps=Login("alice", "0007"), capabilities=[Pinning(ReplayPins.from_recording(path, types))]
        )


def test_a_salt_pin_that_is_not_a_salt_is_refused() -> None:
    for raw in ({"salt": "zz" * 16, "keyed": False}, {"salt": "00", "keyed": False}, {"salt": "00" * 16}, "salt"):
        with pytest.raises(PinResultError):
            CallerSalt.from_raw(json.loads(json.dumps(raw)))


class Relay:
    """A resolver of the application's own: it carries no attachments and names no unit."""

    def __init__(self, ledger: PinLedger) -> None:
        self.ledger = ledger

    def resolve(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve(key, **options)


def test_a_resolver_keeping_nothing_is_asked_its_units_salt_each_time_and_answers_the_one_it_drew(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    with pytest.warns(DeprecationWarning, match="does not subclass"):  # adapted once, where it enters
        relay = as_resolver(Relay(ledger))
    first = unit_salt(relay)
    assert first is not None and unit_salt(relay) == first
    assert unit_salt(ledger) == first
    (pin,) = [pin for pin in ledger.pins() if pin.kind == CALLER_SALT]
    assert pin.attempts == 3
