"""Values kept with their types: a tree of lists, tuples and dicts holding typed values comes back as it went."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anagrapheus.errors import PinResultError
from anagrapheus.provider.typed import needs_tags, typed_tree, untyped_tree
from anagrapheus.timeline.canonical import stored_json

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.datetimes(timezones=st.just(UTC)),
    st.decimals(allow_nan=False, allow_infinity=False, places=4),
)
_trees = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)


def shape(value: object) -> Any:
    """The value with the class of every leaf and container beside it: what equality alone would not tell."""
    if isinstance(value, dict):
        return (dict, {k: shape(v) for k, v in cast(dict[str, object], value).items()})
    if isinstance(value, (list, tuple)):
        return (type(value), [shape(v) for v in cast(list[object], value)])
    return (type(value), value)


@given(_trees)
def test_a_tree_comes_back_from_its_pinned_json_with_every_class_it_held(value: object) -> None:
    stored = json.loads(stored_json(typed_tree(value, what="a detail held")))
    assert shape(untyped_tree(stored)) == shape(value)


def test_a_value_needs_tags_when_it_is_or_holds_at_any_depth_what_json_would_not_bring_back() -> None:
    assert needs_tags({"usage": {"at": datetime(2026, 1, 5, tzinfo=UTC)}})
    assert needs_tags([1, (2, 3)]) and needs_tags([[Decimal("1.5")]]) and needs_tags((1, 2))
    assert not needs_tags({"usage": {"tokens": [1, 2]}}) and not needs_tags("a") and not needs_tags([None, 1.5])


def test_a_node_no_tree_could_hold_is_refused() -> None:
    with pytest.raises(PinResultError, match="cannot rebuild"):
        untyped_tree({"$t": "set", "v": [1]})
