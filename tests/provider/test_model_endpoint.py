"""A response's provider URLs are pinned as the endpoint alone, without a socket: no userinfo, query or fragment."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel
from anagrapheus.provider.keying.material import known_fields
from anagrapheus.provider.model import endpoint_url, response_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

PASSWORD = "hunter2-in-the-url"
QUERY_SECRET = "query-secret-0042"

# What a provider with a logged-in base URL copies into its response, and what its pin keeps of each field.
DETAILS = {
    "base_url": f"https://user:{PASSWORD}@example.com:8443/v1/?api-key={QUERY_SECRET}",
    "status_url": f"https://example.com/jobs/7?sig={QUERY_SECRET}#top",
    # Not a URL field by its name: kept whole, whatever it looks like.
    "trace": "https://example.com/trace?id=7",
    # A URL field that is not text: kept as it is.
    "callback_url": None,
    "mirror_url": ["https://a.example.com/?k=1"],
}
PINNED_DETAILS = {
    "base_url": "https://example.com:8443/v1/",
    "status_url": "https://example.com/jobs/7",
    "trace": "https://example.com/trace?id=7",
    "callback_url": None,
    "mirror_url": ["https://a.example.com/?k=1"],
}


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://user:pw@example.com:8443/v1/?key=k#frag", "https://example.com:8443/v1/"),
        ("http://[::1]:9000/v1?api-version=1", "http://[::1]:9000/v1"),
        ("http://[::1]/v1", "http://[::1]/v1"),
        ("https://token@example.com/", "https://example.com/"),
        ("http://example.com:8080", "http://example.com:8080"),
        ("https://example.com/v1?api-key=k#x", "https://example.com/v1"),
        # No host: the path stays, the query and fragment go.
        ("unix:/run/model.sock?key=k#frag", "unix:/run/model.sock"),
        ("file:///srv/model?key=k", "file:///srv/model"),
        # Userinfo without a host: nothing to keep that is surely not a secret.
        ("http://user:pw@/v1", None),
        ("http://[::1", None),  # does not parse: dropped rather than kept with whatever it holds
    ],
)
def test_an_endpoint_url_keeps_where_and_drops_how(url: str, endpoint: str | None) -> None:
    assert endpoint_url(url) == endpoint


def test_a_response_is_pinned_with_its_urls_stripped_and_nothing_else_changed() -> None:
    response = ModelResponse(
        parts=[TextPart("The UK holds firm.")],
        provider_url=f"https://user:{PASSWORD}@example.com/v1?api-version={QUERY_SECRET}",
        provider_details=dict(DETAILS),
    )
    raw = response_raw(response)
    assert isinstance(raw, dict)
    assert raw["provider_url"] == "https://example.com/v1"
    assert raw["provider_details"] == PINNED_DETAILS
    # Stripped in the pin only: the response itself, and every other field of the pin, stay as they were.
    assert response.provider_details == DETAILS
    whole = TypeAdapter(ModelResponse).dump_python(response, mode="json")
    # A field a later pydantic-ai added (2.78's request_timestamp, duration), unset, is left out of the pin.
    known = known_fields(ModelResponse) or frozenset[str]()
    new = {name for name in whole if name not in known}
    assert all(whole[name] is None for name in new)
    kept = {name: value for name, value in whole.items() if name not in new}
    assert raw == kept | {"provider_url": "https://example.com/v1", "provider_details": PINNED_DETAILS}


def test_a_response_without_urls_is_pinned_without_them() -> None:
    raw = response_raw(ModelResponse(parts=[TextPart("The UK holds firm.")]))
    assert isinstance(raw, dict)
    assert (raw["provider_url"], raw["provider_details"]) == (None, None)
    assert "XXprovider_urlXX" not in raw


@pytest.mark.anyio
async def test_a_pinned_model_never_stores_nor_replays_a_urls_credentials(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    def answer(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart("The UK holds firm.")],
            provider_url=f"https://user:{PASSWORD}@example.com/v1/?api-version={QUERY_SECRET}",
            provider_details=dict(DETAILS),
        )

    database = tmp_path / "live.db"
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt("State the UK position.")]
    with SQLiteEventStore(database) as store:
        ledger = PinLedger(store, types)
        live = await PinnedModel(FunctionModel(answer, model_name="scripted-uk"), ledger).request(
            messages, None, ModelRequestParameters()
        )
        # Scratch holds the pin before commit: it must already be clean there.
        assert not _holds_secret(database)
        ledger.commit()
        replayed = await PinnedModel(
            FunctionModel(answer, model_name="scripted-uk"), ReplayPins.from_events(store.read(), types)
        ).request(messages, None, ModelRequestParameters())
    assert not _holds_secret(database)
    for response in (live, replayed):
        assert response.provider_url == "https://example.com/v1/"
        assert response.provider_details == PINNED_DETAILS


def _holds_secret(database: Path) -> bool:
    wal = database.with_name(database.name + "-wal")
    stored = database.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    return any(secret.encode() in stored for secret in (PASSWORD, QUERY_SECRET))
