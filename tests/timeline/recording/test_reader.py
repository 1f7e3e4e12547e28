"""Reading a recording: the events read back, what it names when it cannot, and provenance checked on load."""

from __future__ import annotations

import json
import platform
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic_ai import Agent

from anagrapheus.errors import ProvenanceMismatch, RecordingError, UsageError
from anagrapheus.provider import PinnedModel, SemanticCallPolicy
from anagrapheus.timeline import PinLedger, ProvenanceWarning, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.events import EventTypeRegistry
from anagrapheus.timeline.provenance import call_policy_identity
from anagrapheus.timeline.recording import (
    RECORDING_VERSION,
    RecordingHeader,
    read_recording,
    stream_recording,
    write_recording,
)
from tests.conftest import Scripted
from tests.timeline.sample_recording import HEADER, edited, logged_events, refused


def test_the_events_read_back_are_the_events_written(tmp_path: Path) -> None:
    events = logged_events(tmp_path / "run.db")
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER)
    assert read_recording(path).events == tuple(events)
    assert list(stream_recording(path)[1]) == events
    assert events[1].causation_id == "c0"


def test_a_missing_file_is_refused_naming_it_and_why(tmp_path: Path) -> None:
    refused(tmp_path / "nowhere.jsonl", None, "cannot read the recording (No such file or directory)")


def test_a_decode_failure_names_the_file_and_line(recording: Path) -> None:
    edited(recording, 4, type="unheard_of")
    with pytest.raises(RecordingError) as raised:
        read_recording(recording, registry=EventTypeRegistry())
    assert (raised.value.path, raised.value.line) == (str(recording), 4)
    assert read_recording(recording).path == recording


PROVENANCE_HEADER = RecordingHeader(
    description="provenance tests", recorded_with="scripted", rerecord="pytest tests/x.py"
)


class TersePolicy(SemanticCallPolicy):
    """A policy of one's own, named and versioned."""

    __slots__ = ()
    name: ClassVar[str] = "terse"
    version: ClassVar[int] = 3


class UnnamedPolicy(SemanticCallPolicy):
    __slots__ = ()


@pytest.fixture
def recorded(tmp_path: Path, types: EventTypeRegistry) -> Path:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        Agent(PinnedModel(Scripted("scripted-uk").model, ledger)).run_sync("Round 1: fisheries.")
        ledger.commit()
        return write_recording(
            tmp_path / "run.jsonl", store.read(namespace="anagrapheus", type="pin_promoted"), header=PROVENANCE_HEADER
        )


def edit_provenance(path: Path, **changes: Any) -> Path:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["provenance"].update(changes)
    lines[0] = json.dumps(header) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_the_header_says_what_made_the_recording(recorded: Path) -> None:
    provenance = read_recording(recorded).header.provenance

    assert provenance is not None
    assert provenance.anagrapheus == metadata.version("anagrapheus")
    assert provenance.pydantic_ai == metadata.version("pydantic-ai-slim")
    assert provenance.python == platform.python_version()
    assert (provenance.key_scheme, provenance.call_policy, provenance.call_policy_version) == ("p1", "semantic", 1)
    assert (provenance.models, provenance.providers) == (("scripted-uk",), ())  # a FunctionModel names no provider
    assert json.loads(recorded.read_text().splitlines()[0])["version"] == RECORDING_VERSION


def test_the_default_policy_is_the_one_assumed_when_none_is_named() -> None:
    default = (SemanticCallPolicy.name, SemanticCallPolicy.version)
    assert call_policy_identity(SemanticCallPolicy()) == default == call_policy_identity(None)
    assert call_policy_identity(TersePolicy()) == ("terse", 3)
    # A subclass that does not name itself is never taken for its parent.
    assert call_policy_identity(UnnamedPolicy()) == (f"{__name__}.UnnamedPolicy", 1)


def test_another_key_scheme_is_refused_saying_how_to_record_again(recorded: Path) -> None:
    edit_provenance(recorded, key_scheme="p0")

    with pytest.raises(ProvenanceMismatch) as caught:
        read_recording(recorded)

    assert caught.value.field == "key_scheme" and (caught.value.recorded, caught.value.current) == ("p0", "p1")
    assert "Re-record it with `pytest tests/x.py`" in str(caught.value) and caught.value.line == 1


def test_another_call_policy_is_refused_unless_it_is_the_one_loading(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        model = PinnedModel(Scripted("scripted-uk").model, ledger, policy=TersePolicy())
        Agent(model).run_sync("Round 1: fisheries.")
        ledger.commit()
        path = write_recording(
            tmp_path / "run.jsonl",
            store.read(namespace="anagrapheus", type="pin_promoted"),
            header=PROVENANCE_HEADER,
            call_policy=model.policy,
        )

    with pytest.raises(ProvenanceMismatch, match="call policy 'terse' v3, but loaded for 'semantic' v1") as caught:
        read_recording(path)
    assert "Pass call_policy= the policy that recorded it, or re-record it with `pytest tests/x.py`" in str(
        caught.value
    )

    assert read_recording(path, call_policy=TersePolicy()).header.provenance is not None


def test_another_library_version_warns_and_strict_refuses(recorded: Path) -> None:
    edit_provenance(recorded, pydantic_ai="2.0.0", anagrapheus="0.0.1")

    with pytest.warns(ProvenanceWarning) as warned:
        read_recording(recorded)
    messages = [str(w.message) for w in warned]
    assert any("recorded with anagrapheus 0.0.1" in m for m in messages)
    assert any("recorded with pydantic-ai 2.0.0" in m for m in messages)

    with pytest.raises(ProvenanceMismatch) as caught:
        read_recording(recorded, provenance="strict")
    assert caught.value.field == "anagrapheus"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_recording(recorded, provenance="ignore")


def test_the_same_versions_load_without_a_word(recorded: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_recording(recorded, provenance="strict")


@pytest.mark.parametrize("check", ["strcit", "WARN", None], ids=repr)
def test_a_misspelt_check_is_refused_rather_than_taken_for_warn(recorded: Path, check: object) -> None:
    edit_provenance(recorded, anagrapheus="0.0.1")

    with pytest.raises(UsageError) as caught:
        read_recording(recorded, provenance=check)  # pyright: ignore[reportArgumentType]

    assert str(caught.value) == f"provenance= must be 'warn', 'strict' or 'ignore', not {check!r}"


def test_a_version_1_recording_without_provenance_still_loads(recorded: Path, types: EventTypeRegistry) -> None:
    lines = recorded.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    del header["provenance"]
    header["version"] = 1
    lines[0] = json.dumps(header) + "\n"
    recorded.write_text("".join(lines), encoding="utf-8")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recording = read_recording(recorded, registry=types, provenance="strict")

    assert recording.header.provenance is None and len(recording.events) == 1


def test_a_header_that_brings_its_own_provenance_keeps_it(recorded: Path, tmp_path: Path) -> None:
    # Copying a recording keeps what made it, rather than claiming the copier made it.
    edit_provenance(recorded, pydantic_ai="2.0.0")
    with pytest.warns(ProvenanceWarning):
        original = read_recording(recorded)

    copy = write_recording(tmp_path / "copy.jsonl", original.events, header=original.header)

    copied = read_recording(copy, provenance="ignore").header.provenance
    assert copied == original.header.provenance and copied is not None and copied.pydantic_ai == "2.0.0"


def test_a_replay_streamed_from_the_file_checks_provenance_too(recorded: Path, types: EventTypeRegistry) -> None:
    edit_provenance(recorded, call_policy="terse", call_policy_version=3)

    with pytest.raises(ProvenanceMismatch, match="call policy 'terse' v3"):
        ReplayPins.from_recording(recorded, types)

    assert len(ReplayPins.from_recording(recorded, types, call_policy=TersePolicy())) == 1
