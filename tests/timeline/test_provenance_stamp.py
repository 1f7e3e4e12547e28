"""Provenance is built by the provider layer and handed to the timeline, which knows nothing of pydantic-ai's shapes."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pytest

from anagrapheus.provider.provenance import current_provenance, pinned_responses, provenance_of_pins
from anagrapheus.timeline import PinPromoted, StoredEvent
from anagrapheus.timeline import provenance as provenance_module
from anagrapheus.timeline.canonical import JSONValue, canonical_json
from anagrapheus.timeline.ordered import ORDERED_FIELD
from anagrapheus.timeline.provenance import Provenance, own_provenance, stamp_provenance, use_stamp
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording

HEADER = RecordingHeader(description="stamp tests", recorded_with="synthetic", rerecord="pytest tests/x.py")
TIMELINE = Path(__file__).resolve().parents[2] / "anagrapheus" / "timeline"
RESPONSE: dict[str, JSONValue] = {"kind": "response", "model_name": "m-1", "provider_name": "p-1", "parts": []}


def pin(seq: int, raw: JSONValue) -> StoredEvent:
    payload = PinPromoted(unit_id="u", key=f"p1:model_call:{seq:064x}", kind="model_call", raw=raw, attempts=1)
    text = canonical_json(payload.model_dump(mode="json"))
    return StoredEvent(seq, f"e{seq}", "anagrapheus", "pin_promoted", 2, None, "u", "2026-01-01T00:00:00Z", text)


def test_the_package_root_hands_the_timeline_the_provider_stamp() -> None:
    stamped = stamp_provenance([RESPONSE, {"kind": "request", "model_name": "not-a-response"}])

    assert (stamped.models, stamped.providers) == (("m-1",), ("p-1",))
    assert stamped.pydantic_ai == metadata.version("pydantic-ai-slim")
    assert stamped == provenance_of_pins([RESPONSE, {"kind": "request"}], call_policy=None)


def test_a_response_pinned_as_ordered_text_is_read_as_the_response() -> None:
    ordered: JSONValue = {ORDERED_FIELD: json.dumps(RESPONSE)}

    assert list(pinned_responses([ordered, "text", None, {"kind": "response"}])) == [RESPONSE, {"kind": "response"}]


def test_a_stamp_handed_to_the_writer_sees_each_pin_result_as_written(tmp_path: Path) -> None:
    seen: list[JSONValue] = []

    def stamp(results: Iterable[JSONValue], /, *, call_policy: object | None) -> Provenance:
        seen.extend(results)
        return own_provenance(call_policy=call_policy).model_copy(update={"models": ("handed",)})

    path = write_recording(tmp_path / "run.jsonl", [pin(1, RESPONSE), pin(2, [1, 2])], header=HEADER, stamp=stamp)

    assert seen == [RESPONSE, [1, 2]]
    provenance = read_recording(path, provenance="ignore").header.provenance
    assert provenance is not None and (provenance.models, provenance.pydantic_ai) == (("handed",), None)


def test_a_header_that_brings_provenance_is_never_stamped(tmp_path: Path) -> None:
    def stamp(results: Iterable[JSONValue], /, *, call_policy: object | None) -> Provenance:
        raise AssertionError("stamped a header that had provenance")

    header = HEADER.model_copy(update={"provenance": own_provenance()})
    path = write_recording(tmp_path / "run.jsonl", [pin(1, RESPONSE)], header=header, stamp=stamp)

    assert read_recording(path, provenance="ignore").header.provenance == own_provenance()


def test_without_the_provider_stamp_the_timeline_stamps_only_what_it_knows(tmp_path: Path) -> None:
    try:
        use_stamp(provenance_module._own_stamp)  # pyright: ignore[reportPrivateUsage]
        path = write_recording(tmp_path / "run.jsonl", [pin(1, RESPONSE)], header=HEADER)
    finally:
        use_stamp(provenance_of_pins)

    provenance = read_recording(path, provenance="ignore").header.provenance
    assert provenance is not None
    assert (provenance.pydantic_ai, provenance.models, provenance.providers) == (None, (), ())
    assert provenance.anagrapheus == metadata.version("anagrapheus")


def test_the_timeline_current_provenance_is_deprecated_for_the_provider_one() -> None:
    with pytest.warns(DeprecationWarning, match=r"use anagrapheus\.provider\.provenance\.current_provenance"):
        stamped = provenance_module.current_provenance([RESPONSE])

    assert stamped == current_provenance([RESPONSE])


def test_the_pin_codec_finds_a_pin_result_in_a_parsed_payload_only() -> None:
    assert PinPromoted.result_in({"raw": RESPONSE, "key": "k"}) == RESPONSE
    assert PinPromoted.result_in({"key": "k"}) is None
    assert PinPromoted.result_in("not a payload") is None


def _imports(path: Path) -> set[str]:
    """Every module a file imports, type-only and function-local imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_timeline_imports_nothing_above_it_and_reads_no_pydantic_ai_shape() -> None:
    for path in sorted(TIMELINE.glob("*.py")):
        above = {
            name
            for name in _imports(path)
            if name.split(".")[0] in ("anagrapheus", "pydantic_ai")
            # The error root and the deprecation helper sit below every layer; they import nothing of it.
            and not name.startswith(("anagrapheus.timeline.", "anagrapheus.errors", "anagrapheus.deprecation"))
        }
        assert not above, f"{path.name} imports {sorted(above)}"
        text = path.read_text(encoding="utf-8")
        for shape in ("model_name", "provider_name", "pydantic-ai-slim", '"response"'):
            assert shape not in text, f"{path.name} names {shape}"


def test_no_import_cycle_among_the_timeline_modules() -> None:
    modules = {f"anagrapheus.timeline.{path.stem}": path for path in TIMELINE.glob("*.py") if path.stem != "__init__"}
    edges = {name: {other for other in _imports(path) if other in modules} - {name} for name, path in modules.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges[start] - seen:
            seen.add(nxt)
            if nxt == goal or reaches(nxt, goal, seen):
                return True
        return False

    assert [name for name in sorted(modules) if reaches(name, name, set())] == []


def test_a_distribution_not_installed_has_no_version() -> None:
    assert provenance_module.installed_version("no-such-distribution-of-anagrapheus") is None
