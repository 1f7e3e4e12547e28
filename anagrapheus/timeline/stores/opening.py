"""Where a log is: a `postgresql://` URI, a SQLite file or a recording, told apart one way for every caller.

The scheme decides first (a URI is never a file name); a file is then told by its first bytes,
SQLite's header or not, whatever its name ends with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from anagrapheus.errors import UsageError
from anagrapheus.timeline.events import StoredEvent
from anagrapheus.timeline.recording import read_recording
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore

if TYPE_CHECKING:
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

__all__ = ["POSTGRES_SCHEMES", "SQLITE_MAGIC", "LogKind", "is_postgres", "log_kind", "open_store", "read_events"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""The URI schemes opened as PostgreSQL; anything else is a file path."""
SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""

LogKind = Literal["postgresql", "sqlite", "recording"]
"""What an address holds: a PostgreSQL schema, a SQLite store's file, or a recording (anything else in a file)."""


def is_postgres(address: str | os.PathLike[str]) -> bool:
    """Whether `address` is a PostgreSQL URI (`postgresql://` or `postgres://`)."""
    return isinstance(address, str) and address.startswith(POSTGRES_SCHEMES)


def log_kind(address: str | os.PathLike[str], *, head: bytes | None = None) -> LogKind:
    """What `address` holds: a PostgreSQL URI by its scheme, else a file by its first bytes (`OSError` unread).

    `head` is the file's first bytes already read (a pipe can be read only once).
    """
    if is_postgres(address):
        return "postgresql"
    if head is None:
        with Path(address).open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    return "sqlite" if head[: len(SQLITE_MAGIC)] == SQLITE_MAGIC else "recording"


def open_store(
    address: str | os.PathLike[str], *, schema: str = "anagrapheus", read_only: bool = False
) -> SQLiteEventStore | PostgresEventStore:
    """Open the store at `address`: a `postgresql://` URI (needs the `postgres` extra), else a SQLite file.

    A SQLite file that does not exist yet is created, unless `read_only`. A PostgreSQL log has no
    read-only opening: it is read from a SQLite copy (`anagrapheus copy`).
    """
    if not is_postgres(address):
        return SQLiteEventStore(address, read_only=read_only)
    if read_only:
        raise UsageError(
            "a PostgreSQL log is read from a SQLite copy: run `anagrapheus copy URI FILE` and name FILE instead"
        )
    try:
        from anagrapheus.timeline.stores.postgres import PostgresEventStore
    except ImportError as e:
        raise UsageError("a PostgreSQL store needs psycopg: pip install 'anagrapheus[postgres]'") from e
    return PostgresEventStore(str(address), schema=schema)


def read_events(address: str | os.PathLike[str]) -> list[StoredEvent]:
    """The events of a recording or of a SQLite log (opened read-only), in log order, as stored."""
    try:
        kind = log_kind(address)
    except OSError as e:
        raise UsageError(f"cannot read {address}: {e.strerror or e}") from e
    if kind == "recording":
        return list(read_recording(address).events)
    with open_store(address, read_only=True) as store:
        return list(store.read())
