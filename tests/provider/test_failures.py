"""The failure codec of pydantic-ai runs, record by record, and the keys of the draws that retry a failed call."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic_ai import ModelRetry

from anagrapheus.errors import PinnedFailure, UsageError
from anagrapheus.provider.failures import FAILURES, DrawSequence
from anagrapheus.timeline.canonical import JSONValue


def stored(record: JSONValue | None) -> JSONValue:
    """`record` as a store gives it back: through JSON text."""
    return json.loads(json.dumps(record))


class SurveyLost(Exception):
    """An application's own exception class: replay cannot know how to rebuild it."""


def test_a_builtin_exception_comes_back_with_its_notes() -> None:
    error = ValueError("no quota for cod")
    error.add_note("asked for the North Sea")
    rebuilt = FAILURES.rebuild(stored(FAILURES.describe(error)))
    assert type(rebuilt) is ValueError
    assert (str(rebuilt), rebuilt.__notes__) == ("no quota for cod", ["asked for the North Sea"])


def test_a_pinned_failure_pinned_again_keeps_the_description_it_was_rebuilt_from() -> None:
    record = stored(FAILURES.describe(SurveyLost("no survey for Paris")))
    replayed = FAILURES.rebuild(record)
    assert isinstance(replayed, PinnedFailure)
    assert replayed.record == record
    # A run recorded over a replay pins the failure it saw: the first one, not a description of PinnedFailure.
    assert FAILURES.describe(replayed) == record


@pytest.mark.parametrize("record", ["boom", ["builtins:ValueError"], None, {}])
def test_a_record_without_its_fields_replays_as_a_pinned_failure_of_an_unknown_class(record: JSONValue) -> None:
    replayed = FAILURES.rebuild(record)
    assert isinstance(replayed, PinnedFailure)
    assert (replayed.record, replayed.type_name, replayed.original_message) == (record, "?", "")
    assert str(replayed) == "the pinned draw failed with ?: "


@pytest.mark.parametrize(
    ("type_name", "message"),
    [("builtins:TypeError", "no quota"), ("builtins:ValueError", "no survey")],
    ids=["another-class", "another-message"],
)
def test_a_recipe_that_rebuilds_another_class_or_message_replays_as_a_pinned_failure(
    type_name: str, message: str
) -> None:
    # The recipe makes ValueError("no quota"): a record naming anything else must not be answered with it.
    record: dict[str, Any] = {
        "type": type_name,
        "message": message,
        "rebuild": {"call": "builtins:ValueError", "args": ["no quota"], "state": None},
    }
    replayed = FAILURES.rebuild(record)
    assert isinstance(replayed, PinnedFailure)
    assert (replayed.type_name, replayed.original_message) == (type_name, message)


def test_a_recipe_names_its_class_along_a_dotted_path() -> None:
    # Pickle names a nested class by its dotted qualname; the path is followed attribute by attribute.
    record: dict[str, Any] = {
        "type": "pydantic_ai.exceptions:ModelRetry",
        "message": "ask again",
        "rebuild": {"call": "pydantic_ai:exceptions.ModelRetry", "args": ["ask again"], "state": None},
    }
    rebuilt = FAILURES.rebuild(record)
    assert (type(rebuilt), str(rebuilt)) == (ModelRetry, "ask again")


def test_an_exception_class_without_a_module_is_pinned_under_a_question_mark() -> None:
    # type() sets no __module__ where the calling code's globals hold no __name__.
    made: dict[str, Any] = {}
    exec("Nowhere = type('Nowhere', (Exception,), {})", {}, made)
    nowhere: type[Exception] = made["Nowhere"]
    assert not hasattr(nowhere, "__module__")
    record = FAILURES.describe(nowhere("lost at sea"))
    assert record == {"type": "?:Nowhere", "message": "lost at sea", "rebuild": None}
    replayed = FAILURES.rebuild(stored(record))
    assert isinstance(replayed, PinnedFailure)
    assert replayed.type_name == "?:Nowhere"


def test_a_first_draw_keeps_the_calls_key_and_each_retry_is_keyed_on_the_failures_before_it() -> None:
    # Literal keys: a recording written today keys its retries so, and must replay under later versions.
    draws = DrawSequence()
    assert draws.key("p1:model_call:k", kind="model_call") == "p1:model_call:k"
    draws.note("p1:model_call:k", UsageError("a mistake of the caller, not a drawn failure"))
    assert draws.key("p1:model_call:k", kind="model_call") == "p1:model_call:k"
    draws.note("p1:model_call:k", ConnectionError("dropped"))
    after_one = draws.key("p1:model_call:k", kind="model_call")
    draws.note("p1:model_call:k", ConnectionError("dropped"))
    after_two = draws.key("p1:model_call:k", kind="model_call")
    assert (after_one, after_two) == (
        "p1:model_call:7f3f1e48747553a4c2ab2dbad7a27729e8ee7ae75b5dfe4c2a76709720dfaa11",
        "p1:model_call:c5626a279d522f1da6b1d7ea7ab29b0ba74081da01dc4df93060bedab690c1ea",
    )
    # Counted per call: another call's first draw keeps its key.
    assert draws.key("p1:model_call:other", kind="model_call") == "p1:model_call:other"


@pytest.mark.parametrize("package", ["asyncio", "httpx", "anyio", "pydantic_ai"])
def test_a_recipe_from_a_module_whose_name_only_starts_like_an_allowed_package_is_not_called(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio_mqtt and httpx_sse are real packages: neither is asyncio or httpx, and a recording may not call them.
    lookalike = ModuleType(f"{package}_lookalike")
    called: list[object] = []

    class Lookalike(Exception):
        def __init__(self, *args: object) -> None:
            called.append(args)
            super().__init__(*args)

    Lookalike.__module__ = lookalike.__name__
    Lookalike.__qualname__ = "Lookalike"
    lookalike.Lookalike = Lookalike  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, lookalike.__name__, lookalike)
    record: dict[str, Any] = {
        "type": f"{lookalike.__name__}:Lookalike",
        "message": "run me",
        "rebuild": {"call": f"{lookalike.__name__}:Lookalike", "args": ["run me"], "state": None},
    }
    replayed = FAILURES.rebuild(record)
    assert isinstance(replayed, PinnedFailure)
    assert called == []


@pytest.mark.parametrize("where", ["call", "status_class"])
def test_a_recording_naming_a_module_outside_the_allowed_packages_never_imports_it(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Importing a module runs it: a recording that names one (a pull request's fixture) must not run its code.
    (tmp_path / "planted_by_a_recording.py").write_text("import sys\nsys.planted_ran = True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_by_a_recording", raising=False)
    planted = "planted_by_a_recording:Boom"
    rebuild: dict[str, Any] = {"call": planted, "args": ["boom"], "state": None}
    if where == "status_class":  # the class a categorized HTTP error is rebuilt with, named as its first argument
        rebuild = {"call": "pydantic_ai.exceptions:_categorized_http_error", "args": [planted, 503], "state": None}
    replayed = FAILURES.rebuild({"type": planted, "message": "boom", "rebuild": rebuild})
    assert isinstance(replayed, PinnedFailure)
    assert "planted_by_a_recording" not in sys.modules
    assert not getattr(sys, "planted_ran", False)


def test_a_recording_naming_an_allowed_module_not_yet_imported_imports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # An allowed package's module the process has not imported (and a lazy module's `__getattr__`): the recording
    # neither imports it nor runs its code; the failure comes back as `PinnedFailure` (issue #41).
    asked: list[str] = []

    class Lazy(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            asked.append(name)
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "httpx._lazy_for_a_test", Lazy("httpx._lazy_for_a_test"))
    before = set(sys.modules)
    for planted in ("httpx._not_imported_by_anyone:Boom", "httpx._lazy_for_a_test:Boom"):
        rebuild: dict[str, Any] = {"call": planted, "args": ["boom"], "state": None}
        replayed = FAILURES.rebuild({"type": planted, "message": "boom", "rebuild": rebuild})
        assert isinstance(replayed, PinnedFailure)
    assert set(sys.modules) == before and asked == []
