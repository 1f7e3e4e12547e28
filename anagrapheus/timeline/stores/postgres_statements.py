"""The PostgreSQL store's statements, each composed once for the store's schema and named for what it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, LiteralString, cast

from psycopg import sql
from psycopg.pq.abc import PGresult

from anagrapheus.timeline.stores.postgres_schema import PostgresPlace

__all__ = ["EVENT_COLUMN_NAMES", "PostgresStatements", "Prepared"]

Decode = Callable[[bytes | None], Any]

_EVENT_COLUMNS: LiteralString = (
    "seq, event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"
)
EVENT_COLUMN_NAMES = tuple(name.strip() for name in _EVENT_COLUMNS.split(","))
"""The events table's columns in order: the parameter names of `append_numbered` and `append_stored`."""
_SCRATCH_COLUMNS: LiteralString = "unit_id, key, kind, raw, attempts, draw_no, fingerprint"
# A lease is not waited to disk: one lost with a crash of the server went with every session of its holder too,
# and is taken afresh; every write is fenced on it, and the unit's first durable write makes it durable as well
# (the server's log is written in order). `reuse_pin` does the same for a unit's first ask that wrote only the
# lease (see the 0005_pin_functions migration).
_LEASE_NOT_WAITED_TO_DISK: LiteralString = "set_config('synchronous_commit', 'off', true)"
# The events of an append, one array a column, as rows in column order.
_UNNEST_EVENTS: LiteralString = (
    "unnest(%(seq)s::bigint[], %(event_id)s::text[], %(namespace)s::text[], %(type)s::text[],"
    " %(schema_version)s::integer[], %(causation_id)s::text[], %(correlation_id)s::text[], %(created_at)s::text[],"
    " %(payload)s::text[]) AS e(" + _EVENT_COLUMNS + ")"
)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _integer(value: bytes | None) -> int | None:
    return None if value is None else int(value)


def _boolean(value: bytes | None) -> bool | None:
    return None if value is None else value == b"t"


# A column's text as the server sends it (the store's connections speak UTF-8), made the Python value psycopg
# would make; NULL stays None.
_TEXT: Decode = _text
_INTEGER: Decode = _integer
_BOOLEAN: Decode = _boolean
_OUTCOME_AND_HOLDER = (_TEXT, _TEXT)
_PIN = (_TEXT, _TEXT, _TEXT, _TEXT, _INTEGER, _INTEGER, _TEXT)
"""A `ScratchPin`'s columns, in its fields' order."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A draw's statement, prepared once per connection and run through libpq by name, its row decoded here.

    A draw makes two statements; psycopg's cursor (query conversion, adapters, its prepared-statement cache, a
    row maker) cost more of the client's time than the rest of the draw. `query` is the same statement for
    psycopg, run inside a caller's transaction.
    """

    name: bytes
    """The prepared statement's name on the server: the store's own, apart from psycopg's `_pg3_*`."""
    text: bytes
    """The statement with libpq's `$n` placeholders."""
    query: bytes
    """The statement with psycopg's `%s` placeholders."""
    columns: tuple[Decode, ...]
    """How each column's text (None for NULL) is decoded."""

    def row(self, result: PGresult, number: int = 0) -> tuple[Any, ...] | None:
        """The result's row `number`, decoded; None if it has none."""
        if number >= result.ntuples:
            return None
        value = result.get_value
        return tuple([decode(value(number, column)) for column, decode in enumerate(self.columns)])

    def rows(self, result: PGresult) -> list[tuple[Any, ...]]:
        """The result's rows, decoded."""
        return [cast("tuple[Any, ...]", self.row(result, number)) for number in range(result.ntuples)]


@dataclass(frozen=True)
class PostgresStatements:
    """The statements of one store, as the bytes psycopg sends: composed once, for a unit sends a few many times."""

    # A draw and a commit: each step one statement calling a function of the schema (0005_pin_functions).
    take_lease: bytes
    """(unit, holder): the lease taken, not waited to disk; its second column says whether it is held."""
    reuse_pin: Prepared
    """(unit, key, holder, take the lease first): see `reuse_pin`."""
    put_pin: Prepared
    """(unit, key, kind, raw, fingerprint, holder, the unit's lock name): see `put_pin`."""
    list_to_settle: Prepared
    """(unit, holder, the unit's lock name): see `list_to_settle`."""
    close_unit: Prepared
    """(unit, outcome, the events as a JSON array of rows): see `close_unit`."""
    # The event log.
    take_seq: bytes
    """(count, count): the numbers of an append taken from the log_head row, returning the seq they follow."""
    append_numbered: bytes
    """Events numbered after the log_head row's new last seq (`n`, and a parameter an event column)."""
    take_seq_at: bytes
    """(last seq, the seq before the first): numbers for events copied verbatim, if the log ends there."""
    append_stored: bytes
    """Events copied verbatim (a parameter an event column)."""
    last_seq: bytes
    # The pin scratch and the units.
    read_pin: bytes
    """(unit, key)."""
    list_pins: bytes
    """(unit): in draw order."""
    list_open_units: bytes
    unit_outcome: bytes
    """(unit)."""
    list_closed_units: bytes
    """(`after`, `page`): by unit id in byte order, a page after `after` (None: from the first)."""
    import_closed_units: bytes
    """(unit ids, outcomes): how many were new."""
    release_leases: bytes
    """(holder): every lease row of a store."""
    _place: PostgresPlace

    @classmethod
    def of(cls, place: PostgresPlace) -> PostgresStatements:
        """Compose the statements of the store at `place`."""
        events, head, scratch = place.table("events"), place.table("log_head"), place.table("pin_scratch")
        closed, leases = place.table("closed_units"), place.table("unit_leases")

        def composed(text: LiteralString, **parts: sql.Composable) -> bytes:
            return sql.SQL(text).format(**parts).as_bytes(None)

        def call(function: LiteralString, text: LiteralString) -> bytes:
            return composed(text, f=place.table(function))

        def prepared(function: LiteralString, arguments: LiteralString, *columns: Decode) -> Prepared:
            query = call(function, "SELECT * FROM {f}" + arguments)
            text = query.replace(b"%s", b"$%d") % tuple(range(1, query.count(b"%s") + 1))
            return Prepared(b"anagrapheus_" + function.encode(), text, query, columns)

        return cls(
            take_lease=call("take_lease", "SELECT " + _LEASE_NOT_WAITED_TO_DISK + ", {f}(%s, %s)"),
            reuse_pin=prepared("reuse_pin", "(%s, %s, %s, %s)", _BOOLEAN, *_OUTCOME_AND_HOLDER, *_PIN),
            put_pin=prepared("put_pin", "(%s, %s, %s, %s, %s, %s, %s)", *_OUTCOME_AND_HOLDER, *_PIN),
            list_to_settle=prepared("list_to_settle", "(%s, %s, %s)", *_OUTCOME_AND_HOLDER, *_PIN),
            close_unit=prepared("close_unit", "(%s, %s, %s::jsonb)", _INTEGER),
            take_seq=composed("UPDATE {h} SET last_seq = last_seq + %s RETURNING last_seq - %s", h=head),
            append_numbered=composed(
                "INSERT INTO {e} ({c}) SELECT (SELECT last_seq FROM {h}) - %(n)s + e.seq, e.event_id, e.namespace,"
                " e.type, e.schema_version, e.causation_id, e.correlation_id, e.created_at, e.payload FROM "
                + _UNNEST_EVENTS,
                h=head,
                e=events,
                c=sql.SQL(_EVENT_COLUMNS),
            ),
            take_seq_at=composed("UPDATE {h} SET last_seq = %s WHERE last_seq = %s RETURNING last_seq", h=head),
            append_stored=composed(
                "INSERT INTO {e} ({c}) SELECT * FROM " + _UNNEST_EVENTS, e=events, c=sql.SQL(_EVENT_COLUMNS)
            ),
            last_seq=composed("SELECT last_seq FROM {h}", h=head),
            read_pin=composed(
                "SELECT {c} FROM {p} WHERE unit_id = %s AND key = %s", c=sql.SQL(_SCRATCH_COLUMNS), p=scratch
            ),
            list_pins=composed(
                "SELECT {c} FROM {p} WHERE unit_id = %s ORDER BY draw_no", c=sql.SQL(_SCRATCH_COLUMNS), p=scratch
            ),
            list_open_units=composed(
                "SELECT unit_id, count(*) FROM {p} GROUP BY unit_id ORDER BY min(put_order)", p=scratch
            ),
            unit_outcome=composed("SELECT outcome FROM {u} WHERE unit_id = %s", u=closed),
            list_closed_units=composed(
                'SELECT unit_id, outcome FROM {u} WHERE %(after)s::text IS NULL OR unit_id COLLATE "C" > %(after)s'
                ' ORDER BY unit_id COLLATE "C" LIMIT %(page)s',
                u=closed,
            ),
            import_closed_units=composed(
                "WITH new AS (INSERT INTO {u} (unit_id, outcome) SELECT * FROM unnest(%s::text[], %s::text[])"
                " ON CONFLICT (unit_id) DO NOTHING RETURNING 1) SELECT count(*) FROM new",
                u=closed,
            ),
            release_leases=composed("DELETE FROM {l} WHERE holder = %s", l=leases),
            _place=place,
        )

    def read_events(self, *, namespace: bool, type: bool) -> sql.Composed:
        """Events after a seq (`%s`), in seq order, up to a limit (`%s`), filtered by namespace and type if asked."""
        where: list[sql.Composable] = [sql.SQL("seq > %s")]
        if namespace:
            where.append(sql.SQL("namespace = %s"))
        if type:
            where.append(sql.SQL("type = %s"))
        return sql.SQL("SELECT {c} FROM {e} WHERE {w} ORDER BY seq LIMIT %s").format(
            c=sql.SQL(_EVENT_COLUMNS), e=self._place.table("events"), w=sql.SQL(" AND ").join(where)
        )
