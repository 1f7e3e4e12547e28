"""The suite's own bookkeeping in tests/conftest.py names files that exist."""

from __future__ import annotations

from tests.conftest import GUARDED_MODULES, SLOWEST_FIRST, TESTS


def test_every_file_ranked_slowest_first_exists_once() -> None:
    # A renamed file left under its old name here is silently run in collection order, wherever that falls.
    assert [name for name in SLOWEST_FIRST if not (TESTS / name).is_file()] == []
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)


def test_every_guarded_module_exists() -> None:
    assert sorted(name for name in GUARDED_MODULES if not (TESTS / name).is_file()) == []
