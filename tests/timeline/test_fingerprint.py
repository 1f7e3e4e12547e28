"""Fingerprints: which fields they name, how their size is bounded, and what a kept value holds."""

from __future__ import annotations

import pytest

from anagrapheus.timeline.canonical import canonical_value
from anagrapheus.timeline.divergence import ELLIPSIS
from anagrapheus.timeline.fingerprint import (
    FINGERPRINT_LIMIT,
    VALUE_CHARS,
    DeferredFingerprint,
    bounded_fingerprint,
    digest_text,
    fingerprint_of,
    value_entries,
)
from anagrapheus.timeline.secrets import SecretScanner

TOKEN = "gh" + "p_" + "Zq8" * 12


def test_fields_are_named_down_to_two_levels_of_objects_and_lists() -> None:
    material = {"model": "m", "settings": {"temperature": 0.1, "extra": {"a": 1}}, "messages": [[1, 2], {"r": "u"}]}

    assert set(fingerprint_of(material)) == {
        "model",
        "settings.temperature",
        "settings.extra",
        "messages[0]",
        "messages[1]",
    }
    assert set(fingerprint_of([{"a": 1, "b": 2}, 3])) == {"[0].a", "[0].b", "[1]"}
    assert set(fingerprint_of(material, depth=1)) == {"model", "settings", "messages"}


def test_a_field_is_the_digest_of_its_canonical_text_and_a_bare_value_is_named_dollar() -> None:
    assert fingerprint_of(5) == {"$": digest_text("5")}
    assert fingerprint_of({"a": {"b": [1.0, "x"]}}, depth=1) == {"a": digest_text('{"b":[1,"x"]}')}
    assert fingerprint_of({}) == {"$": digest_text("{}")}


def fields(count: int) -> dict[str, str]:
    return {f"f{i:04}": f"d{i}" for i in range(count)}


def test_a_fingerprint_at_the_limit_keeps_every_field() -> None:
    at_limit = fields(FINGERPRINT_LIMIT)

    assert bounded_fingerprint(at_limit) == at_limit


def test_past_the_limit_the_last_fields_fold_into_one_entry_that_still_moves() -> None:
    over = fields(FINGERPRINT_LIMIT + 2)
    names = list(over)

    bounded = bounded_fingerprint(over)

    assert list(bounded) == [*names[: FINGERPRINT_LIMIT - 1], "..."]
    assert {name: bounded[name] for name in names[: FINGERPRINT_LIMIT - 1]} == {
        name: over[name] for name in names[: FINGERPRINT_LIMIT - 1]
    }
    for folded in names[FINGERPRINT_LIMIT - 1 :]:
        changed = bounded_fingerprint({**over, folded: "changed"})
        assert changed["..."] != bounded["..."] and {**changed, "...": ""} == {**bounded, "...": ""}
    last_kept = names[FINGERPRINT_LIMIT - 2]
    changed = bounded_fingerprint({**over, last_kept: "changed"})
    assert changed["..."] == bounded["..."] and changed[last_kept] == "changed"


@pytest.mark.parametrize(("length", "cut"), [(VALUE_CHARS, False), (VALUE_CHARS + 1, True)])
def test_a_kept_value_is_cut_past_its_limit_only(length: int, cut: bool) -> None:
    text = "x" * length

    [(name, kept)] = value_entries([("f", text)]).items()

    assert name == "=f"
    assert kept == (text[:VALUE_CHARS] + ELLIPSIS if cut else text)


def test_a_kept_value_is_redacted_by_the_scanner_given() -> None:
    text = f'"use {TOKEN}"'

    assert TOKEN not in value_entries([("f", text)])["=f"]
    assert value_entries([("f", text)], scanner=SecretScanner((), environ={}))["=f"] == text


def test_a_deferred_fingerprint_is_the_fingerprint_of_its_material() -> None:
    material = canonical_value({"model": "m", "messages": ["hello", {"a": 1}], "settings": {"t": 0.5}})

    for values in (False, True):
        deferred = DeferredFingerprint(material, values=values)
        expected = fingerprint_of(material, values=values)
        assert dict(deferred) == expected and len(deferred) == len(expected)
        assert repr(deferred) == repr(expected)
