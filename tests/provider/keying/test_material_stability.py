"""Key material has one canonical form on every path, the same in every process, and refuses what it cannot write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from anagrapheus.errors import CanonicalError, PinResultError
from anagrapheus.provider import SemanticCallPolicy, call_pin
from anagrapheus.provider.tools import tool_pin, tool_result_raw
from anagrapheus.timeline import pin_key

HASH_SEEDS = ("0", "1", "2")

# Sets of strings iterate in an order that changes with PYTHONHASHSEED; frozensets of tuples and dicts with
# number keys ride along.
leaves = st.one_of(st.text(max_size=6), st.integers(-(10**6), 10**6), st.booleans(), st.none())
hashables = st.one_of(st.text(max_size=6), st.integers(-1000, 1000), st.tuples(st.text(max_size=3), st.integers(0, 9)))
values = st.recursive(
    st.one_of(leaves, st.sets(hashables, max_size=8), st.frozensets(hashables, max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.dictionaries(st.integers(-50, 50), inner, max_size=4),
    ),
    max_leaves=12,
)

CHILD = """
import json, sys
from dataclasses import dataclass
from typing import Any
from pydantic import BaseModel
from anagrapheus.provider.tools import tool_pin

class Tags(BaseModel):
    tags: set[str]
    ranks: frozenset[int]

@dataclass
class Found:
    tags: frozenset[str]
    note: bytes = b"kept"

@dataclass
class Holder:
    inner: Any

for line in sys.stdin:
    keys = [tool_pin("lookup", {"value": value}).key for value in eval(line)]
    print(json.dumps(keys), flush=True)
"""


class Tags(BaseModel):
    tags: set[str]
    ranks: frozenset[int]


@dataclass
class Found:
    """A plain dataclass, which pydantic dumps with its sets in the process's hash order."""

    tags: frozenset[str]
    note: bytes = b"kept"


@dataclass
class Holder:
    inner: Any


MODEL_CASE = "Tags(tags={'fish', 'cod', 'quota', 'eu', 'uk'}, ranks=frozenset({3, 11, 19, 27}))"
DATACLASS_CASES = (
    "Found(frozenset({'fish', 'cod', 'quota', 'eu', 'uk', 'north', 'south'}))",
    "Holder([{'found': Found(frozenset({'alpha', 'beta', 'gamma', 'delta', 'epsilon'}))}])",
    "Holder(Tags(tags={'fish', 'cod', 'quota', 'eu', 'uk'}, ranks=frozenset({3, 11, 19, 27})))",
)


@pytest.fixture(scope="module")
def children() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """One process per hash seed, started once, keying whatever lists of values it is sent."""
    started = {
        seed: subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in HASH_SEEDS
    }
    yield started
    for child in started.values():
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def keys_in_child(child: subprocess.Popen[str], cases_repr: str) -> list[str]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(cases_repr + "\n")
    child.stdin.flush()
    return json.loads(child.stdout.readline())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(values, min_size=1, max_size=10))
def test_tool_keys_are_the_same_under_every_hash_seed(
    children: dict[str, subprocess.Popen[str]], cases: list[Any]
) -> None:
    cases_repr = "[" + ", ".join([repr(case) for case in cases] + [MODEL_CASE, *DATACLASS_CASES]) + "]"
    expected = [tool_pin("lookup", {"value": value}).key for value in eval(cases_repr)]
    for seed, child in children.items():
        assert keys_in_child(child, cases_repr) == expected, f"PYTHONHASHSEED={seed}"


def test_a_set_keys_like_its_sorted_members() -> None:
    assert tool_pin("t", {"x": {"b", "a", "c"}}).key == tool_pin("t", {"x": frozenset({"c", "b", "a"})}).key
    assert tool_pin("t", {"x": {"b", "a"}}).key != tool_pin("t", {"x": {"a"}}).key
    assert tool_pin("t", {"x": {1: "a"}}).key == tool_pin("t", {"x": {"1": "a"}}).key  # as pydantic sends it


def test_a_plain_dataclass_keys_its_sets_sorted_and_otherwise_as_pydantic_dumps_it() -> None:
    # With a set, its fields are walked: the set sorted, and its bytes by digest as anywhere else in a walk.
    walked = {"tags": ["a", "b"], "note": b"kept"}
    assert tool_pin("t", {"x": Found(frozenset({"b", "a"}))}).key == tool_pin("t", {"x": walked}).key
    assert tool_pin("t", {"x": Found(frozenset({"b", "a"}))}).key != tool_pin("t", {"x": Found(frozenset({"a"}))}).key
    # Without a set, keyed as before: pydantic writes its bytes as base64.
    assert tool_pin("t", {"x": Holder(b"ab")}).key == tool_pin("t", {"x": {"inner": "YWI="}}).key


def test_a_set_as_a_key_in_a_plain_dataclass_is_refused_where_it_stands() -> None:
    with pytest.raises(CanonicalError, match="object key") as caught:
        tool_pin("t", {"x": Holder({frozenset({"a", "b"}): 1})})
    assert caught.value.path == "$.args.x.inner"


def test_undecodable_bytes_are_keyed_by_value() -> None:
    assert tool_pin("t", {"x": b"\xff\xfe"}).key == tool_pin("t", {"x": bytearray(b"\xff\xfe")}).key
    assert tool_pin("t", {"x": b"\xff\xfe"}).key != tool_pin("t", {"x": b"\xff\xff"}).key


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_deep_or_self_referencing_arguments_are_refused_naming_the_argument() -> None:
    looped: list[Any] = []
    looped.append(looped)
    for value in (nested(900), looped):
        with pytest.raises(CanonicalError, match="nested too deeply") as caught:
            tool_pin("t", {"x": value})
        assert caught.value.path.startswith("$.args.x")
    with pytest.raises(CanonicalError, match="nested too deeply"):
        pin_key("model_call", nested(5000))


def test_integers_past_pythons_digit_limit_are_refused_with_their_path() -> None:
    huge = 10**5000
    with pytest.raises(CanonicalError, match="too long") as caught:
        tool_pin("t", {"x": {"n": huge}})
    assert caught.value.path == "$.args.x.n"
    with pytest.raises(CanonicalError, match="too long") as key:
        pin_key("model_call", {"n": [huge]})
    assert key.value.path == "$.n[0]"
    with pytest.raises(PinResultError, match="too long"):
        tool_result_raw("t", {"n": huge})
    assert pin_key("model_call", {"n": 10**4000}).startswith("p1:model_call:")  # under the limit: keyed


def test_a_lone_surrogate_in_a_message_is_refused_with_its_path_not_a_unicode_error() -> None:
    # The walk once wrote such a string into the key text, which then failed to encode as UTF-8 (UnicodeEncodeError).
    messages = [ModelRequest(parts=[UserPromptPart("fine"), UserPromptPart("half \ud800 a pair")])]
    with pytest.raises(CanonicalError, match="lone surrogate") as caught:
        call_pin(SemanticCallPolicy(), messages, None, ModelRequestParameters(), model_id="m")
    assert caught.value.path == "$.messages[0].parts[1].content"
