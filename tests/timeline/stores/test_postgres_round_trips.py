"""The PostgreSQL store's round trips per unit of work, counted on the wire (a count a busy machine cannot move)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.timeline import EventTypeRegistry, PinLedger
from anagrapheus.timeline.stores.postgres import PostgresEventStore
from benchmarks._pg_wire import Counts, WireCounter

pytestmark = pytest.mark.postgres

# A draw is two trips of one statement each: one asks whether the key was drawn (taking the unit's lease in the
# same statement on the first draw), one writes the result durably. A commit is two: the pins listed under the
# unit's locks, then the events appended, the unit closed and the transaction committed together. Statements are
# counted too: the client's CPU goes by them.
UNIT_OF_TWO_DRAWS = Counts(round_trips=2 * 2 + 2, statements=2 * 2 + 2, transactions=2 * 2 + 1)
A_FURTHER_DRAW = Counts(round_trips=2, statements=2, transactions=2)


def unit(store: PostgresEventStore, types: EventTypeRegistry, tag: str, *, draws: int = 2) -> None:
    ledger = PinLedger(store, types)
    for n in range(draws):
        ledger.resolve(f"p1:tool_call:{tag}-{n}", kind="tool_call", effect=lambda n=n: n, interpret=int)
    ledger.commit()


def counted(postgres_dsn: str, pg_schema: str, work: Callable[[PostgresEventStore], object]) -> list[Counts]:
    """Open a store through the wire counter, warm it, then count each call of `work`.

    Warm: the store prepares each of a unit's statements at its first use on a connection, a trip of its own once;
    three units of warming have prepared each of a unit's.
    """
    types = EventTypeRegistry()
    counts: list[Counts] = []
    with WireCounter(postgres_dsn) as wire, PostgresEventStore(wire.dsn, schema=pg_schema, pool_size=1) as store:
        for n in range(3):
            unit(store, types, f"warm{n}")
        for _ in range(3):
            wire.reset()
            work(store)
            counts.append(wire.counts())
    return counts


def test_a_unit_of_two_draws_and_a_commit_takes_six_round_trips_and_six_statements(
    postgres_dsn: str, pg_schema: str
) -> None:
    types = EventTypeRegistry()
    tags = iter(range(100))
    counts = counted(postgres_dsn, pg_schema, lambda store: unit(store, types, f"u{next(tags)}"))
    assert counts == [UNIT_OF_TWO_DRAWS] * 3


def test_each_further_draw_costs_two_round_trips_of_one_statement(postgres_dsn: str, pg_schema: str) -> None:
    types = EventTypeRegistry()
    tags = iter(range(100))
    counts = counted(postgres_dsn, pg_schema, lambda store: unit(store, types, f"u{next(tags)}", draws=5))
    further = 3
    assert (
        counts
        == [
            Counts(
                round_trips=UNIT_OF_TWO_DRAWS.round_trips + further * A_FURTHER_DRAW.round_trips,
                statements=UNIT_OF_TWO_DRAWS.statements + further * A_FURTHER_DRAW.statements,
                transactions=UNIT_OF_TWO_DRAWS.transactions + further * A_FURTHER_DRAW.transactions,
            )
        ]
        * 3
    )


def test_an_append_is_one_round_trip_and_one_transaction(postgres_dsn: str, pg_schema: str) -> None:
    from ...store_conformance import pending

    counts = counted(postgres_dsn, pg_schema, lambda store: store.append([pending(1), pending(2)]))
    assert [(c.round_trips, c.transactions) for c in counts] == [(1, 1)] * 3
