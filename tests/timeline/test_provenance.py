"""Provenance: a call policy's identity and this process's stamp, built by provider and handed to the timeline."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pytest

from anagrapheus.errors import ProvenanceMismatch
from anagrapheus.provider.provenance import STAMPING, current_provenance, pinned_responses, provenance_of_pins
from anagrapheus.timeline import PinPromoted, StoredEvent
from anagrapheus.timeline import provenance as provenance_module
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, canonical_json
from anagrapheus.timeline.ordered import ORDERED_FIELD
from anagrapheus.timeline.provenance import (
    Provenance,
    ProvenanceWarning,
    Stamping,
    call_policy_identity,
    check_provenance,
    default_stamping,
    own_provenance,
    stamp_provenance,
    use_stamp,
)
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording


class Named:
    name = "named"
    version = 3


class Unnamed:
    pass


class OddlyVersioned:
    name = "odd"
    version = True


class TextVersioned:
    name = "text"
    version = "2"


class Inheriting(Named):
    pass


def test_a_policy_is_named_by_its_own_class_only() -> None:
    assert call_policy_identity(None) == ("semantic", 1)
    assert call_policy_identity(Named()) == ("named", 3)
    assert call_policy_identity(Unnamed()) == (f"{__name__}.Unnamed", 1)
    # A bool is an int in Python, and True == 1: the version must be an int and not a bool, checked by type.
    for oddly, name in ((OddlyVersioned(), "odd"), (TextVersioned(), "text")):
        identity = call_policy_identity(oddly)
        assert identity == (name, 1) and type(identity[1]) is int
    assert call_policy_identity(Inheriting()) == (f"{__name__}.Inheriting", 1)


def test_the_stamp_names_each_model_and_provider_once_sorted() -> None:
    responses = [
        {"model_name": "m-b", "provider_name": "p-2"},
        {"model_name": "m-a", "provider_name": "p-1"},
        {"model_name": "m-b", "provider_name": None},
        {"other": 1},
    ]

    stamp = current_provenance(responses, call_policy=Named())

    assert (stamp.models, stamp.providers) == (("m-a", "m-b"), ("p-1", "p-2"))
    assert (stamp.key_scheme, stamp.call_policy, stamp.call_policy_version) == (KEY_SCHEME, "named", 3)


def recorded(**change: object) -> Provenance:
    return current_provenance([]).model_copy(update=change)


def test_another_key_scheme_is_refused_with_both_schemes() -> None:
    with pytest.raises(ProvenanceMismatch) as caught:
        check_provenance(recorded(key_scheme="p0"), path="run.jsonl", rerecord="make rerecord")

    error = caught.value
    assert (error.path, error.line, error.field, error.recorded, error.current) == (
        "run.jsonl",
        1,
        "key_scheme",
        "p0",
        KEY_SCHEME,
    )
    assert "none of its pins can answer" in str(error) and "Re-record it with `make rerecord`" in str(error)


def test_another_call_policy_is_refused_with_both_identities() -> None:
    with pytest.raises(ProvenanceMismatch) as caught:
        check_provenance(recorded(), path="run.jsonl", rerecord="make rerecord", call_policy=Named())

    error = caught.value
    assert (error.path, error.field, error.recorded, error.current) == (
        "run.jsonl",
        "call_policy",
        ("semantic", 1),
        ("named", 3),
    )


def test_another_library_version_warns_by_default_naming_the_file_and_strict_refuses_with_both() -> None:
    old = recorded(pydantic_ai="0.0.1")

    with pytest.warns(ProvenanceWarning, match=r"^run\.jsonl: recorded with pydantic-ai 0\.0\.1, loaded with"):
        check_provenance(old, path="run.jsonl", rerecord="make rerecord")
    with pytest.raises(ProvenanceMismatch) as caught:
        check_provenance(old, path="run.jsonl", rerecord="make rerecord", check="strict")
    error = caught.value
    assert (error.path, error.field, error.recorded, error.current) == (
        "run.jsonl",
        "pydantic_ai",
        "0.0.1",
        current_provenance([]).pydantic_ai,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_provenance(old, path="run.jsonl", rerecord="make rerecord", check="ignore")


def test_each_refusal_and_warning_says_it_in_full() -> None:
    with pytest.raises(ProvenanceMismatch) as scheme:
        check_provenance(recorded(key_scheme="p0"), path="run.jsonl", rerecord="make rerecord")
    anagrapheus = current_provenance([]).anagrapheus
    assert str(scheme.value).endswith(
        f"recorded under pin-key scheme 'p0', but this anagrapheus keys with {KEY_SCHEME!r}: none of its pins can"
        " answer, and keys are digests of what was asked, so they cannot be converted. Re-record it with"
        f" `make rerecord`; until then, replay it with the anagrapheus that wrote it ({anagrapheus})"
    )
    old = recorded(pydantic_ai="0.0.1")
    now = current_provenance([]).pydantic_ai
    message = (
        f"recorded with pydantic-ai 0.0.1, loaded with pydantic-ai {now}; a call the new version asks differently"
        " will miss its pin. If the replay misses, re-record it with `make rerecord`"
    )
    with pytest.raises(ProvenanceMismatch) as strict:
        check_provenance(old, path="run.jsonl", rerecord="make rerecord", check="strict")
    assert str(strict.value).endswith(message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_provenance(old, path="run.jsonl", rerecord="make rerecord")
    (warning,) = [w for w in caught if not issubclass(w.category, ResourceWarning)]  # not the collector's
    assert str(warning.message) == f"run.jsonl: {message}"
    # It points past the library, at whoever loaded the recording.
    assert warning.filename != provenance_module.__file__


HEADER = RecordingHeader(description="stamp tests", recorded_with="synthetic", rerecord="pytest tests/x.py")
TIMELINE = Path(__file__).resolve().parents[2] / "anagrapheus" / "timeline"
RESPONSE: dict[str, JSONValue] = {"kind": "response", "model_name": "m-1", "provider_name": "p-1", "parts": []}


def pin(seq: int, raw: JSONValue) -> StoredEvent:
    payload = PinPromoted(unit_id="u", key=f"p1:model_call:{seq:064x}", kind="model_call", raw=raw, attempts=1)
    text = canonical_json(payload.model_dump(mode="json"))
    return StoredEvent(seq, f"e{seq}", "anagrapheus", "pin_promoted", 2, None, "u", "2026-01-01T00:00:00Z", text)


def test_without_a_stamping_the_timeline_stamps_with_the_providers() -> None:
    assert default_stamping() is STAMPING
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


def test_a_timeline_stamping_stamps_only_what_the_timeline_knows(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "run.jsonl", [pin(1, RESPONSE)], header=HEADER, stamp=Stamping())

    provenance = read_recording(path, provenance="ignore").header.provenance
    assert provenance is not None
    assert (provenance.pydantic_ai, provenance.models, provenance.providers) == (None, (), ())
    # Passed, not kept: the next recording written without one is stamped with the provider's again.
    again = read_recording(write_recording(tmp_path / "again.jsonl", [pin(1, RESPONSE)], header=HEADER)).header
    assert again.provenance is not None and again.provenance.models == ("m-1",)


def test_the_provider_stamping_passed_writes_the_bytes_written_without_one(tmp_path: Path) -> None:
    given = write_recording(tmp_path / "given.jsonl", [pin(1, RESPONSE)], header=HEADER, stamp=STAMPING)
    default = write_recording(tmp_path / "default.jsonl", [pin(1, RESPONSE)], header=HEADER)

    assert given.read_bytes() == default.read_bytes()


def test_use_stamp_warns_and_still_stamps_until_replaced(tmp_path: Path) -> None:
    try:
        with pytest.warns(DeprecationWarning, match="use_stamp"):
            use_stamp(provenance_module._own_stamp)  # pyright: ignore[reportPrivateUsage]
        path = write_recording(tmp_path / "run.jsonl", [pin(1, RESPONSE)], header=HEADER)
        # The default policy and the verified releases are kept from the stamping it replaced.
        assert call_policy_identity(None) == ("semantic", 1)
    finally:
        provenance_module._handed.clear()  # pyright: ignore[reportPrivateUsage]

    provenance = read_recording(path, provenance="ignore").header.provenance
    assert provenance is not None
    assert (provenance.pydantic_ai, provenance.models, provenance.providers) == (None, (), ())


def test_importing_the_package_fills_no_module_slot() -> None:
    # A fresh interpreter: the root and every layer imported, nothing of the timeline's provenance was handed over.
    code = (
        "import anagrapheus, anagrapheus.provider, anagrapheus.timeline.provenance as p, sys;"
        "assert p._handed == [] and p.default_stamping.cache_info().currsize == 0, 'filled at import';"
        "assert 'anagrapheus.provider.provenance' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


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


def _timeline_modules() -> dict[str, Path]:
    """Each module of the timeline, its rooms' (resolving/, recording/, stores/) included, by dotted name."""
    modules: dict[str, Path] = {}
    for path in sorted(TIMELINE.rglob("*.py")):
        parts = path.relative_to(TIMELINE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        modules[".".join(("anagrapheus", "timeline", *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return modules


def test_the_timeline_imports_nothing_above_it_and_reads_no_pydantic_ai_shape() -> None:
    for path in _timeline_modules().values():
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


ROOMS = ("resolving", "recording", "stores")
"""The timeline's sub-packages; the modules beside them are shared by all three."""


def test_no_shared_module_imports_a_room_and_only_resolving_imports_resolving() -> None:
    # The layout drawn in docs/explanation/design.md: rooms build on the shared modules, resolving on the other two.
    rooms = {room for room in ROOMS if (TIMELINE / room / "__init__.py").is_file()}
    for name, path in _timeline_modules().items():
        room = name.split(".")[2] if name.split(".")[2] in rooms else None
        imported = {other.split(".")[2] for other in _imports(path) if other.startswith("anagrapheus.timeline.")}
        rooms_imported = (imported & rooms) - {room}
        if room is None:
            assert not rooms_imported, f"{name} (shared) imports the room(s) {sorted(rooms_imported)}"
        elif room != "resolving":
            assert "resolving" not in rooms_imported, f"{name} imports the resolving room"


def test_no_import_cycle_among_the_timeline_modules() -> None:
    modules = _timeline_modules()
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
