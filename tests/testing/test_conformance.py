"""The shipped store conformance suite, run as a third store's author would: on a store with only the two ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from anagrapheus.testing.conformance import StoreConformance
from anagrapheus.timeline import PendingEvent, SQLiteEventStore, StoredEvent, TimelineStore
from anagrapheus.timeline.stores.ports import OpenUnit, ScratchPin, UnitOutcome

pytest_plugins = ["pytester"]


class PortsOnly:
    """A store with the ports and nothing beyond them (no `transaction()`, no `append_stored`), over SQLite."""

    def __init__(self, path: Path) -> None:
        self._inner = SQLiteEventStore(path)

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        return self._inner.append(events, expected_last_seq=expected_last_seq)

    def read(
        self, *, since: int = 0, limit: int | None = None, namespace: str | None = None, type: str | None = None
    ) -> Iterator[StoredEvent]:
        return self._inner.read(since=since, limit=limit, namespace=namespace, type=type)

    def last_seq(self) -> int:
        return self._inner.last_seq()

    def close(self) -> None:
        self._inner.close()

    def scratch_get(self, unit_id: str, key: str) -> ScratchPin | None:
        return self._inner.scratch_get(unit_id, key)

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        return self._inner.scratch_put(unit_id, key, kind=kind, raw=raw, fingerprint=fingerprint)

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        return self._inner.scratch_reuse(unit_id, key)

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        return self._inner.scratch_list(unit_id)

    def open_units(self) -> list[OpenUnit]:
        return self._inner.open_units()

    def unit_outcome(self, unit_id: str) -> UnitOutcome | None:
        return self._inner.unit_outcome(unit_id)

    def settle_unit(
        self, unit_id: str, *, outcome: UnitOutcome, events: Callable[[list[ScratchPin]], Sequence[PendingEvent]]
    ) -> list[StoredEvent]:
        return self._inner.settle_unit(unit_id, outcome=outcome, events=events)


class TestAStoreWithOnlyThePorts(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[Callable[[], TimelineStore]]:
        opened: list[PortsOnly] = []

        def make() -> TimelineStore:
            opened.append(PortsOnly(tmp_path / "log.db"))
            return opened[-1]

        yield make
        for store in opened:
            store.close()


def test_a_subclass_without_make_store_says_what_it_lacks(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        from anagrapheus.testing.conformance import StoreConformance

        class TestNothing(StoreConformance):
            pass
        """
    )
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "empty_log")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*subclass StoreConformance with a make_store fixture*"])
