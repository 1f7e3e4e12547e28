"""What a command reads: a recording file or a database's log, narrowed to some units, and user-named objects."""

from __future__ import annotations

import argparse
import itertools
import os
import select
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, overload

import sqlite_utils
from typing_extensions import override

from anagrapheus import importing
from anagrapheus.cli.report import BadInput, bad_input
from anagrapheus.errors import AnagrapheusError, StoreError
from anagrapheus.timeline import (
    Event,
    EventTypeRegistry,
    RecordingHeader,
    StoredEvent,
    UpcastRegistry,
    read_recording,
)
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES, stored_event
from anagrapheus.timeline.recording.lookup import read_indexed_units
from anagrapheus.timeline.recording.reader import open_recording, stream_recording
from anagrapheus.timeline.recording.seal import SealCheck
from anagrapheus.timeline.secrets import masked_dsn
from anagrapheus.timeline.stores.opening import is_postgres, log_kind, open_store
from anagrapheus.timeline.stores.ports import ScratchPin
from anagrapheus.timeline.stores.sqlite import read_only_uri

__all__ = [
    "STREAM_ABOVE_BYTES",
    "Source",
    "StreamedEvents",
    "add_registry_options",
    "event_types",
    "is_log",
    "load_function",
    "load_object",
    "load_typed",
    "open_source",
    "refuse_foreign_database",
    "unit_of",
    "upcasts_of",
]

# The tables every anagrapheus log has; a SQLite file without them is someone else's database.
_LOG_TABLES = frozenset({"events", "anagrapheus_migrations"})
_BUILTIN = "anagrapheus"
T = TypeVar("T")
PIPE_WAIT = 30.0
"""How long a command waits for a process to open a named pipe (FIFO) it was given for writing, in seconds."""


@dataclass(frozen=True, slots=True)
class Source:
    """Events read from a recording or a database, with a way to say where each one came from."""

    path: Path
    """The file, as named on the command line."""
    kind: Literal["recording", "database"]
    """What the file is."""
    header: RecordingHeader | None
    """The recording's header; None for a database."""
    events: Sequence[StoredEvent]
    """The events in log order, narrowed to the chosen units (a large recording's read again at each pass)."""
    scratch: tuple[ScratchPin, ...] = ()
    """A database's pins still in scratch: units open, never committed nor abandoned (for example after a crash)."""
    lines: Sequence[int] = ()
    """For a recording, the line each event sits on."""
    sealed: bool = False
    """Whether a recording holds a seal (its lines were checked against it, unless read with `seal="ignore"`)."""

    def line(self, index: int) -> int | None:
        """The line of event `index` in a recording; None for a database."""
        return self.lines[index] if self.lines else None

    def where(self, index: int) -> str:
        """Name event `index` for a person: `path:line`, or `path (seq N)` for a database."""
        line = self.line(index)
        return f"{self.path}:{line}" if line is not None else f"{self.path} (seq {self.events[index].seq})"

    def problem(self, index: int, message: str) -> BadInput:
        """A `BadInput` about event `index`, naming its line or seq."""
        line = self.line(index)
        return BadInput(message, path=str(self.path), line=line, seq=None if line else self.events[index].seq)

    def decoded(self, types: EventTypeRegistry, upcasts: UpcastRegistry | None) -> Iterator[tuple[int, Event]]:
        """Decode the built-in events (pins, abandons, divergences), upcast; a failure names the event."""
        for index, stored in enumerate(self.events):
            if stored.namespace != _BUILTIN:
                continue
            try:
                yield index, types.decode(stored, upcasts=upcasts)
            except AnagrapheusError as e:
                raise self.problem(index, str(e)) from e


def unit_of(event: StoredEvent) -> str | None:
    """The unit of work an event belongs to: a built-in event's `unit_id`, else its correlation id."""
    if event.namespace == _BUILTIN:
        unit = event.payload_json().get("unit_id")
        return unit if isinstance(unit, str) else None
    return event.correlation_id


def _tables(path: Path) -> set[str]:
    # A read-only connection of our own: looking must not migrate, create tables in, or switch the journal of a file.
    try:
        connection = sqlite3.connect(read_only_uri(path), uri=True)
        try:
            # Without side effects: no recursive_triggers switch, no installed plugin's connection hook.
            database = sqlite_utils.Database(connection, recursive_triggers=False, execute_plugins=False)
            return {name for name in database.table_names() if not name.startswith("sqlite_")}
        finally:
            connection.close()
    except sqlite3.Error as e:
        raise BadInput(f"cannot read the database ({e})", path=str(path)) from e
    except StoreError as e:
        raise BadInput(str(e).removeprefix(f"{path}: "), path=str(path)) from e


def is_log(path: Path) -> bool:
    """Whether a SQLite file holds an anagrapheus log (`BadInput` if it cannot be read as SQLite)."""
    return _tables(path) >= _LOG_TABLES


def refuse_foreign_database(name: str, *, role: str) -> None:
    """Refuse a SQLite file that holds other tables and no anagrapheus log: opening it as a store would add ours."""
    path = Path(name)
    if is_postgres(name) or not path.is_file() or log_kind(path) != "sqlite":
        return
    tables = _tables(path)
    if tables and not tables >= _LOG_TABLES:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise BadInput(
            f"a SQLite database of something else (tables {shown}), not an anagrapheus log; it is not used as the"
            f" {role} and is left untouched. Name an anagrapheus log, a new file or an empty one",
            path=name,
        )


def _read_pipe(path: Path, name: str) -> bytes:
    """Read a pipe (a FIFO, or `/dev/fd/N` from `<(...)`) once and whole, waiting `PIPE_WAIT` s at most for a writer."""
    # Not blocking: a FIFO no process writes to would otherwise hold the open for ever. An OSError is
    # reported by the caller, naming the file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        # Readable once a writer has written or come and gone; nothing at all while no writer opened it.
        if not poller.poll(int(PIPE_WAIT * 1000)):
            raise BadInput(
                f"a pipe no process opened for writing within {PIPE_WAIT:g} s; start the command that writes"
                " it first, or name the file itself",
                path=name,
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


STREAM_ABOVE_BYTES = 64 * 1024 * 1024
"""A recording larger than this (64 MiB) is streamed by `open_source(..., streamed=True)`: read again at each
pass over its events, a line at a time, rather than held whole (`show` and `check`)."""


class StreamedEvents(Sequence[StoredEvent]):
    """A recording's events, read again from the file at each pass: a command holds one line at a time."""

    def __init__(self, path: Path, count: int, seal: SealCheck) -> None:
        self._path = path
        self._count = count
        self._seal: SealCheck = seal

    @override
    def __iter__(self) -> Iterator[StoredEvent]:
        try:
            _, events = stream_recording(self._path, provenance="ignore", seal=self._seal)
            yield from events
        except AnagrapheusError as e:
            # Read whole once already, so only a file changed since is refused here.
            raise bad_input(e, path=str(self._path)) from e

    @override
    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> StoredEvent: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[StoredEvent]: ...
    @override
    def __getitem__(self, index: int | slice) -> StoredEvent | Sequence[StoredEvent]:
        # A pass to the event asked for: only a problem's report asks, once.
        if isinstance(index, slice):
            return tuple(self)[index]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return next(itertools.islice(self, index % self._count, None))


def _streamed(path: Path, seal: SealCheck) -> Source:
    """A large recording read once, a line at a time, as `read_recording` reads it; its events read again as asked."""
    where = str(path)
    header, sealed, entries = open_recording(path, where, MAX_LINE_BYTES, None, "ignore", seal=seal)
    count = 0
    for number, fields in entries:
        stored_event(fields, where=where, line=number)  # refused as a whole read refuses it, then let go
        count += 1
    events = StreamedEvents(path, count, seal)
    return Source(path, "recording", header, events, lines=range(2, count + 2), sealed=sealed is not None)


def open_source(name: str, *, units: Sequence[str] = (), seal: SealCheck = "verify", streamed: bool = False) -> Source:
    """Read a recording or a database's log, keeping only `units` when some are named.

    A sealed recording whose lines no longer match its seal is refused (`seal="verify"`), naming the
    first line that does not; the commands that only look at a file (`show`, `diff`, `view`) pass "ignore".
    Some units of a recording with an index beside it are read alone. With `streamed`, a recording larger
    than `STREAM_ABOVE_BYTES` is read a line at a time at each pass over its events, never held whole.

    What `name` holds is told as `open_store` tells it (`log_kind`); a pipe is read once, whole, as a
    recording (a sniff would eat its first bytes, and SQLite cannot read a pipe).
    """
    path = Path(name)
    piped: bytes | None = None
    try:
        if not is_postgres(name) and stat.S_ISFIFO(path.stat().st_mode):
            piped = _read_pipe(path, name)
        kind = log_kind(name, head=piped)
        if piped is not None and kind == "sqlite":
            raise BadInput("a SQLite database cannot be read through a pipe; name the database file", path=name)
    except OSError as e:
        raise BadInput(f"cannot read ({e.strerror or e})", path=name) from e
    try:
        # Some units of a recording with an index: only their lines are read.
        indexed = read_indexed_units(path, units) if kind == "recording" and units and not piped else None
        if indexed is not None:
            source = Source(path, "recording", indexed.header, indexed.events, lines=indexed.lines, sealed=True)
        elif kind == "recording" and streamed and not units and not piped and path.stat().st_size > STREAM_ABOVE_BYTES:
            source = _streamed(path, seal)
        elif kind == "recording":
            # Showing, diffing or checking a file replays nothing: what made it is reported, not refused.
            recording = read_recording(path, provenance="ignore", data=piped, seal=seal)
            lines = tuple(range(2, len(recording.events) + 2))
            sealed = recording.seal is not None
            source = Source(path, "recording", recording.header, recording.events, lines=lines, sealed=sealed)
        else:
            if kind == "sqlite" and not is_log(path):
                raise BadInput("a SQLite database, but not an anagrapheus event log", path=name)
            # Read-only: inspecting a log never writes to it, and works in a read-only checkout.
            with open_store(name, read_only=True) as store:
                scratch = tuple(pin for unit in store.open_units() for pin in store.scratch_list(unit.unit_id))
                source = Source(path, "database", None, tuple(store.read()), scratch)
    except OSError as e:
        raise BadInput(f"cannot read ({e.strerror or e})", path=name) from e
    except AnagrapheusError as e:
        # A URI is named without its password.
        raise bad_input(e, path=masked_dsn(name) if kind == "postgresql" else name) from e
    return _narrowed(source, units) if units else source


def _narrowed(source: Source, units: Sequence[str]) -> Source:
    wanted = set(units)
    kept: list[int] = []
    for index, event in enumerate(source.events):
        try:
            unit = unit_of(event)
        except AnagrapheusError as e:
            raise source.problem(index, str(e)) from e
        if unit in wanted:
            kept.append(index)
    found = {unit_of(source.events[index]) for index in kept} | {pin.unit_id for pin in source.scratch}
    missing = [unit for unit in units if unit not in found]
    if missing:
        raise BadInput(f"no unit {', '.join(missing)} in this {source.kind}", path=str(source.path))
    return Source(
        source.path,
        source.kind,
        source.header,
        tuple(source.events[index] for index in kept),
        tuple(pin for pin in source.scratch if pin.unit_id in wanted),
        tuple(source.lines[index] for index in kept) if source.lines else (),
        source.sealed,
    )


def load_object(spec: str) -> object:
    """Import `MODULE:ATTR` as the pytest plugin does (`importing.load_object`), from the working directory too."""
    _project_on_path()
    return importing.load_object(spec)


def load_typed(spec: str, kind: type[T], *, what: str, make: bool = True) -> T:
    """Import `MODULE:ATTR` naming a `kind` or a factory of one (`importing.load_typed`), from the working directory."""
    _project_on_path()
    return importing.load_typed(spec, kind, what=what, make=make)


def load_function(spec: str, *, what: str) -> Callable[..., object]:
    """Import `MODULE:ATTR` naming a function (`importing.load_function`), from the working directory too."""
    _project_on_path()
    return importing.load_function(spec, what=what)


def _project_on_path() -> None:
    # Like `python -m`, a command run from a project finds the project's own modules.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """Add `--events` and `--upcasts`, for sources holding the application's own events."""
    parser.add_argument("--events", metavar="MODULE:NAME", help="the application's EventTypeRegistry (or factory)")
    parser.add_argument("--upcasts", metavar="MODULE:NAME", help="the application's UpcastRegistry (or factory)")


def event_types(spec: str | None) -> EventTypeRegistry:
    """The built-in event types, plus an application's registry named as `MODULE:NAME` (a registry or a factory)."""
    return EventTypeRegistry() if spec is None else load_typed(spec, EventTypeRegistry, what="an EventTypeRegistry")


def upcasts_of(spec: str | None) -> UpcastRegistry | None:
    """An application's upcasts named as `MODULE:NAME` (a registry or a factory), or None."""
    return None if spec is None else load_typed(spec, UpcastRegistry, what="an UpcastRegistry")
