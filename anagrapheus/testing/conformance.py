"""The conformance suite every store must pass: subclass `StoreConformance` in a pytest module, with a `make_store`.

A third store (another database, a service) implements `TimelineStore`, the two ports `EventStore` and
`PinScratchStore`; this suite is what the SQLite and PostgreSQL stores are held to, importable by anyone:

    import pytest
    from anagrapheus.testing.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            opened = []

            def make():
                opened.append(MyStore(tmp_path / "log"))
                return opened[-1]

            yield make
            for store in opened:
                store.close()

`make_store` returns a callable opening a store on the same empty log each time it is called. The tests that close
units inside a caller's transaction, or nest transactions, need the store's `transaction()` context manager (beyond
the ports, as the SQLite and PostgreSQL stores have it); a store without one skips them. It needs pytest (and
anyio's pytest plugin, which comes with anyio, for the async test).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from anagrapheus.errors import SeqConflict, StoreError, UnitClosed
from anagrapheus.timeline import (
    EventStore,
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    StoredEvent,
    TimelineStore,
)
from anagrapheus.timeline.stores.ports import LogImport, PinScratchStore, ScratchPin

__all__ = ["StoreConformance", "copied_event", "pending"]


def pending(n: int, *, namespace: str = "test", type: str = "thing") -> PendingEvent:
    """An event to append whose payload is `{"n": n}`."""
    return PendingEvent(namespace=namespace, type=type, schema_version=1, payload=f'{{"n":{n}}}')


def copied_event(seq: int) -> StoredEvent:
    """An event as another log stored it at `seq`, for `append_stored`."""
    return StoredEvent(
        seq, f"01900000-0000-7000-8000-{seq:012d}", "t", "x", 1, None, None, "2026-01-01T00:00:00Z", "{}"
    )


CLOSED = {"commit": "committed", "abandon": "abandoned"}


class StoreConformance:
    """Every `TimelineStore` implementation must pass these: subclass it and give it a `make_store` fixture."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], TimelineStore] | Iterator[Callable[[], TimelineStore]]:
        """Override: a callable opening a store on this test's log (one empty log; each call opens it again)."""
        raise NotImplementedError("subclass StoreConformance with a make_store fixture")

    @pytest.fixture
    def store(self, make_store: Callable[[], TimelineStore]) -> TimelineStore:
        """The store most tests run against."""
        return make_store()

    @pytest.fixture
    def types(self) -> EventTypeRegistry:
        """The event types of the ledger tests: the built-in ones."""
        return EventTypeRegistry()

    @pytest.fixture
    def anyio_backend(self) -> str:
        """The async tests run on asyncio."""
        return "asyncio"

    def test_implements_the_ports(self, store: TimelineStore) -> None:
        """Both ports are implemented, as `isinstance` checks them."""
        assert isinstance(store, EventStore)
        assert isinstance(store, PinScratchStore)

    def test_empty_log(self, store: TimelineStore) -> None:
        """A new log is empty."""
        assert store.last_seq() == 0
        assert list(store.read()) == []

    def test_append_assigns_gap_free_seq_and_envelope(self, store: TimelineStore) -> None:
        """Appends get gap-free seqs, unique ids and UTC times, and read back as stored."""
        first = store.append([pending(1), pending(2)])
        second = store.append([pending(3)])
        assert [e.seq for e in first + second] == [1, 2, 3]
        assert len({e.event_id for e in first + second}) == 3
        assert all(e.created_at.endswith("Z") for e in first)
        assert store.last_seq() == 3
        assert [e.payload for e in store.read()] == ['{"n":1}', '{"n":2}', '{"n":3}']
        assert list(store.read()) == first + second

    def test_append_keeps_preset_ids_and_links(self, store: TimelineStore) -> None:
        """An event id, causation, correlation and schema version given are kept."""
        event = PendingEvent(
            namespace="test",
            type="thing",
            schema_version=2,
            payload="{}",
            causation_id="cause",
            correlation_id="corr",
            event_id="01900000-0000-7000-8000-000000000001",
        )
        (stored,) = store.append([event])
        assert (stored.event_id, stored.causation_id, stored.correlation_id, stored.schema_version) == (
            "01900000-0000-7000-8000-000000000001",
            "cause",
            "corr",
            2,
        )

    def test_empty_append_is_a_no_op(self, store: TimelineStore) -> None:
        """Appending nothing writes nothing."""
        assert store.append([]) == []
        assert store.last_seq() == 0

    def test_expected_last_seq(self, store: TimelineStore) -> None:
        """An append expecting another last seq is refused with both seqs."""
        store.append([pending(1)], expected_last_seq=0)
        store.append([pending(2)], expected_last_seq=1)
        with pytest.raises(SeqConflict) as caught:
            store.append([pending(3)], expected_last_seq=1)
        assert (caught.value.expected, caught.value.actual) == (1, 2)
        assert store.last_seq() == 2

    def test_an_empty_append_still_checks_the_expected_seq(self, store: TimelineStore) -> None:
        """An empty append still checks the expected last seq."""
        store.append([pending(1)])
        assert store.append([], expected_last_seq=1) == []
        with pytest.raises(SeqConflict) as caught:
            store.append([], expected_last_seq=0)
        assert (caught.value.expected, caught.value.actual) == (0, 1)

    def test_copied_events_must_follow_the_last_seq(self, store: TimelineStore) -> None:
        """Copied events keep their seqs, and must follow the last one."""
        if not isinstance(store, LogImport):
            pytest.skip(f"{type(store).__name__} takes no copied events (no append_stored)")
        store.append([pending(1), pending(2)])
        copied = [copied_event(5), copied_event(6)]
        with pytest.raises(SeqConflict) as caught:
            store.append_stored(copied)
        assert (caught.value.expected, caught.value.actual) == (4, 2)
        store.append([pending(3), pending(4)])
        store.append_stored(copied)
        assert [e.seq for e in store.read(since=4)] == [5, 6]
        assert store.last_seq() == 6

    def test_duplicate_event_id_rejects_the_whole_batch(self, store: TimelineStore) -> None:
        """A duplicate event id refuses the whole batch."""
        twin = PendingEvent(namespace="t", type="x", schema_version=1, payload="{}", event_id="same")
        with pytest.raises(StoreError):
            store.append([pending(1), twin, twin])
        assert store.last_seq() == 0

    def test_read_filters(self, store: TimelineStore) -> None:
        """Reads filter by seq, limit, namespace and type, together."""
        store.append([pending(i, type="a" if i % 2 else "b") for i in range(1, 11)])
        store.append([pending(11, namespace="other")])
        assert [e.seq for e in store.read(since=7)] == [8, 9, 10, 11]
        assert [e.seq for e in store.read(limit=3)] == [1, 2, 3]
        assert [e.seq for e in store.read(since=5, limit=1)] == [6]
        assert [e.seq for e in store.read(since=2, limit=2)] == [3, 4]
        assert [e.seq for e in store.read(type="a")] == [1, 3, 5, 7, 9]
        assert [e.seq for e in store.read(namespace="other")] == [11]
        assert [e.seq for e in store.read(namespace="test", type="b", since=4, limit=2)] == [6, 8]
        assert list(store.read(limit=0)) == []

    def test_read_streams_in_pages(self, store: TimelineStore) -> None:
        """A long read streams, and a write part-way through neither blocks nor shows."""
        store.append([pending(i) for i in range(2500)])
        events = store.read()
        first = next(events)
        # Writing while a reader is part-way through must not block, nor change what it has yet to see.
        store.append([pending(9999)])
        rest = list(events)
        assert [first.seq, *[e.seq for e in rest]] == list(range(1, 2502))

    def test_scratch_is_invisible_to_the_log(self, store: TimelineStore) -> None:
        """Scratch pins are not events."""
        store.scratch_put("u1", "k1", kind="model_call", raw='{"a":1}', fingerprint=None)
        assert list(store.read()) == []
        assert store.last_seq() == 0

    def test_scratch_put_get_reuse_list(self, store: TimelineStore) -> None:
        """Scratch pins are put, read, counted and listed per unit in draw order."""
        assert store.scratch_get("u1", "k1") is None
        put = store.scratch_put("u1", "k1", kind="model_call", raw='"r1"', fingerprint='{"model":"x"}')
        store.scratch_put("u1", "k2", kind="tool_call", raw='"r2"', fingerprint=None)
        store.scratch_put("u2", "k1", kind="model_call", raw='"other"', fingerprint=None)
        assert store.scratch_get("u1", "k1") == put
        assert (put.attempts, put.draw_no) == (1, 1)
        assert store.scratch_reuse("u1", "k1") == replace(put, attempts=2)
        assert store.scratch_reuse("u1", "k1") == replace(put, attempts=3)
        listed = store.scratch_list("u1")
        assert [(p.key, p.raw_text, p.attempts, p.draw_no) for p in listed] == [
            ("k1", '"r1"', 3, 1),
            ("k2", '"r2"', 1, 2),
        ]
        assert [p.raw_text for p in store.scratch_list("u2")] == ['"other"']

    def test_scratch_put_twice_keeps_the_first_draw(self, store: TimelineStore) -> None:
        """A second put of one key keeps the first pin and counts an attempt."""
        # Two stores drawing one key of one unit: the first pin written is the unit's answer for it.
        first = store.scratch_put("u1", "k1", kind="model_call", raw='"r1"', fingerprint=None)
        second = store.scratch_put("u1", "k1", kind="tool_call", raw='"r2"', fingerprint='{"x":"y"}')
        assert (second.raw_text, second.kind, second.fingerprint, second.draw_no) == ('"r1"', "model_call", None, 1)
        assert second.attempts == 2
        assert store.scratch_get("u1", "k1") == second
        assert store.scratch_put("u1", "k2", kind="model_call", raw='"r3"', fingerprint=None).draw_no == 2
        assert first.attempts == 1

    def test_reuse_of_a_missing_pin_is_none(self, store: TimelineStore) -> None:
        """Reusing a pin the unit does not hold finds nothing."""
        assert store.scratch_reuse("u1", "nope") is None

    def test_open_units_and_settle(self, store: TimelineStore) -> None:
        """Units with scratch pins are open until settled."""
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        store.scratch_put("u2", "k1", kind="model_call", raw='"b"', fingerprint=None)
        store.scratch_put("u1", "k2", kind="model_call", raw='"c"', fingerprint=None)
        assert [(u.unit_id, u.pins) for u in store.open_units()] == [("u1", 2), ("u2", 1)]
        stored = store.settle_unit("u1", outcome="committed", events=lambda pins: [pending(1), pending(2)])
        assert [e.seq for e in stored] == [1, 2]
        assert store.scratch_list("u1") == []
        assert [u.unit_id for u in store.open_units()] == ["u2"]

    def test_settle_is_atomic(self, store: TimelineStore) -> None:
        """A settle whose append fails leaves the log and the scratch as they were."""
        store.append([pending(0)])
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        twin = PendingEvent(namespace="t", type="x", schema_version=1, payload="{}", event_id="same")
        with pytest.raises(StoreError):
            store.settle_unit("u1", outcome="committed", events=lambda pins: [twin, twin])
        assert store.last_seq() == 1
        assert [p.key for p in store.scratch_list("u1")] == ["k1"]

    def test_settle_lists_and_clears_in_one_step(self, store: TimelineStore) -> None:
        """A settle hands over the pins, appends their events and clears them."""
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        store.scratch_put("u1", "k2", kind="tool_call", raw='"b"', fingerprint='{"f":"1"}')
        seen: list[list[str]] = []

        def events(pins: list[ScratchPin]) -> list[PendingEvent]:
            seen.append([p.key for p in pins])
            return [pending(i) for i, _ in enumerate(pins)]

        assert store.unit_outcome("u1") is None
        assert len(store.settle_unit("u1", outcome="committed", events=events)) == 2
        assert seen == [["k1", "k2"]]
        assert store.unit_outcome("u1") == "committed"
        assert store.scratch_list("u1") == []

    @pytest.mark.parametrize("outcome", ["committed", "abandoned"])
    def test_a_closed_unit_takes_no_more_pins(
        self, store: TimelineStore, outcome: Literal["committed", "abandoned"]
    ) -> None:
        """A committed or abandoned unit refuses pins, reuse and a second settle."""
        store.settle_unit("u1", outcome=outcome, events=lambda pins: [])
        assert store.unit_outcome("u1") == outcome
        with pytest.raises(UnitClosed) as put:
            store.scratch_put("u1", "k1", kind="model_call", raw='"late"', fingerprint=None)
        assert (put.value.unit_id, put.value.state, put.value.raw_text) == ("u1", outcome, '"late"')
        with pytest.raises(UnitClosed) as reuse:
            store.scratch_reuse("u1", "k1")
        assert (reuse.value.unit_id, reuse.value.state, reuse.value.raw_text) == ("u1", outcome, None)
        with pytest.raises(UnitClosed) as settle:
            store.settle_unit("u1", outcome="committed", events=lambda pins: [pending(1)])
        assert (settle.value.unit_id, settle.value.state) == ("u1", outcome)
        assert store.scratch_list("u1") == []
        assert store.last_seq() == 0
        assert store.unit_outcome("u2") is None

    def test_scratch_reuse_counts_and_returns_the_pin(self, store: TimelineStore) -> None:
        """Reusing a pin counts an attempt and returns it."""
        assert store.scratch_reuse("u1", "k1") is None
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        reused = store.scratch_reuse("u1", "k1")
        assert reused is not None and (reused.raw_text, reused.attempts) == ('"a"', 2)
        again = store.scratch_get("u1", "k1")
        assert again is not None and again.attempts == 2

    def test_threads_share_one_store(self, store: TimelineStore) -> None:
        """Threads appending through one store lose no event and leave no gap."""

        def writer(tag: int) -> None:
            for i in range(50):
                store.append([pending(tag * 1000 + i)])

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [e.seq for e in store.read()] == list(range(1, 201))

    # Transactions of the caller's (the SQLite and PostgreSQL stores have `transaction()`, beyond the ports).

    @staticmethod
    def _transaction(store: TimelineStore) -> AbstractContextManager[None]:
        begin: Callable[[], AbstractContextManager[None]] | None = getattr(store, "transaction", None)
        if begin is None:
            pytest.skip(f"{type(store).__name__} has no transaction()")
        return begin()

    def test_transactions_nest_and_roll_back_as_a_whole(self, store: TimelineStore) -> None:
        """Nested transactions roll back as a whole, and an inner one alone."""
        with pytest.raises(RuntimeError, match="boom"), self._transaction(store):
            store.append([pending(1)])
            with self._transaction(store):
                store.append([pending(2)])
            raise RuntimeError("boom")
        assert store.last_seq() == 0
        with self._transaction(store):
            store.append([pending(1)])
            with pytest.raises(KeyError), self._transaction(store):
                store.append([pending(2)])
                raise KeyError("inner")
            store.append([pending(3)])
        assert [(e.seq, e.payload) for e in store.read()] == [(1, '{"n":1}'), (2, '{"n":3}')]

    @pytest.mark.parametrize("close", ["commit", "abandon"])
    def test_a_close_inside_a_transaction_is_undone_by_its_rollback(
        self, store: TimelineStore, types: EventTypeRegistry, close: str
    ) -> None:
        """A unit closed inside the caller's transaction opens again on its rollback."""
        ledger = PinLedger(store, types)
        ledger.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: "kept", interpret=str)
        with pytest.raises(RuntimeError, match="outer"), self._transaction(store):
            ledger.commit() if close == "commit" else ledger.abandon(reason="r")
            assert ledger.state == CLOSED[close]
            raise RuntimeError("outer")
        assert ledger.state == "open"
        assert store.last_seq() == 0
        assert [p.key for p in store.scratch_list(ledger.unit_id)] == ["p1:tool_call:a"]
        ledger.commit()
        assert ledger.state == "committed"

    @pytest.mark.anyio
    @pytest.mark.parametrize("close", ["commit", "abandon"])
    async def test_an_async_close_inside_a_transaction_joins_it(
        self, store: TimelineStore, types: EventTypeRegistry, close: str
    ) -> None:
        """An async close inside the caller's transaction commits or rolls back with it."""
        ledger = PinLedger(store, types)

        async def effect() -> str:
            return "kept"

        for outer in ("rolled back", "committed"):
            with pytest.raises(RuntimeError) if outer == "rolled back" else nullcontext(), self._transaction(store):
                await ledger.aresolve("p1:model_call:a", kind="model_call", effect=effect, interpret=str)
                closing = ledger.acommit() if close == "commit" else ledger.aabandon(reason="r")
                await asyncio.wait_for(closing, 30)
                if outer == "rolled back":
                    raise RuntimeError(outer)
            assert ledger.state == ("open" if outer == "rolled back" else CLOSED[close])
        assert [e.type for e in store.read()] == ["pin_promoted" if close == "commit" else "pins_abandoned"]
