"""The public surface: everyday names at the top level, old import paths kept, one PinPromoted codec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import anagrapheus
from anagrapheus.errors import CorruptEvent
from anagrapheus.timeline import EventTypeRegistry, PinPromoted, SQLiteEventStore, StoredEvent
from anagrapheus.timeline.canonical import stored_json
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent, PinText


def test_the_everyday_names_come_from_the_top_level_and_from_their_old_paths() -> None:
    from anagrapheus.errors import PinMiss
    from anagrapheus.provider import PinnedModel, SemanticCallPolicy, pinned_tool
    from anagrapheus.timeline import (
        PinLedger,
        ReplayPins,
        read_recording,
        write_recording,
    )
    from anagrapheus.timeline import PinMiss as timeline_miss
    from anagrapheus.timeline import SQLiteEventStore as Store

    assert (anagrapheus.PinnedModel, anagrapheus.pinned_tool) == (PinnedModel, pinned_tool)
    assert (anagrapheus.PinLedger, anagrapheus.ReplayPins, anagrapheus.SQLiteEventStore) == (
        PinLedger,
        ReplayPins,
        Store,
    )
    assert (anagrapheus.write_recording, anagrapheus.read_recording) == (write_recording, read_recording)
    assert anagrapheus.PinMiss is PinMiss is timeline_miss
    assert anagrapheus.SemanticCallPolicy is SemanticCallPolicy
    from anagrapheus.timeline import SecretRule, SecretScanner

    assert (anagrapheus.SecretScanner, anagrapheus.SecretRule) == (SecretScanner, SecretRule)


def test_the_exports_are_the_names_users_write_against() -> None:
    # Deliberately pinned: a name added here is a promise for the API reference; one taken away needs a deprecation.
    import anagrapheus.timeline

    assert sorted(anagrapheus.__all__) == sorted(
        [
            "AnagrapheusError",
            "EventTypeRegistry",
            "OpenRun",
            "PinLedger",
            "PinMiss",
            "PinnedModel",
            "Pinning",
            "ReplayPins",
            "SQLiteEventStore",
            "SecretScanner",
            "SecretRule",
            "SemanticCallPolicy",
            "aresume",
            "mint_entity_id",
            "open_runs",
            "pin_events",
            "pinned_tool",
            "read_recording",
            "register_builtin_events",
            "resume",
            "write_recording",
        ]
    )
    # The reference page's `register_builtin_events` and `pin_events` are exported again, never warning (#40).
    assert len(anagrapheus.timeline.__all__) == 40
    for module in (anagrapheus, anagrapheus.timeline):
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_divergence_keeps_its_old_import_paths() -> None:
    from anagrapheus.timeline import Divergence
    from anagrapheus.timeline.divergence import Divergence as moved
    from anagrapheus.timeline.fingerprint import moved_fields
    from anagrapheus.timeline.resolving.replay import Divergence as old

    assert Divergence is moved is old
    assert moved_fields({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "-c"]


@pytest.mark.parametrize("module", ["anagrapheus.errors", "anagrapheus.timeline.divergence", "anagrapheus"])
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    # An import cycle shows only when its first module is imported first; each gets a fresh process.
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=60)


def test_importing_the_timeline_loads_no_pydantic_ai() -> None:
    # The root imports each public name when first read (PEP 562), so a layer brings in only what it imports.
    check = "import anagrapheus.timeline, sys; assert 'pydantic_ai' not in sys.modules, 'pydantic_ai loaded'"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


def test_the_lazy_root_and_provider_list_and_serve_every_public_name() -> None:
    import anagrapheus.provider

    for package in (anagrapheus, anagrapheus.provider):
        assert set(package.__all__) <= set(dir(package))
        for name in package.__all__:
            assert getattr(package, name) is not None
        with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
            _ = package.nothing_here  # type: ignore[attr-defined]
    assert anagrapheus.PinnedModel is anagrapheus.provider.PinnedModel


# Any UTF-8 text: a stored payload keeps its strings as given (#45), so a text NFC changes (U+F900) reads back as
# itself.
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8) | st.sampled_from(
    ["\uf900", "cafe\u0301"]
)
raws = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


@given(
    unit_id=texts,
    key=texts,
    kind=st.sampled_from(["model_call", "tool_call"]),
    raw=raws,
    attempts=st.integers(1, 99),
    fingerprint=st.none() | st.dictionaries(texts, texts, max_size=3),
)
def test_the_pin_promoted_codec_writes_what_the_registry_writes_and_reads_it_back(
    unit_id: str, key: str, kind: str, raw: object, attempts: int, fingerprint: dict[str, str] | None
) -> None:
    types = EventTypeRegistry()
    event = PinPromoted.model_validate(
        {"unit_id": unit_id, "key": key, "kind": kind, "raw": raw, "attempts": attempts, "fingerprint": fingerprint}
    )
    text = PinPromoted.payload_text(
        unit_id=unit_id,
        key=key,
        kind=kind,
        raw=stored_json(raw),
        attempts=attempts,
        fingerprint=None if fingerprint is None else stored_json(fingerprint),
    )
    assert text == types.encode(event).payload
    stored = StoredEvent(1, "e", BUILTIN_NAMESPACE, "pin_promoted", 1, None, None, "t", text)
    assert PinPromoted.read(stored, types) == types.decode(stored) == event
    expected = PinText(
        unit_id=event.unit_id,
        key=event.key,
        kind=event.kind,
        raw_text=stored_json(event.raw),
        attempts=attempts,
        fingerprint=None if fingerprint is None else stored_json(fingerprint),
    )
    # Cut from the canonical payload, and re-encoded from a payload spelled otherwise (spaces, no fingerprint field).
    assert PinPromoted.read_text(stored, types) == expected
    spaced = json.dumps(json.loads(text), indent=1)
    if fingerprint is None:
        spaced = json.dumps({k: v for k, v in json.loads(text).items() if k != "fingerprint"})
    respelled = StoredEvent(1, "e", BUILTIN_NAMESPACE, "pin_promoted", 1, None, None, "t", spaced)
    assert PinPromoted.read_text(respelled, types) == expected


@pytest.mark.parametrize(
    "payload",
    [
        '{"attempts":1,"key":"k","kind":"model_call","raw":1}',
        '{"attempts":1,"key":"k","kind":"model_call","raw":1,"unit_id":7}',
        '{"attempts":1,"fingerprint":{"a":1},"key":"k","kind":"model_call","raw":1,"unit_id":"u"}',
        '{"attempts":1,"key":"k","kind":"model_call","raw":1,"unit_id":"u","extra":0}',
    ],
)
def test_the_pin_promoted_reader_refuses_what_the_model_refuses(tmp_path: Path, payload: str) -> None:
    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path / "log.db") as store:
        store.append([PendingEvent(BUILTIN_NAMESPACE, "pin_promoted", 1, payload)])
        stored = next(store.read())
    with pytest.raises(CorruptEvent):
        types.decode(stored)
    with pytest.raises(CorruptEvent):
        PinPromoted.read(stored, types)
