"""Where a PostgreSQL store lives, as its errors name it: server, database and schema, never the password."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")

from anagrapheus.errors import UsageError
from anagrapheus.timeline.postgres_schema import PostgresPlace


@pytest.mark.parametrize(
    ("dsn", "server", "database"),
    [
        ("postgresql://agent@db.example:6543/runs", "db.example:6543", "runs"),
        ("postgresql://agent@db.example/runs", "db.example:5432", "runs"),
        ("postgresql://agent@db.example", "db.example:5432", "agent"),
        ("postgresql:///runs", "the local socket:5432", "runs"),
        ("", "the local socket:5432", "(default)"),
    ],
)
def test_a_place_names_server_and_database_with_their_defaults(dsn: str, server: str, database: str) -> None:
    place = PostgresPlace.of(dsn, "ledger")
    assert (place.server, place.database, place.schema) == (server, database, "ledger")
    assert str(place) == f"schema ledger of database {database} on {server}"


def test_a_malformed_dsn_is_refused_in_so_many_words() -> None:
    with pytest.raises(UsageError) as caught:
        PostgresPlace.of("host=x password=hunter2 port", "ledger")
    assert str(caught.value) == "the PostgreSQL DSN is malformed (not shown: it may hold a password)"
    assert caught.value.__cause__ is None
