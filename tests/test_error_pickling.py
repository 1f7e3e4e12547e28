"""Every error of the package crosses a process boundary: pickled and unpickled with its message and attributes."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import pytest

import anagrapheus
from anagrapheus.cli.report import BadInput
from anagrapheus.errors import (
    AmbiguousPin,
    AnagrapheusError,
    CallerKeyMissing,
    CanonicalError,
    CorruptEvent,
    EventTypeError,
    FutureSchemaVersion,
    HiddenCallerField,
    InexactReplay,
    ManifestError,
    PartialPin,
    PinMiss,
    PinnedFailure,
    PinResultError,
    ProvenanceMismatch,
    RecordingConflict,
    RecordingDrifted,
    RecordingError,
    RecordingExpired,
    RecordingMissing,
    RemoteConnectionRefused,
    ResolverNotPicklable,
    SchemaTooNew,
    SealBroken,
    SecretInRecording,
    SeqConflict,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    UndeclaredType,
    UnitBusy,
    UnitClosed,
    UnkeyedCaller,
    UnknownEventType,
    UnresolvedName,
    UnusedPins,
    UpcastGap,
    UsageError,
    _OfEventType,  # pyright: ignore[reportPrivateUsage]  # the base of the errors about one event type
)
from anagrapheus.provider.in_workflow import PinningInWorkflow
from anagrapheus.provider.keying.caller import HiddenField
from anagrapheus.timeline.divergence import Divergence, MovedValue
from anagrapheus.timeline.recording.index import IndexMismatch

# One instance of every error class, built as the package builds it (keyword arguments and all).
SAMPLES: list[AnagrapheusError] = [
    AnagrapheusError("root"),
    UsageError("misuse"),
    CallerKeyMissing("ANAGRAPHEUS_CALLER_KEY"),
    UnresolvedName("app:agnet", "app has no agnet"),
    ManifestError("unknown key", path="pyproject.toml", key="clock.speed"),
    StoreUnavailable("the server did not answer within 30 s"),
    RecordingConflict("rec.jsonl", first="a", second="b"),
    RecordingExpired("rec.jsonl", max_age=timedelta(days=30), units={"unit-1": "2026-01-05 (60 days ago)"}),
    RecordingDrifted("rec.jsonl", calls=["model_call #2: drifted: result.parts[0].content: 'a' != 'b'"]),
    InexactReplay("a fallback's failed attempts", instead="pin the whole agent with Pinning"),
    UnkeyedCaller("balance", deps_type="Bank", reason="$.lock: Lock has no JSON form"),
    HiddenCallerField("balance", deps_type="Bank", field="$.lock", how="a private attribute", reason="no JSON form"),
    UnitClosed("unit-1", state="committed", raw='{"a":1}'),
    CanonicalError("a float nan", path="$.a[0]"),
    HiddenField("Lock has no JSON form", path="$.lock", how="a private attribute (PrivateAttr)"),
    EventTypeError("registered twice"),
    _OfEventType("about ns:t", "ns", "t"),
    UnknownEventType("ns", "t", seq=3),
    FutureSchemaVersion("ns", "t", version=3, known=2, seq=None),
    UpcastGap("ns", "t", missing_from=1, target=3),
    StoreError("disk full"),
    StoreIntegrityError("duplicate key value violates unique constraint"),
    SeqConflict(expected=1, actual=2),
    UnitBusy("unit-1", waited=2.0),
    SchemaTooNew("newer"),
    CorruptEvent("bad json", seq=7),
    UndeclaredType("__main__:Audit", source="the signature of tool 'survey'", key="p1:tool_call:ab"),
    PinResultError("not JSON"),
    PartialPin("k", state="stopped"),
    PinnedFailure({"type": "x:Y", "message": "m"}, type_name="x:Y", message="m"),
    PinMiss(
        Divergence(
            key="k",
            kind="model_call",
            after_hits=2,
            moved=("+a",),
            nearest_key="n",
            values=(MovedValue("a", "1", "2"),),
        )
    ),
    AmbiguousPin("k", unit_ids=["unit-1", "unit-2"]),
    RecordingError("truncated", path="rec.jsonl", line=4),
    SealBroken("edited by hand", path="rec.jsonl", line=5, unit="u1", change="edited"),
    ResolverNotPicklable("ReplayPins"),
    ProvenanceMismatch("scheme differs", path="rec.jsonl", field="key_scheme", recorded="p1", current="p2"),
    SecretInRecording(path="rec.jsonl", seq=2, json_path="$.payload", rule="bearer"),
    RecordingMissing("rec.jsonl", command="pytest --record"),
    UnusedPins("rec.jsonl", unused={"k": "model_call"}),
    RemoteConnectionRefused(("example.com", 443)),
    BadInput("not a recording", path="x.jsonl", line=None, seq=4),
    PinningInWorkflow("wrap_run"),
    IndexMismatch("line 7 is not the line the index promised"),
]


def _every_error_class() -> set[type[AnagrapheusError]]:
    # Import every module, so a class defined anywhere in the package is a known subclass.
    for module in pkgutil.walk_packages(anagrapheus.__path__, "anagrapheus."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: set[type[AnagrapheusError]] = set()
    todo: list[type[AnagrapheusError]] = [AnagrapheusError]
    while todo:
        cls = todo.pop()
        if cls.__module__.split(".")[0] == "anagrapheus" and cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_of_the_package_has_a_sample_here() -> None:
    missing = {f"{cls.__module__}.{cls.__qualname__}" for cls in _every_error_class()} - {
        f"{type(e).__module__}.{type(e).__qualname__}" for e in SAMPLES
    }
    assert not missing, f"add a sample of each to SAMPLES: {sorted(missing)}"


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_round_trips_through_pickle_with_its_message_and_attributes(error: AnagrapheusError) -> None:
    error.add_note("a note added on the way up")
    error.drawn = '{"kept":true}'  # pyright: ignore[reportAttributeAccessIssue]  # any attribute set later
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert back.__dict__ == error.__dict__


def _raise_unit_busy(unit_id: str) -> None:
    raise UnitBusy(unit_id, waited=0.5)


def test_an_error_raised_in_a_process_pool_worker_reaches_the_caller_as_itself() -> None:
    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_raise_unit_busy, "unit-7")
        with pytest.raises(UnitBusy) as raised:
            future.result(timeout=60)
    assert raised.value.unit_id == "unit-7"
    assert raised.value.waited == 0.5
    assert "unit unit-7 is held by another worker" in str(raised.value)
