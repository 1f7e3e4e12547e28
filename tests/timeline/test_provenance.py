"""Provenance: a call policy's identity, the stamp of this process, and each refusal's typed attributes."""

from __future__ import annotations

import warnings

import pytest

from anagrapheus.errors import ProvenanceMismatch
from anagrapheus.provider.provenance import current_provenance
from anagrapheus.timeline import provenance as provenance_module
from anagrapheus.timeline.canonical import KEY_SCHEME
from anagrapheus.timeline.provenance import (
    Provenance,
    ProvenanceWarning,
    call_policy_identity,
    check_provenance,
)


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
    (warning,) = caught
    assert str(warning.message) == f"run.jsonl: {message}"
    # It points past the library, at whoever loaded the recording.
    assert warning.filename != provenance_module.__file__
