"""Names kept for one release after they were replaced: each still works, and warns with what to use instead."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest

import anagrapheus
import anagrapheus.timeline
from anagrapheus.errors import UnitClosed
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    EventTypeRegistry,
    PinPromoted,
    events_of,
    register_builtin_events,
)
from anagrapheus.timeline.recording import pin_events
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore


def test_register_builtin_events_is_the_seeds_own_and_warns_of_nothing() -> None:
    # The reference page's worked example calls it (#40): kept, quiet, and still changing nothing.
    types = EventTypeRegistry()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_builtin_events(types)
    assert types.lookup(BUILTIN_NAMESPACE, "pin_promoted") is PinPromoted


def test_pin_events_is_the_seeds_own_and_reads_what_the_store_reads_in_sql(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id="u")
        ledger.resolve("k", kind="tool_call", effect=lambda: 1, interpret=lambda raw: raw)
        committed = ledger.commit()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            seeded = list(pin_events(store.read()))
            assert list(pin_events(committed, with_inputs=True)) == list(events_of(committed, PinPromoted))
        assert seeded == list(store.read(namespace="anagrapheus", type="pin_promoted")) == committed


@pytest.mark.parametrize("name", ["pin_events", "register_builtin_events"])
@pytest.mark.parametrize("package", [anagrapheus, anagrapheus.timeline])
def test_the_seeds_functions_are_exported_by_the_packages(package: object, name: str) -> None:
    assert name in package.__all__  # type: ignore[attr-defined]
    assert getattr(package, name) is getattr(importlib.import_module(f"anagrapheus.timeline.{_home(name)}"), name)


def _home(name: str) -> str:
    return "recording" if name == "pin_events" else "events"


# Names deprecated since 0.1 and removed in 0.2 (CHANGELOG.md says what replaces each).
REMOVED_FROM_THE_TIMELINE = [
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "stream_pins",
    "stream_recording",
    "Provenance",
    "AmbiguousPinWarning",
    "StreamDraw",
    "RunInputs",
    "UnitForked",
    "ClosedUnit",
    "ClosedUnitLog",
    "LogImport",
    "OpenUnit",
    "PinScratchStore",
    "ScratchPin",
    "UnitOutcome",
]


@pytest.mark.parametrize("name", REMOVED_FROM_THE_TIMELINE)
def test_a_name_dropped_from_the_timeline_exports_is_gone_and_still_lives_in_its_module(name: str) -> None:
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(anagrapheus.timeline, name)
    homes = (
        "anagrapheus.timeline.recording",
        "anagrapheus.timeline.provenance",
        "anagrapheus.timeline.resolving.replay",
        "anagrapheus.timeline.resolving.resolver",
        "anagrapheus.timeline.events",
        "anagrapheus.timeline.stores.ports",
    )
    assert any(hasattr(importlib.import_module(home), name) for home in homes)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = anagrapheus.timeline.nothing_here  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        from anagrapheus import nothing_here  # type: ignore[attr-defined]  # noqa: F401


def test_the_text_of_a_pin_is_raw_text_and_the_old_raw_is_gone(tmp_path: Path) -> None:
    # `raw` is the parsed JSON on PinPromoted; where the result is canonical JSON text, it is `raw_text`.
    with SQLiteEventStore(tmp_path / "log.db") as store:
        ledger = PinLedger(store, unit_id="u")
        ledger.resolve("k", kind="tool_call", effect=lambda: {"a": 1}, interpret=lambda raw: raw)
        (scratch,) = ledger.pins()
        (stored,) = ledger.commit()
    text = PinPromoted.read_text(stored, EventTypeRegistry())
    assert scratch.raw_text == text.raw_text == '{"a":1}' and PinPromoted.read(stored, EventTypeRegistry()).raw == {
        "a": 1
    }
    closed = UnitClosed("u", state="committed", raw='"late"')
    assert closed.raw_text == '"late"'
    for old in (scratch, text, closed):
        assert not hasattr(old, "raw")


def test_the_fields_runs_differ_by_are_per_run_fields_and_the_old_name_is_gone() -> None:
    import anagrapheus.testing
    import anagrapheus.testing.compare

    assert (
        frozenset({"timestamp", "run_id", "conversation_id", "request_timestamp", "duration"})
        == anagrapheus.testing.PER_RUN_FIELDS
    )
    for module in (anagrapheus.testing, anagrapheus.testing.compare):
        assert not hasattr(module, "VOLATILE_FIELDS")


def test_the_default_call_policy_constant_and_the_timeline_current_provenance_are_gone() -> None:
    import anagrapheus.timeline.provenance as provenance

    assert not hasattr(provenance, "DEFAULT_CALL_POLICY") and not hasattr(provenance, "current_provenance")
    with pytest.raises(AttributeError, match="has no attribute 'NOTHING_HERE'"):
        _ = provenance.NOTHING_HERE  # type: ignore[attr-defined]


# "policy" is the call policy's word alone since 0.2.0: the secret scanner and regress's miss rule were renamed.


@pytest.mark.parametrize("module", ["anagrapheus", "anagrapheus.timeline", "anagrapheus.timeline.secrets"])
def test_secret_policy_is_the_secret_scanner_under_its_old_name_and_warns(module: str) -> None:
    from anagrapheus.timeline.secrets import SecretScanner

    with pytest.warns(DeprecationWarning, match=rf"{module}\.SecretPolicy is deprecated.*SecretScanner") as caught:
        old = importlib.import_module(module).SecretPolicy
    assert old is SecretScanner
    # The deprecation's, not a ResourceWarning the garbage collector may raise in the block for another test's loop.
    assert [w.filename for w in caught if issubclass(w.category, DeprecationWarning)] == [__file__]
    assert "SecretPolicy" not in importlib.import_module(module).__all__


def test_find_secrets_takes_its_scanner_by_the_old_keyword_too_with_a_warning(tmp_path: Path) -> None:
    from anagrapheus.errors import UsageError
    from anagrapheus.timeline.recording import read_recording
    from anagrapheus.timeline.secrets import SecretScanner
    from examples.negotiation.runs import RECORDING

    recording = read_recording(RECORDING)
    scanner = SecretScanner(environ={})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = recording.find_secrets(scanner)
    with pytest.warns(DeprecationWarning, match=r"find_secrets\(policy=\.\.\.\) is deprecated.*scanner="):
        assert recording.find_secrets(policy=scanner) == found
    with pytest.raises(UsageError, match="policy= is its old name"):
        recording.find_secrets(scanner, policy=scanner)


def test_regress_policy_is_the_replay_gates_spelling_of_on_miss_and_does_not_warn() -> None:
    """`policy=` is what the replay gate's page writes (a reference page): it keeps working without a warning."""
    from anagrapheus.errors import UsageError
    from anagrapheus.testing import regress
    from examples.negotiation.candidates import INVARIANTS, TURNS, _builder
    from examples.negotiation.runs import RECORDING
    from examples.negotiation.talks import EU, UK

    builder = _builder({EU.code: EU, UK.code: UK})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verdict = regress(RECORDING, builder, TURNS, INVARIANTS, policy="pinned")
        assert (verdict.on_miss, verdict.passed, verdict.policy) == ("strict", True, "pinned")
    assert verdict.to_json()["policy"] == "pinned"  # the gate's key, beside on_miss
    with pytest.raises(UsageError, match="policy must be 'pinned' or 'live'"):
        regress(RECORDING, builder, TURNS, INVARIANTS, policy="strict")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="on_miss must be 'strict' or 'record'"):
        regress(RECORDING, builder, TURNS, INVARIANTS, on_miss="pinned")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not both"):
        regress(RECORDING, builder, TURNS, INVARIANTS, on_miss="record", policy="live")


def test_the_commands_old_options_work_and_say_they_are_deprecated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from anagrapheus.cli import main
    from examples.negotiation.runs import RECORDING

    candidate = "examples.negotiation.candidates:control"
    # The replay gate's `--policy` (a reference page's spelling of --on-miss) works without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["regress", candidate, "--recording", str(RECORDING), "--policy", "pinned", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "deprecated" not in err and '"on_miss": "strict"' in out
    assert main(["regress", candidate, "--recording", str(RECORDING), "--policy", "live", "--on-miss", "record"]) == 2
    assert "give --on-miss or --policy, not both" in capsys.readouterr().err

    # A candidate taking the gate's `policy=` is called with it, without a warning.
    (tmp_path / "old_candidate.py").write_text(
        "from examples.negotiation.candidates import control\n\n"
        "def candidate(recording, *, policy='pinned'):\n"
        "    assert policy == 'pinned'\n"
        "    return control(recording)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["regress", "old_candidate:candidate", "--recording", str(RECORDING)]) == 0
    assert "deprecated" not in capsys.readouterr().err

    with pytest.warns(DeprecationWarning, match="--redact-policy is deprecated"):
        code = main(["export", str(tmp_path / "none.db"), "--unit", "u", "--redact-policy", "x:y"])
    assert code == 2 and "use --redact-scanner" in capsys.readouterr().err


# Modules moved into the timeline's rooms (resolving/, recording/, stores/) keep their old paths for one release.

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("old", "new"), sorted(__import__("anagrapheus.timeline.moved").timeline.moved.MOVED.items()))
def test_a_moved_module_imports_by_its_old_path_as_the_new_module_warning_once(old: str, new: str) -> None:
    import sys

    assert not (ROOT / (old.replace(".", "/") + ".py")).exists()  # no file left behind: git sees a rename
    fresh = old not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        assert importlib.import_module(old) is module
    assert module is importlib.import_module(new)
    assert module.__name__ == module.__spec__.name == new
    if fresh:
        # A ResourceWarning the garbage collector raises meanwhile (another test's event loop) is not the import's.
        assert [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)] == [
            f"the module {old} is deprecated and goes in the next release: import {new}"
        ]


def test_the_moved_modules_finder_serves_only_paths_no_file_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from anagrapheus.deprecation import MovedModules, moved_modules

    package = tmp_path / "moved_rooms"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "home.py").write_text("class Thing:\n    pass\n")
    (package / "still_here.py").write_text("WHERE = 'old file'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("moved_rooms", "moved_rooms.home", "moved_rooms.room", "moved_rooms.room.home"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    table = {"moved_rooms.home": "moved_rooms.room.home", "moved_rooms.still_here": "moved_rooms.room.home"}
    finder = moved_modules(table)
    assert isinstance(finder, MovedModules) and sys.meta_path[-1] is finder
    assert moved_modules(dict(table)) is finder and moved_modules({}) is None  # installed once

    with pytest.warns(
        DeprecationWarning, match=r"^the module moved_rooms\.home is deprecated.*moved_rooms\.room\.home$"
    ) as caught:
        from moved_rooms import home  # type: ignore[import-not-found]
    assert caught[0].filename == __file__  # the importing line, past the import system's frames
    from moved_rooms.room import home as new  # type: ignore[import-not-found]

    assert home is new and home.Thing.__module__ == home.__spec__.name == "moved_rooms.room.home"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import moved_rooms.home  # type: ignore[import-not-found]  # cached: no second warning

        # A module still at its old path (a tree not moved yet) is that file, without a warning.
        import moved_rooms.still_here  # type: ignore[import-not-found]
    assert moved_rooms.still_here.WHERE == "old file"
    for name in (
        "moved_rooms",
        "moved_rooms.home",
        "moved_rooms.room",
        "moved_rooms.room.home",
        "moved_rooms.still_here",
    ):
        sys.modules.pop(name, None)
