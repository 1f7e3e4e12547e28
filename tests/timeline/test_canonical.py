"""Canonical JSON and pin keys: one spelling per value, refusals that say where."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anagrapheus.errors import CanonicalError, UsageError
from anagrapheus.provider.keying.keys import walked
from anagrapheus.timeline import canonical_json, pin_key
from anagrapheus.timeline.canonical import (
    asking_key,
    canonical_float,
    canonical_integer,
    canonical_string,
    canonical_value,
    digest_key,
    sha256_empty,
    sha256_hex,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=25,
)


def shuffled(value: Any, seed: int) -> Any:
    """The same value with every dict's insertion order changed."""
    if isinstance(value, dict):
        items = list(value.items())
        items = items[seed % max(len(items), 1) :] + items[: seed % max(len(items), 1)]
        return {k: shuffled(v, seed + 1) for k, v in reversed(items)}
    if isinstance(value, list):
        return [shuffled(v, seed) for v in value]
    return value


@given(json_values)
def test_round_trip_is_stable(value: Any) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text


@given(json_values, st.integers(min_value=0, max_value=10))
def test_dict_order_never_changes_the_key(value: Any, seed: int) -> None:
    assert pin_key("model_call", shuffled(value, seed)) == pin_key("model_call", value)


@given(json_values, json_values)
def test_values_share_a_key_exactly_when_they_share_a_canonical_text(a: Any, b: Any) -> None:
    # Both ways, on every example: different texts get different keys, and equal texts the same key.
    assert (pin_key("k", a) == pin_key("k", b)) == (canonical_json(a) == canonical_json(b))
    assert pin_key("k", a) == pin_key("k", json.loads(canonical_json(a)))


def test_shape_of_the_text_and_key() -> None:
    assert canonical_json({"b": [1, 2.5, None, True], "a": "é"}) == '{"a":"é","b":[1,2.5,null,true]}'
    key = pin_key("model_call", {"a": 1})
    assert key.startswith("p1:model_call:") and len(key.split(":")[2]) == 64


def test_strings_are_nfc_normalised() -> None:
    decomposed = unicodedata.normalize("NFD", "café")
    assert decomposed != "café"
    assert canonical_json({decomposed: decomposed}) == canonical_json({"café": "café"})


def test_numbers_have_one_spelling() -> None:
    assert canonical_json([1.0, -0.0, 2**60, 0.1]) == f"[1,0,{2**60},0.1]"
    assert pin_key("k", {"temperature": 1}) == pin_key("k", {"temperature": 1.0})


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1, math.nan]}, "$.a[1]"),
        ({"a": math.inf}, "$.a"),
        ({"b": b"bytes"}, "$.b"),
        ({"s": {1, 2}}, "$.s"),
        ([object()], "$[0]"),
        ({1: "int key"}, "$"),
        ({"text": ["ok", "bad \ud800"]}, "$.text[1]"),
    ],
)
def test_non_json_values_are_refused_with_their_place(value: Any, path: str) -> None:
    with pytest.raises(CanonicalError) as caught:
        canonical_json(value)
    assert caught.value.path == path
    assert path in str(caught.value)


def test_keys_equal_after_normalisation_are_refused() -> None:
    with pytest.raises(CanonicalError, match="NFC"):
        canonical_json({"café": 1, unicodedata.normalize("NFD", "café"): 2})


def test_self_containing_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CanonicalError):
        canonical_json(loop)


def test_bad_kind_is_refused() -> None:
    with pytest.raises(UsageError):
        pin_key("Model Call:", {})


# Text as a file may hold it: non-NFC strings, combining marks, lone surrogates (as escapes), any float spelling.
file_texts = st.text(st.characters(codec=None)) | st.sampled_from(["e\u0301", "\u0301a", "\ufb01", "\ud800", "A\u030a"])
file_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | file_texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(file_texts, children, max_size=4),
    max_leaves=25,
)


@given(file_values)
def test_the_fast_writer_of_parsed_json_is_canonical_json(value: Any) -> None:
    from anagrapheus.timeline.canonical import canonical_json_of_parsed, canonical_number

    try:
        text = json.dumps(value)  # the file's spelling: ASCII escapes, floats as Python writes them
    except ValueError:
        return
    parsed = json.loads(text, parse_float=canonical_number)
    try:
        expected = canonical_json(json.loads(text))
    except CanonicalError as refused:
        with pytest.raises(CanonicalError) as caught:
            canonical_json_of_parsed(parsed)
        assert caught.value.path == refused.path
        return
    assert canonical_json_of_parsed(parsed) == expected


def test_the_fast_writer_refuses_a_value_nested_too_deeply_as_canonical_json_does() -> None:
    from anagrapheus.timeline.canonical import canonical_json_of_parsed

    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(CanonicalError, match="nested too deeply"):
        canonical_json_of_parsed(deep)


def test_a_self_containing_value_is_refused_at_the_root_saying_why() -> None:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    with pytest.raises(CanonicalError) as caught:
        canonical_json(loop)
    assert (caught.value.reason, caught.value.path) == ("value is nested too deeply (or contains itself)", "$")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"t": math.nan}, "nan is not a JSON number"),
        ({"t": -math.inf}, "-inf is not a JSON number"),
        ({3: "x"}, "object key 3 is not a string"),
        ({"café": 1, unicodedata.normalize("NFD", "café"): 2}, "two object keys are equal once NFC-normalised"),
        (["é\ud800"], "string holds a lone surrogate, which UTF-8 cannot encode"),
        ([b"x"], "bytes is not a JSON type (convert it deliberately before pinning)"),
        ([10**5000], "an integer of 16610 bits is too long to write as JSON"),
    ],
    ids=["nan", "-inf", "int key", "NFC twins", "surrogate", "bytes", "long int"],
)
def test_each_refusal_says_what_is_wrong(value: Any, reason: str) -> None:
    with pytest.raises(CanonicalError) as caught:
        canonical_json(value)
    assert caught.value.reason == reason


def test_an_integer_near_the_digit_limit_is_written_exactly() -> None:
    # Long enough to be checked against Python's 4,300-digit limit, short enough to pass it.
    number = 2**14_100
    assert canonical_json([number]) == f"[{number}]"


def test_integral_floats_are_integers_only_below_two_to_the_53() -> None:
    # Past 2**53 a float no longer stands for one integer, so it keeps its float spelling.
    below, at = 2.0**53 - 1, 2.0**53
    assert canonical_json([below, at, -at]) == "[9007199254740991,9007199254740992.0,-9007199254740992.0]"


def test_subclasses_of_json_types_are_written_as_their_base_value() -> None:
    class Colour(enum.StrEnum):
        RED = "red"

    class Size(enum.IntEnum):
        LARGE = 3

    class Grams(float):
        pass

    value = {"colour": Colour.RED, "size": Size.LARGE, "weight": Grams(2.5), "whole": Grams(4.0)}
    assert canonical_json(value) == '{"colour":"red","size":3,"weight":2.5,"whole":4}'
    assert canonical_json(value) == canonical_json({"colour": "red", "size": 3, "weight": 2.5, "whole": 4})


def test_a_bad_kind_is_named_in_the_refusal() -> None:
    with pytest.raises(UsageError, match=r"pin kind 'Model Call:' must be lowercase"):
        pin_key("Model Call:", {})
    with pytest.raises(UsageError, match=r"pin kind 'Model Call:' must be lowercase"):
        digest_key("Model Call:", "00")


def test_a_key_from_a_digest_is_the_key_pin_key_writes() -> None:
    material = {"b": [1, 2.5], "a": "café"}
    digest = hashlib.sha256(canonical_json(material).encode()).hexdigest()
    assert digest_key("model_call", digest) == pin_key("model_call", material) == f"p1:model_call:{digest}"


class Mode(str, enum.Enum):  # noqa: UP042 (a str mixin, deliberately not a StrEnum)
    """A str-mixin enum: its str() is `Mode.FAST`, while the characters it holds are its value."""

    FAST = "fast"


class Masked(str):
    """A str subclass whose str() hides what it holds, as a secret wrapper may."""

    def __str__(self) -> str:
        return "***"


def test_a_string_subclass_is_written_as_the_characters_it_holds_on_every_path() -> None:
    # As every JSON encoder and the walk of key material write it: its own str() could make two values one.
    for value, held in ((Mode.FAST, "fast"), (Masked("swordfish"), "swordfish"), (Masked("café"), "café")):
        for written in (canonical_string(value), canonical_value(value), canonical_value([value])[0]):  # type: ignore[index]
            assert type(written) is str and written == held
    assert canonical_json(Masked("a")) != canonical_json(Masked("b"))


def test_canonical_string_normalises_and_refuses_as_canonical_json_does() -> None:
    plain = "already canonical"
    assert canonical_string(plain) is plain
    assert canonical_string(unicodedata.normalize("NFD", "café")) == "café"
    with pytest.raises(CanonicalError) as caught:
        canonical_string("bad \ud800")
    assert (caught.value.reason, caught.value.path) == ("string holds a lone surrogate, which UTF-8 cannot encode", "$")


def test_canonical_integer_is_a_plain_int_and_refuses_one_too_long() -> None:
    class Size(enum.IntEnum):
        LARGE = 3

    assert type(canonical_integer(Size.LARGE)) is int and canonical_integer(Size.LARGE) == 3
    assert canonical_integer(2**14_100) == 2**14_100
    with pytest.raises(CanonicalError) as caught:
        canonical_integer(10**5000)
    assert (caught.value.reason, caught.value.path) == ("an integer of 16610 bits is too long to write as JSON", "$")


def test_canonical_float_spells_integral_floats_as_integers_and_refuses_non_finite_ones() -> None:
    class Grams(float):
        pass

    assert type(canonical_float(Grams(2.5))) is float and canonical_float(Grams(2.5)) == 2.5
    assert type(canonical_float(4.0)) is int and canonical_float(4.0) == 4
    for bad, reason in ((math.nan, "nan is not a JSON number"), (-math.inf, "-inf is not a JSON number")):
        with pytest.raises(CanonicalError) as caught:
            canonical_float(bad)
        assert (caught.value.reason, caught.value.path) == (reason, "$")


def test_a_normalised_pin_key_writes_the_value_as_given_without_walking_it() -> None:
    value = {"b": [1.0, "é"], "a": 2}
    assert pin_key("k", canonical_value(value), normalised=True) == pin_key("k", value)
    # Trusted, not checked: that is the walk the option saves. A value that is not canonical keys as written.
    assert pin_key("k", {"a": 1.0}, normalised=True) != pin_key("k", {"a": 1})


# What `canonical_value` accepts, spelled every way it accepts it: the walk `pin_key` reads material with must key
# each exactly as before the package root handed it down.
accepted_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**63 + 2)
    | st.sampled_from([2**14_100, -(2**14_100), 2.0**53, -0.0, 1e300])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["e\u0301", "A\u030a", "\ufb01", Mode.FAST, Masked("swordfish")])
)
accepted_values = st.recursive(
    accepted_leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text() | st.sampled_from(["e\u0301", "\u00e9"]), children, max_size=4)
    ),
    max_leaves=25,
)


@given(accepted_values)
def test_pin_key_keys_what_canonical_value_accepts_as_its_canonical_json(value: Any) -> None:
    try:
        text = canonical_json(value)
    except CanonicalError:
        return  # two keys equal once NFC-normalised: refused by both (below)
    assert pin_key("k", value) == f"p1:k:{hashlib.sha256(text.encode()).hexdigest()}"


def test_pin_key_refuses_keys_equal_once_normalised_as_canonical_json_does() -> None:
    with pytest.raises(CanonicalError, match="equal once") as caught:
        pin_key("k", {"x": {"café": 1, unicodedata.normalize("NFD", "café"): 2}})
    assert caught.value.path == "$.x"


def test_pin_key_keys_a_set_as_its_sorted_members() -> None:
    # Under the walk every key of a call uses (the provider's, handed to it); the timeline's own takes JSON only.
    assert pin_key("t", {"tags": {"b", "a"}}, walk=walked) == pin_key("t", {"tags": ["a", "b"]})
    assert pin_key("t", {"tags": frozenset({2, 10, 1})}, walk=walked) == pin_key("t", {"tags": [1, 10, 2]})
    with pytest.raises(CanonicalError, match="set is not a JSON type"):
        pin_key("t", {"tags": {"b", "a"}})
    with pytest.raises(CanonicalError):
        canonical_json({"tags": {"a", "b"}})  # the log's JSON stays strict


def test_pin_key_converts_enums_bytes_and_number_keys_deliberately() -> None:
    class Colour(enum.Enum):
        RED = "red"

    digest = hashlib.sha256(b"\x00\xff").hexdigest()
    assert pin_key("t", {"c": Colour.RED}, walk=walked) == pin_key("t", {"c": "red"})
    assert pin_key("t", {"b": b"\x00\xff"}, walk=walked) == pin_key("t", {"b": {"$bytes_sha256": digest}})
    assert pin_key("t", {"b": bytearray(b"\x00\xff")}, walk=walked) == pin_key("t", {"b": b"\x00\xff"}, walk=walked)
    assert pin_key("t", {1: "one", 2.5: "more"}, walk=walked) == pin_key("t", {"1": "one", "2.5": "more"})


def test_pin_key_refuses_what_has_no_json_form_naming_its_path() -> None:
    class Opaque:
        pass

    with pytest.raises(CanonicalError, match="Opaque has no JSON form") as caught:
        pin_key("t", {"args": {"x": [1, Opaque()]}}, walk=walked)
    assert caught.value.path == "$.args.x[1]"
    assert "$.args.x[1]" in str(caught.value)
    with pytest.raises(CanonicalError, match="not a JSON number") as number:
        pin_key("t", {"args": {"x": math.nan}})
    assert number.value.path == "$.args.x"


def test_pin_key_walks_with_the_walk_given_and_a_normalised_one_with_none() -> None:
    seen: list[object] = []

    def walk(material: object) -> Any:
        seen.append(material)
        return {"walked": True}

    assert pin_key("k", {"a": 1}, walk=walk) == pin_key("k", {"walked": True}, normalised=True)
    assert seen == [{"a": 1}]
    pin_key("k", {"b": 2}, walk=walk, normalised=True)
    assert seen == [{"a": 1}]
    # Without one, the timeline's own: JSON values, written as `canonical_json` writes them.
    assert pin_key("k", {"a": 1}) != pin_key("k", {"walked": True})
    assert pin_key("k", {"a": [1.0, "e\u0301"]}) == pin_key(
        "k", canonical_value({"a": [1.0, "e\u0301"]}), normalised=True
    )


# The stored form (#45): what the log writes of an answer. Canonical in every way but NFC, which belongs to keys.


@given(file_values)
def test_the_stored_form_is_canonical_json_less_nfc_and_keeps_every_code_point(value: Any) -> None:
    from anagrapheus.timeline.canonical import canonical_number, stored_json, stored_json_of_parsed, stored_value

    try:
        text = json.dumps(value)
    except ValueError:
        return
    parsed = json.loads(text, parse_float=canonical_number)
    try:
        stored = stored_json(json.loads(text))
    except CanonicalError as refused:
        for writer in (stored_json_of_parsed, stored_value):
            with pytest.raises(CanonicalError) as caught:
                writer(parsed)
            assert (caught.value.reason, caught.value.path) == (refused.reason, refused.path)
        return
    assert (
        stored_json_of_parsed(parsed)
        == stored
        == json.dumps(stored_value(json.loads(text)), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    )
    back = json.loads(stored)
    assert json.dumps(back, sort_keys=True) == json.dumps(
        json.loads(text, parse_float=canonical_number), sort_keys=True
    )
    try:
        keyed = canonical_json(back)
    except CanonicalError:
        return  # keys equal once NFC: refused as key material, stored as they are
    assert keyed == canonical_json(json.loads(text))
    assert (stored == keyed) == unicodedata.is_normalized("NFC", stored)


@pytest.mark.parametrize(
    "value",
    [
        {"\uf900": None},
        {"caf\u00e9": 1, "cafe\u0301": 2},
        ["\u212a", "A\u030a", Mode.FAST, Masked("swordfish")],
        {"n": [1.0, -0.0, 2.5], "s": "\ufb01"},
    ],
    ids=["compatibility ideograph", "NFC twins", "look-alikes and str kinds", "numbers"],
)
def test_a_stored_value_keeps_its_text_where_its_key_is_nfc(value: Any) -> None:
    from anagrapheus.timeline.canonical import stored_json, stored_json_of_parsed, stored_value

    text = stored_json(value)
    assert stored_json_of_parsed(json.loads(text)) == text
    assert stored_value(value) == json.loads(text)
    texts = [leaf for leaf in json.loads(text) if isinstance(leaf, str)] if isinstance(value, list) else []
    if isinstance(value, dict):
        assert list(json.loads(text)) == sorted(str.__str__(k) for k in value)  # keys as they were, sorted
    else:
        assert texts == ["\u212a", "A\u030a", "fast", "swordfish"]
    if "n" in value:
        assert text == '{"n":[1,0,2.5],"s":"\ufb01"}'  # one spelling per number, as canonical JSON


@pytest.mark.parametrize(
    ("value", "reason", "path", "parsed"),
    [
        ({"t": [math.nan]}, "nan is not a JSON number", "$.t[0]", True),
        ({3: "x"}, "object key 3 is not a string", "$", False),
        ({"a": "\ud800"}, "string holds a lone surrogate, which UTF-8 cannot encode", "$.a", True),
        ({"\ud800": 1}, "string holds a lone surrogate, which UTF-8 cannot encode", "$.\ud800", True),
        ([b"x"], "bytes is not a JSON type (convert it deliberately before pinning)", "$[0]", False),
        ([10**5000], "an integer of 16610 bits is too long to write as JSON", "$[0]", True),
    ],
    ids=["nan", "int key", "surrogate", "surrogate key", "bytes", "long int"],
)
def test_the_stored_form_refuses_what_canonical_json_refuses_saying_where(
    value: Any, reason: str, path: str, parsed: bool
) -> None:
    from anagrapheus.timeline.canonical import stored_json, stored_json_of_parsed

    # What JSON text can hold reaches the fast writer too; a number key or bytes only the walk.
    for writer in (stored_json, stored_json_of_parsed) if parsed else (stored_json,):
        with pytest.raises(CanonicalError) as caught:
            writer(value)
        assert (caught.value.reason, caught.value.path) == (reason, path)


def test_the_stored_form_refuses_a_value_nested_too_deeply() -> None:
    from anagrapheus.timeline.canonical import stored_json, stored_json_of_parsed

    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    for writer in (stored_json, stored_json_of_parsed):
        with pytest.raises(CanonicalError, match="nested too deeply") as caught:
            writer(deep)
        assert caught.value.path == "$"


@given(st.lists(st.text(), max_size=4))
def test_sha256_hex_is_hashlibs_digest_and_its_template_stays_empty(texts: list[str]) -> None:
    # Each digest is copied from one empty hash object: it must never carry one text's bytes into the next.
    for text in texts:
        assert sha256_hex(text) == hashlib.sha256(text.encode()).hexdigest()
        grown = sha256_empty()
        grown.update(text.encode())
        assert grown.hexdigest() == hashlib.sha256(text.encode()).hexdigest()
    assert sha256_hex("") == hashlib.sha256(b"").hexdigest()


_PLACES = st.integers() | st.booleans() | st.text(max_size=8)


@given(
    kind=st.sampled_from(["model_call", "tool_call", "run.place"]),
    asked=st.text(max_size=40) | st.from_regex(r"p1:[a-z_]+:[0-9a-f]{64}", fullmatch=True),
    twin=st.integers(min_value=0, max_value=3) | st.booleans(),
    run=_PLACES,
    occurrence=st.integers(min_value=-2, max_value=5),
)
def test_an_asking_key_is_the_chain_of_pin_keys_its_rules_name(
    kind: str, asked: str, twin: int, run: int | str, occurrence: int
) -> None:
    # Each re-keying's text is written directly where it can be: byte for byte what `pin_key` writes of the same dict.
    expected = asked
    if twin != 0:
        expected = pin_key(kind, {"twin_of": expected, "twin": twin}, normalised=True)
    if run != 0:
        expected = pin_key(kind, {"run_of": expected, "run": run}, normalised=True)
    if occurrence != 1:
        expected = pin_key(kind, {"occurrence_of": expected, "occurrence": occurrence}, normalised=True)
    assert asking_key(kind, asked, twin=twin, run=run, occurrence=occurrence) == expected
