"""The guard's set-order check: which forms of a test's source take an order from a set, and which do not."""

from __future__ import annotations

import contextlib
import functools
import importlib
import linecache
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anagrapheus.testing.entropy.set_order import ANY_ORDER, set_orders

# Each sample is a test body as a user writes it; the check reads its source, it never runs it.
# ruff: noqa: RUF015, E731


def loop_over_a_display() -> None:
    for city in {"Paris", "Lyon"}:
        print(city)


def list_of_a_set_call(cities: list[str]) -> str:
    return list(set(cities))[0]


def comprehension_over_a_name(cities: list[str]) -> list[str]:
    seen = set(cities)
    seen |= {"Nice"}
    return [city.upper() for city in seen]


def join_and_fstring_and_pop(cities: list[str]) -> str:
    places = frozenset(cities) | {"Arles"}
    first = places.copy()
    return ", ".join(places) + f"{first}" + str(set(cities).pop())


def unpacking_and_star(cities: list[str]) -> tuple[str, ...]:
    a, b = {cities[0], cities[1]}
    return (*{a, b},)


def annotated(cities: list[str]) -> object:
    chosen: set[str] = make(cities)
    return next(iter(chosen))


def orderless(cities: list[str]) -> object:
    numbers = {1, 2, 3}
    names = set(cities)
    holder.names = set(cities)
    with contextlib.suppress(KeyError):
        names.remove("Paris")
    return sorted(names), len(names), min(names), "Paris" in names, list(numbers), [n for n in {4.0, 5}]


def rebound_name(cities: list[str]) -> list[str]:
    names = set(cities)
    names = sorted(names)
    return list(names)


def from_a_comprehension(cities: list[str]) -> list[str]:
    return [city for city in {c.title() for c in cities}]


def said_deliberate(cities: list[str]) -> int:
    total = 0
    for city in set(cities):  # anagrapheus: any-order
        total += len(city)
    return total


holder = SimpleNamespace()


def make(cities: list[str]) -> set[str]:
    return set(cities)


def line(function: Callable[..., object], offset: int) -> str:
    return f":{function.__code__.co_firstlineno + offset} (in {function.__name__})"


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (loop_over_a_display, [("for loop over a set", 1)]),
        (list_of_a_set_call, [("list() of a set", 1)]),
        (comprehension_over_a_name, [("comprehension over a set", 3)]),
        (
            join_and_fstring_and_pop,
            [("str.join of a set", 3), ("f-string of a set", 3), ("set.pop()", 3)],
        ),
        (unpacking_and_star, [("unpacking of a set", 1), ("* unpacking of a set", 2)]),
        (annotated, [("iter() of a set", 2)]),
        (orderless, []),
        (rebound_name, []),
        (from_a_comprehension, [("comprehension over a set", 1)]),
        (said_deliberate, []),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_form_that_takes_an_order_from_a_set_is_found_with_its_line(
    function: Callable[..., object], expected: list[tuple[str, int]]
) -> None:
    found = set_orders(function)
    assert [(order.what, order.where) for order in found] == [
        (what, f"tests/testing/test_entropy_set_order.py{line(function, offset)}") for what, offset in expected
    ]


def test_the_comment_is_the_one_the_check_reads() -> None:
    assert ANY_ORDER == "anagrapheus: any-order"
    assert set_orders(said_deliberate) == ()


def test_a_wrapped_test_a_method_and_a_hypothesis_test_are_read_as_written() -> None:
    @functools.wraps(loop_over_a_display)
    def wrapper() -> None:
        loop_over_a_display()

    class Suite:
        def test_method(self) -> None:
            for city in {"a", "b"}:
                print(city)

    @given(st.just(["x"]))
    def test_hypothesis(cities: list[str]) -> None:
        assert list(set(cities))

    assert [order.what for order in set_orders(wrapper)] == ["for loop over a set"]
    assert [order.what for order in set_orders(Suite().test_method)] == ["for loop over a set"]
    assert [order.what for order in set_orders(test_hypothesis)] == ["list() of a set"]


def test_what_has_no_user_source_is_not_read() -> None:
    namespace: dict[str, object] = {}
    exec("def from_a_string():\n    return list({'a', 'b'})\n", namespace)
    from_a_string = namespace["from_a_string"]
    assert callable(from_a_string)
    assert set_orders(from_a_string) == ()
    assert set_orders(len) == ()
    # An installed package's code answers to its own authors, not to the manifest.
    assert set_orders(pytest.approx) == ()


pick_first = (
    lambda cities: list(set(cities))[0]
)  # fmt: skip
PICKS = {
    "first": lambda cities: list(set(cities))[0],
}


def test_a_source_that_cannot_be_read_or_parsed_claims_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A lambda's lines are read as they stand: alone on its line it parses, as a dict's value it does not.
    assert [order.what for order in set_orders(pick_first)] == ["list() of a set"]
    assert set_orders(PICKS["first"]) == ()
    # A module whose file is gone since it was imported.
    (tmp_path / "gone_sample.py").write_text("def body():\n    return list({'a', 'b'})\n")
    monkeypatch.syspath_prepend(tmp_path)
    module = importlib.import_module("gone_sample")
    (tmp_path / "gone_sample.py").unlink()
    linecache.clearcache()
    assert set_orders(module.body) == ()
