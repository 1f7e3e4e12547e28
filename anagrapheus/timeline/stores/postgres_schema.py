"""The PostgreSQL store's place and shape: where it lives (named without the password), its migrations, its errors."""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, LiteralString

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolClosed, PoolTimeout, TooManyRequests
from typing_extensions import override

from anagrapheus.errors import StoreError, StoreIntegrityError, StoreUnavailable, UsageError
from anagrapheus.timeline.stores.ports import refuse_unknown_migrations
from anagrapheus.timeline.stores.stamps import iso_timestamp, utc_now

__all__ = ["MIGRATION_NAMES", "Failure", "PostgresPlace", "failure", "is_migrated", "migrate"]

# Each migration is a name and its statements; `{s}` is the store's schema. All are applied, with their
# records, in one transaction.
_MIGRATIONS: tuple[tuple[str, tuple[LiteralString, ...]], ...] = (
    (
        "0001_events",
        (
            """CREATE TABLE {s}.events (
                seq bigint PRIMARY KEY,
                event_id text NOT NULL UNIQUE,
                namespace text NOT NULL,
                type text NOT NULL,
                schema_version integer NOT NULL,
                causation_id text,
                correlation_id text,
                created_at text NOT NULL,
                payload text NOT NULL
            )""",
            "CREATE INDEX events_by_type ON {s}.events (namespace, type, seq)",
            # The counter row that makes seq gap-free: its row lock is held from the UPDATE that takes
            # numbers to the commit (or rollback, which gives them back). docs/explanation/design.md says why.
            """CREATE TABLE {s}.log_head (
                only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                last_seq bigint NOT NULL CHECK (last_seq >= 0)
            )""",
            "INSERT INTO {s}.log_head (last_seq) VALUES (0)",
            """CREATE FUNCTION {s}.refuse_change() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'the event log is append-only'; END $$""",
            """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON {s}.events
                FOR EACH ROW EXECUTE FUNCTION {s}.refuse_change()""",
            """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON {s}.events
                FOR EACH STATEMENT EXECUTE FUNCTION {s}.refuse_change()""",
        ),
    ),
    (
        "0002_pin_scratch",
        (
            """CREATE TABLE {s}.pin_scratch (
                unit_id text NOT NULL,
                key text NOT NULL,
                kind text NOT NULL,
                raw text NOT NULL,
                attempts integer NOT NULL,
                draw_no integer NOT NULL,
                fingerprint text,
                put_order bigint GENERATED ALWAYS AS IDENTITY,
                PRIMARY KEY (unit_id, key)
            )""",
            # Unique, so two writers in one unit can never share a draw number silently.
            "CREATE UNIQUE INDEX pin_scratch_draw_order ON {s}.pin_scratch (unit_id, draw_no)",
        ),
    ),
    (
        # A closed unit takes no more pins (see SQLiteEventStore's 0004_closed_units); earlier ones are
        # found from their events.
        "0003_closed_units",
        (
            """CREATE TABLE {s}.closed_units (
                unit_id text PRIMARY KEY,
                outcome text NOT NULL CHECK (outcome IN ('committed', 'abandoned'))
            )""",
            """INSERT INTO {s}.closed_units (unit_id, outcome)
                SELECT payload::jsonb ->> 'unit_id',
                    CASE type WHEN 'pins_abandoned' THEN 'abandoned' ELSE 'committed' END
                FROM {s}.events
                WHERE namespace = 'anagrapheus'
                    AND type IN ('pin_promoted', 'pins_abandoned', 'replay_diverged')
                    AND payload::jsonb ->> 'unit_id' IS NOT NULL
                ORDER BY seq
                ON CONFLICT (unit_id) DO NOTHING""",
        ),
    ),
    (
        # Who holds an open unit (see PostgresEventStore): a row, so a holder whose lease connection drops
        # keeps the unit while any of its connections lives, and its writes are refused once another takes it.
        "0004_unit_leases",
        (
            """CREATE TABLE {s}.unit_leases (
                unit_id text PRIMARY KEY,
                holder text NOT NULL
            )""",
        ),
    ),
    (
        # A draw's and a commit's steps as server functions, each one statement: the client sends one message a
        # step instead of up to eight (the client's CPU per statement was most of a unit's cost). Each statement
        # inside a function takes a fresh snapshot, so one made after a lock sees what its last holder committed.
        "0005_pin_functions",
        (
            # Take a unit's lease for `holder`: the row made if there is none (unless the unit is closed), locked
            # (an error, 55P03, if its holder is writing in the unit right now), and handed over only if its
            # holder has no session left. True if `holder` holds it now, or the unit is closed (needing none).
            """CREATE OR REPLACE FUNCTION {s}.take_lease(p_unit text, p_holder text) RETURNS boolean
                LANGUAGE plpgsql AS $$
                DECLARE v_holder text;
                BEGIN
                    INSERT INTO {s}.unit_leases (unit_id, holder) SELECT p_unit, p_holder
                        WHERE NOT EXISTS (SELECT FROM {s}.closed_units c WHERE c.unit_id = p_unit)
                        ON CONFLICT (unit_id) DO NOTHING;
                    SELECT l.holder INTO v_holder FROM {s}.unit_leases l WHERE l.unit_id = p_unit FOR UPDATE NOWAIT;
                    IF NOT FOUND OR v_holder = p_holder THEN
                        RETURN true;
                    END IF;
                    UPDATE {s}.unit_leases l SET holder = p_holder WHERE l.unit_id = p_unit
                        AND NOT EXISTS (SELECT FROM pg_stat_activity a
                            WHERE a.application_name = 'anagrapheus ' || v_holder);
                    RETURN FOUND;
                END $$""",
            # Count one more attempt at a drawn pin, if `holder` holds the unit (taking its lease first when
            # `p_take`). One row: whether the lease is held, the unit's outcome and holder (read after the
            # update, so one that waited on the unit being settled sees it closed), and the pin, if drawn.
            # A first ask that wrote only the lease is not waited to disk (see PostgresEventStore).
            """CREATE OR REPLACE FUNCTION {s}.reuse_pin(p_unit text, p_key text, p_holder text, p_take boolean)
                RETURNS TABLE (taken boolean, outcome text, holder text, unit_id text, key text, kind text,
                    raw text, attempts integer, draw_no integer, fingerprint text)
                LANGUAGE plpgsql AS $$
                #variable_conflict use_column
                BEGIN
                    IF p_take AND NOT {s}.take_lease(p_unit, p_holder) THEN
                        RETURN QUERY SELECT false, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                            NULL::text, NULL::integer, NULL::integer, NULL::text;
                        RETURN;
                    END IF;
                    RETURN QUERY WITH reused AS (
                        UPDATE {s}.pin_scratch s SET attempts = s.attempts + 1
                        WHERE s.unit_id = p_unit AND s.key = p_key
                            AND EXISTS (SELECT FROM {s}.unit_leases l WHERE l.unit_id = p_unit AND l.holder = p_holder)
                        RETURNING s.unit_id, s.key, s.kind, s.raw, s.attempts, s.draw_no, s.fingerprint
                    ) SELECT true, NULL::text, p_holder, r.unit_id, r.key, r.kind, r.raw, r.attempts, r.draw_no,
                        r.fingerprint FROM reused r;
                    IF FOUND THEN
                        RETURN;
                    END IF;
                    IF p_take THEN
                        PERFORM set_config('synchronous_commit', 'off', true);
                    END IF;
                    RETURN QUERY SELECT true, (SELECT c.outcome FROM {s}.closed_units c WHERE c.unit_id = p_unit),
                        (SELECT l.holder FROM {s}.unit_leases l WHERE l.unit_id = p_unit), NULL::text, NULL::text,
                        NULL::text, NULL::text, NULL::integer, NULL::integer, NULL::text;
                END $$""",
            # Write a first draw (attempts 1, the unit's next draw number; one more attempt if the key was drawn
            # meanwhile) under the unit's lock `p_lock`, if the unit is open and `holder` holds it. One row: the
            # unit's outcome and holder, and the pin (NULL if refused).
            """CREATE OR REPLACE FUNCTION {s}.put_pin(p_unit text, p_key text, p_kind text, p_raw text,
                    p_fingerprint text, p_holder text, p_lock text)
                RETURNS TABLE (outcome text, holder text, unit_id text, key text, kind text, raw text,
                    attempts integer, draw_no integer, fingerprint text)
                LANGUAGE plpgsql AS $$
                #variable_conflict use_column
                BEGIN
                    PERFORM pg_advisory_xact_lock(hashtextextended(p_lock, 1));
                    RETURN QUERY WITH fence AS (
                        SELECT (SELECT c.outcome FROM {s}.closed_units c WHERE c.unit_id = p_unit) AS outcome,
                            (SELECT l.holder FROM {s}.unit_leases l WHERE l.unit_id = p_unit FOR SHARE) AS holder
                    ), put AS (
                        INSERT INTO {s}.pin_scratch AS s (unit_id, key, kind, raw, attempts, draw_no, fingerprint)
                        SELECT p_unit, p_key, p_kind, p_raw, 1, coalesce(max(x.draw_no), 0) + 1, p_fingerprint
                            FROM {s}.pin_scratch x WHERE x.unit_id = p_unit
                            HAVING (SELECT f.outcome IS NULL AND f.holder = p_holder FROM fence f)
                        ON CONFLICT (unit_id, key) DO UPDATE SET attempts = s.attempts + 1
                        RETURNING s.unit_id, s.key, s.kind, s.raw, s.attempts, s.draw_no, s.fingerprint
                    )
                    SELECT f.outcome, f.holder, p.unit_id, p.key, p.kind, p.raw, p.attempts, p.draw_no,
                        p.fingerprint FROM fence f LEFT JOIN put p ON true;
                END $$""",
            # The first half of settling a unit, under its lock `p_lock`: the unit's outcome and holder (the
            # fence, its rows locked) in the first row, then, if `holder` may settle it, its pins in draw order,
            # locked: an attempt counted after the listing waits for the settling to commit, then finds no pin.
            """CREATE OR REPLACE FUNCTION {s}.list_to_settle(p_unit text, p_holder text, p_lock text)
                RETURNS TABLE (outcome text, holder text, unit_id text, key text, kind text, raw text,
                    attempts integer, draw_no integer, fingerprint text)
                LANGUAGE plpgsql AS $$
                #variable_conflict use_column
                DECLARE v_outcome text; v_holder text;
                BEGIN
                    PERFORM pg_advisory_xact_lock(hashtextextended(p_lock, 1));
                    SELECT (SELECT c.outcome FROM {s}.closed_units c WHERE c.unit_id = p_unit),
                        (SELECT l.holder FROM {s}.unit_leases l WHERE l.unit_id = p_unit FOR UPDATE)
                        INTO v_outcome, v_holder;
                    RETURN QUERY SELECT v_outcome, v_holder, NULL::text, NULL::text, NULL::text, NULL::text,
                        NULL::integer, NULL::integer, NULL::text;
                    IF v_outcome IS NULL AND v_holder = p_holder THEN
                        RETURN QUERY SELECT NULL::text, NULL::text, s.unit_id, s.key, s.kind, s.raw, s.attempts,
                            s.draw_no, s.fingerprint FROM {s}.pin_scratch s WHERE s.unit_id = p_unit
                            ORDER BY s.draw_no FOR UPDATE;
                    END IF;
                END $$""",
            # The second half: the events numbered from the log_head row (locked from here to the commit) and
            # appended, the pins cleared, the unit recorded closed and its lease let go. Returns the seq the
            # events follow (NULL with no events: the log_head row is then not locked).
            """CREATE OR REPLACE FUNCTION {s}.close_unit(p_unit text, p_outcome text, p_events jsonb)
                RETURNS bigint
                LANGUAGE plpgsql AS $$
                DECLARE v_count integer := jsonb_array_length(p_events); v_after bigint;
                BEGIN
                    IF v_count > 0 THEN
                        UPDATE {s}.log_head SET last_seq = last_seq + v_count RETURNING last_seq - v_count
                            INTO v_after;
                        -- Each event a JSON array of its row (seq counted from 1), in the events' column order.
                        INSERT INTO {s}.events (seq, event_id, namespace, type, schema_version, causation_id,
                                correlation_id, created_at, payload)
                            SELECT v_after + (e ->> 0)::bigint, e ->> 1, e ->> 2, e ->> 3, (e ->> 4)::integer,
                                e ->> 5, e ->> 6, e ->> 7, e ->> 8
                            FROM jsonb_array_elements(p_events) AS e;
                    END IF;
                    DELETE FROM {s}.pin_scratch WHERE unit_id = p_unit;
                    INSERT INTO {s}.closed_units (unit_id, outcome) VALUES (p_unit, p_outcome);
                    DELETE FROM {s}.unit_leases WHERE unit_id = p_unit;
                    RETURN v_after;
                END $$""",
        ),
    ),
)
MIGRATION_NAMES = tuple(name for name, _ in _MIGRATIONS)
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class PostgresPlace:
    """Where a store lives: server, database and schema, described without the password."""

    server: str
    """`host:port`, or the local socket directory."""
    database: str
    """The database name."""
    schema: str
    """The schema that holds the store's tables."""
    _password: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, dsn: str, schema: str) -> PostgresPlace:
        """Describe a DSN's server and database; a malformed DSN is refused without echoing it."""
        if not _SCHEMA_NAME.fullmatch(schema):
            raise UsageError(f"schema must be a lowercase SQL identifier ([a-z_][a-z0-9_]*), not {schema!r}")
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error:
            # psycopg's message quotes the DSN, password and all.
            raise UsageError("the PostgreSQL DSN is malformed (not shown: it may hold a password)") from None
        host = str(params.get("host") or "the local socket")
        port = str(params.get("port") or "5432")
        password = params.get("password")
        return cls(
            server=f"{host}:{port}",
            database=str(params.get("dbname") or params.get("user") or "(default)"),
            schema=schema,
            _password=None if password is None else str(password),
        )

    @override
    def __str__(self) -> str:
        return f"schema {self.schema} of database {self.database} on {self.server}"

    def table(self, name: LiteralString) -> sql.Composed:
        """The schema-qualified name of one of the store's tables."""
        return sql.SQL("{s}.{t}").format(s=sql.Identifier(self.schema), t=sql.Identifier(name))

    def query(self, text: LiteralString) -> sql.Composed:
        """A statement with `{s}` replaced by the quoted schema name."""
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    @contextmanager
    def translated(self, action: str) -> Generator[None]:
        """The one choke point where psycopg errors become the library's own, naming server and database.

        The error's class says what the caller can do (see `failure`): `StoreUnavailable`, try again later;
        `StoreIntegrityError`, a write the schema refuses; any other `StoreError`, a fault to fix.
        """
        try:
            yield
        except psycopg.Error as e:
            message = str(e).strip() or type(e).__name__
            if self._password:
                message = message.replace(self._password, "***")
            raise _RAISED[failure(e)](f"{action} failed on {self}: {message}") from e


Failure = Literal["retry", "unavailable", "integrity", "error"]
"""What a psycopg error says, by what the caller can do about it.

- `retry`: the session was lost, or a conflict aborted its transaction; the same step may succeed at once on a fresh
  connection, so the store tries it again (outside a caller's transaction) before raising `StoreUnavailable`.
- `unavailable`: the server is there but could not serve in time (a bound ran out, no connection to lend, no room):
  `StoreUnavailable` at once, for a second try would double the bound.
- `integrity`: a write breached a constraint (unique, check, foreign key, not null): `StoreIntegrityError`.
- `error`: what was asked is wrong (a syntax error, a missing table or column, a refused login, a missing
  database, a trigger's refusal): `StoreError`.
"""

# Lost sessions and aborted transactions a fresh try may clear: admin shutdown, crash shutdown, cannot connect now,
# idle session timeout, serialization failure, deadlock. A lost connection has no SQLSTATE, or one of class 08.
_RETRY_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "40001", "40P01"})
# Refused logins and missing databases are OperationalErrors too: waiting will not mend them.
_NOT_UNAVAILABLE = ("28", "3D")
_RAISED: Final[Mapping[Failure, type[StoreError]]] = {
    "retry": StoreUnavailable,
    "unavailable": StoreUnavailable,
    "integrity": StoreIntegrityError,
    "error": StoreError,
}


def failure(error: psycopg.Error) -> Failure:
    """Classify a psycopg error by its class and SQLSTATE (see `Failure`)."""
    state = error.sqlstate or ""
    if isinstance(error, psycopg.IntegrityError) or state == "40002":
        return "integrity"
    if isinstance(error, psycopg.errors.IdleInTransactionSessionTimeout):
        # The caller's transaction ended with its session: only the caller can make it again.
        return "unavailable"
    if (
        not isinstance(error, psycopg.OperationalError)
        or state.startswith(_NOT_UNAVAILABLE)
        or isinstance(error, PoolClosed)
    ):
        return "error"
    if isinstance(error, PoolTimeout | TooManyRequests):
        # The pool's own errors have no SQLSTATE, but are no lost connection: the wait for one was the bound.
        return "unavailable"
    if state in _RETRY_STATES or not state or state.startswith("08"):
        return "retry"
    return "unavailable"


def migrate(conn: psycopg.Connection[Any], place: PostgresPlace) -> None:
    """Create or bring forward the store's schema in one transaction; refuse a schema newer than the code."""
    migrations = place.table("anagrapheus_migrations")
    with place.translated("migrating"), conn.transaction():
        # Many workers may open a new store at once: one migrates, the others wait, then find it done.
        # DDL on a busy server may outlast a tight statement_timeout; the wait for the lock stays bounded.
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"anagrapheus migrate {place.schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {s}").format(s=sql.Identifier(place.schema)))
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {m} (name text PRIMARY KEY, applied_at text NOT NULL)").format(
                m=migrations
            )
        )
        applied = {str(row[0]) for row in conn.execute(sql.SQL("SELECT name FROM {m}").format(m=migrations))}
        refuse_unknown_migrations(place, applied, MIGRATION_NAMES)
        for name, statements in _MIGRATIONS:
            if name in applied:
                continue
            for statement in statements:
                conn.execute(place.query(statement))
            # The wall clock, as in the SQLite store: migrating is not an event.
            conn.execute(
                sql.SQL("INSERT INTO {m} (name, applied_at) VALUES (%s, %s)").format(m=migrations),
                (name, iso_timestamp(utc_now())),
            )


def is_migrated(conn: psycopg.Connection[Any], place: PostgresPlace) -> bool:
    """Whether every known migration is applied already (so a worker can skip the migration lock)."""
    with place.translated("reading the migrations"):
        row = conn.execute("SELECT to_regclass(%s)", (f"{place.schema}.anagrapheus_migrations",)).fetchone()
        if row is None or row[0] is None:
            return False
        names = {
            str(r[0])
            for r in conn.execute(sql.SQL("SELECT name FROM {m}").format(m=place.table("anagrapheus_migrations")))
        }
    return names == set(MIGRATION_NAMES)
