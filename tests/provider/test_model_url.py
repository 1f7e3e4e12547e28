"""A provider base URL's credentials never reach a pin: not the scratch table, the log, nor a recording."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent, models
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.recording import read_recording, write_recording
from benchmarks._stub_server import StubOpenAIServer

PASSWORD = "hunter2-in-the-url"
QUERY_SECRET = "query-secret-0042"


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def test_userinfo_and_query_are_stripped_at_pin_time(
    tmp_path: Path, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one test allowed to reach a model over HTTP: a stub on 127.0.0.1, never the network.
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)
    database = tmp_path / "live.db"
    with StubOpenAIServer(max_requests=4, lifetime=30.0) as server:
        base_url = server.base_url.replace("http://", f"http://user:{PASSWORD}@") + f"/?api-version={QUERY_SECRET}"
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key="stub-key"))
        with SQLiteEventStore(database) as store:
            ledger = PinLedger(store, types, unit_id="u")
            agent = Agent(PinnedModel(model, ledger), tools=[pinned_tool(ledger, lookup)])
            result = agent.run_sync("What is on the record?")
            # Scratch holds the pins before commit: they must already be clean there.
            assert PASSWORD.encode() not in database.read_bytes() + _wal(database)
            ledger.commit()
            path = write_recording(
                tmp_path / "run.jsonl", store.read(namespace="anagrapheus", type="pin_promoted"), header=_header()
            )

    assert result.output.startswith("Turn 1: the record says")
    responses = [m for m in result.all_messages() if m.kind == "response"]
    assert {r.provider_url for r in responses} == {server.base_url + "/"}
    stored = database.read_bytes() + _wal(database)
    text = path.read_text(encoding="utf-8")
    for secret in (PASSWORD, QUERY_SECRET):
        assert secret.encode() not in stored
        assert secret not in text
    recording = read_recording(path, registry=types)
    assert recording.header.provenance is not None
    assert recording.header.provenance.providers == ("openai",)
    payloads = [event.payload_json() for event in recording.events]
    assert {read_ordered(p["raw"])["provider_url"] for p in payloads if p["kind"] == "model_call"} == {
        server.base_url + "/"
    }


def _wal(database: Path) -> bytes:
    wal = database.with_name(database.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""


def _header() -> dict[str, str]:
    return {"description": "one stub turn", "recorded_with": "stub OpenAI server on 127.0.0.1", "rerecord": "pytest"}
