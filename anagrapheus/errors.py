"""The error root and every public error of anagrapheus."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from typing_extensions import override

if TYPE_CHECKING:
    # Divergence's module imports nothing of the package: no errors -> replay -> pins cycle, even for the checker.
    from anagrapheus.timeline.divergence import Divergence
    from anagrapheus.timeline.json_value import JSONValue

__all__ = [
    "AmbiguousPin",
    "AnagrapheusError",
    "CallerKeyMissing",
    "CanonicalError",
    "CorruptEvent",
    "EventTypeError",
    "FutureSchemaVersion",
    "HiddenCallerField",
    "ManifestError",
    "PartialPin",
    "PinMiss",
    "PinResultError",
    "PinnedFailure",
    "ProvenanceMismatch",
    "RecordingConflict",
    "RecordingDrifted",
    "RecordingError",
    "RecordingExpired",
    "RecordingMissing",
    "RemoteConnectionRefused",
    "ResolverNotPicklable",
    "SchemaTooNew",
    "SealBroken",
    "SecretInRecording",
    "SeqConflict",
    "StoreError",
    "StoreIntegrityError",
    "StoreUnavailable",
    "UndeclaredType",
    "UnitBusy",
    "UnitClosed",
    "UnkeyedCaller",
    "UnknownEventType",
    "UnresolvedName",
    "UnusedPins",
    "UpcastGap",
    "UsageError",
]


class AnagrapheusError(Exception):
    """Root of every error raised by anagrapheus.

    Every one pickles with its message and attributes (so it crosses a process pool), whatever its
    `__init__` takes: it is rebuilt from its `args` and `__dict__`, without calling `__init__` again.
    """

    @override
    def __reduce__(self) -> tuple[object, ...]:
        """Rebuild as this class with these args and attributes (the default calls `__init__(*args)`, which fails)."""
        return (_rebuilt, (type(self), self.args), dict(self.__dict__))


def _rebuilt(cls: type[AnagrapheusError], args: tuple[object, ...]) -> AnagrapheusError:
    """An error of `cls` holding `args`, made without its `__init__`; unpickling then restores its attributes."""
    return cls.__new__(cls, *args)


class UsageError(AnagrapheusError):
    """The library was used in a way it does not support (a developer's mistake)."""


class UnresolvedName(UsageError):
    """A `MODULE:ATTR` a user named (an argument, a marker's policy) does not import or is not what it must be."""

    def __init__(self, spec: str, message: str) -> None:
        super().__init__(f"{spec}: {message}")
        self.spec = spec
        """The name as given."""
        self.message = message
        """What is wrong with it, without the name."""


class UnitClosed(UsageError):
    """A unit of work is committed or abandoned (or being so), so it takes no more draws."""

    def __init__(self, unit_id: str, *, state: str, raw: str | None = None) -> None:
        if raw is None:
            advice = "nothing was drawn; start a new PinLedger for more work"
        else:
            advice = (
                "its effect had already run (another ledger on the same unit id closed it meanwhile): the result is"
                " not pinned, and is kept on this error as .raw_text"
            )
        super().__init__(f"unit {unit_id} is {state}; {advice}")
        self.unit_id = unit_id
        """The unit refused."""
        self.state = state
        """`committed`, `abandoned`, or `committing` / `abandoning` while that runs."""
        self.raw_text = raw
        """A drawn result (canonical JSON text) that could not be pinned, if the effect ran first; else None."""


class ResolverNotPicklable(UsageError, TypeError):
    """A resolver was pickled (or deep-copied): it answers within the process that made it, so it never crosses one."""

    def __init__(self, resolver: str) -> None:
        super().__init__(
            f"a {resolver} cannot be pickled: it answers within the process that made it (it holds locks, and a"
            " ledger an open store connection). Hand the other process the recording's or the log's path instead,"
            " and build its resolver there: ReplayPins.from_recording(path) to replay, PinLedger(open_store(path),"
            " ...) to draw live"
        )
        self.resolver = resolver
        """The class of the resolver that was refused."""


class InexactReplay(UsageError):
    """A run is replaying a pattern anagrapheus cannot replay byte for byte, and says so rather than differ quietly."""

    def __init__(self, pattern: str, *, instead: str) -> None:
        super().__init__(f"{pattern} cannot be replayed exactly; {instead}")
        self.pattern = pattern
        """What the run does that cannot replay exactly."""
        self.instead = instead
        """What to do instead."""


class UnkeyedCaller(UsageError):
    """A tool call's caller (the run's deps) cannot join its key, so it could be answered with another caller's data."""

    def __init__(self, tool: str, *, deps_type: str, reason: str) -> None:
        super().__init__(
            f"tool {tool!r} was called with deps of type {deps_type}, which cannot join its key ({reason}). What"
            " identifies the caller is part of every tool call's key, so that no caller is answered with another's"
            " data: name it with Pinning(caller=lambda deps: deps.user_id), or key no caller with caller=None"
            " (every caller then shares one answer to the same call in a unit of work)"
        )
        self.tool = tool
        """The tool whose call was refused."""
        self.deps_type = deps_type
        """The type of the run's deps."""
        self.reason = reason
        """Why the deps cannot be keyed."""


class HiddenCallerField(UnkeyedCaller):
    """A field of the caller's identity that its dump hides (excluded, private) holds nothing a key can see."""

    def __init__(self, tool: str, *, deps_type: str, field: str, how: str, reason: str) -> None:
        super().__init__(tool, deps_type=deps_type, reason=f"{field}: {reason}")
        # The sentence says which field and why, then what to declare: the base's advice, reworded for the field.
        self.args = (
            f"tool {tool!r} was called with deps of type {deps_type} whose field {field} is {how}, and it cannot"
            f" join the key ({reason}). Two callers differing only there would be answered with each other's data,"
            " so the call is refused: declare what identifies the caller with Pinning(caller=lambda deps:"
            " deps.user_id) (or pinned_tool(..., caller=...)), or key no caller with caller=None",
        )
        self.field = field
        """The path of the hidden field in the deps (`$.client`, `$.account._token`)."""
        self.how = how
        """How the dump hides it (`Field(exclude=True)`, a private attribute, ...)."""


class CallerKeyMissing(UsageError):
    """A unit keys its callers with the key in an environment variable that this process does not set."""

    def __init__(self, variable: str) -> None:
        super().__init__(
            f"this unit keys its callers with the key in {variable}, which is not set: set it to the key the unit was"
            " recorded with (anagrapheus never writes it anywhere), or record the unit again without it"
        )
        self.variable = variable
        """The environment variable that holds the key."""


class CanonicalError(AnagrapheusError, TypeError):
    """A value cannot be written as canonical JSON."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{message} at {path}")
        self.reason = message
        """What is wrong with the value, without where."""
        self.path = path
        """Where in the value the offending item sits, as `$.a[0].b`."""


class EventTypeError(AnagrapheusError):
    """An event type is unknown, malformed or registered twice."""


class _OfEventType(EventTypeError):
    """An error about one event type of the log, named by its namespace and type."""

    def __init__(self, message: str, namespace: str, event_type: str) -> None:
        super().__init__(message)
        self.namespace = namespace
        """The event type's namespace."""
        self.event_type = event_type
        """The event type's name within its namespace."""


def _at_seq(seq: int | None) -> str:
    """Where a stored event sits, said after its message: ` (seq N)`, or nothing for an event with no seq."""
    return f" (seq {seq})" if seq is not None else ""


class UnknownEventType(_OfEventType):
    """A stored event names a (namespace, type) that no registry entry knows."""

    def __init__(self, namespace: str, event_type: str, *, seq: int | None = None) -> None:
        super().__init__(f"unknown event type {namespace}:{event_type}{_at_seq(seq)}", namespace, event_type)
        self.seq = seq
        """The stored event's seq, where it has one."""


class FutureSchemaVersion(_OfEventType):
    """A stored event has a schema version newer than the code knows."""

    def __init__(self, namespace: str, event_type: str, *, version: int, known: int, seq: int | None) -> None:
        newer = f"has schema version {version}, newer than the registered version {known}{_at_seq(seq)}"
        super().__init__(
            f"event {namespace}:{event_type} {newer}; upgrade the code that reads it", namespace, event_type
        )
        self.version = version
        """The stored payload's version."""
        self.known = known
        """The newest version the registry knows."""
        self.seq = seq
        """The stored event's seq, where it has one."""


class UpcastGap(_OfEventType):
    """No upcast is registered for one step of an old payload's way to the current version."""

    def __init__(self, namespace: str, event_type: str, *, missing_from: int, target: int) -> None:
        step = f"v{missing_from} -> v{missing_from + 1} (needed to reach v{target})"
        super().__init__(f"no upcast registered for {namespace}:{event_type} {step}", namespace, event_type)
        self.missing_from = missing_from
        """The version no upcast leads on from."""
        self.target = target
        """The version the payload was on its way to."""


class StoreError(AnagrapheusError):
    """The event store failed; the sqlite3 (or other backend) error is the cause."""

    drawn: str | None = None
    """A result whose effect had run when the store failed to write it (canonical JSON text), else None.

    Set by `PinLedger` on the error its `resolve` raises: nothing paid for is lost. The ledger also
    holds the result and writes it on its next `resolve` or `commit` (asking for the key again answers
    from memory); if the ledger is gone, this is the only copy.
    """


class StoreUnavailable(StoreError):
    """The store did not answer within its bound, or lost the connection: nothing was decided, so try again later.

    Raised by `PostgresEventStore` when a server stalls, a network partition hides it, a lock or statement
    outlives its timeout, the pool has no connection to lend in time, or a session lost (or a deadlock or
    serialization failure) outlived the store's own retry (see the how-to on PostgreSQL); and by
    `SQLiteEventStore` when the database (or another thread's transaction on it) stays locked past its
    `busy_timeout`, or the disk has no room for a write.

    One case is not "nothing was decided": a PostgreSQL commit (or abandon) whose connection was lost after its
    `COMMIT` was sent says so in its message ("so it may be committed already"); the unit's outcome tells, and
    committing again is safe (refused with `UnitClosed` where it took effect).
    """


class StoreIntegrityError(StoreError):
    """A write breached a constraint of the store's schema (unique, check, foreign key, not null): not retried.

    The store's own writes never do on a schema it migrated: it points at a bug, or at a schema changed by hand.
    """


class SeqConflict(StoreError):
    """An append expected a last seq that the log has moved past."""

    def __init__(self, *, expected: int, actual: int) -> None:
        super().__init__(f"expected the log to end at seq {expected}, but it ends at seq {actual}")
        self.expected = expected
        self.actual = actual


class UnitBusy(StoreError):
    """Another worker holds the unit of work; refused before any effect of this one runs."""

    def __init__(self, unit_id: str, *, waited: float) -> None:
        super().__init__(
            f"unit {unit_id} is held by another worker (waited {waited:g} s for it); one worker draws in a unit at a"
            " time: resume it once that worker has settled it or died (a SQLite lease left on another host, by a"
            " container that restarted under a new host name say, is freed with `anagrapheus unlock DB --unit ID`"
            " or SQLiteEventStore.break_lease)"
        )
        self.unit_id = unit_id
        self.waited = waited


class SchemaTooNew(StoreError):
    """The database was migrated by a newer anagrapheus than this one."""


class CorruptEvent(StoreError):
    """A stored event's row cannot be decoded."""

    def __init__(self, message: str, *, seq: int | None, key: str | None = None) -> None:
        where = f"at seq {seq}" if seq is not None else f"in pin {key}" if key is not None else "in a pin"
        super().__init__(f"corrupt event {where}: {message}")
        self.seq = seq
        """The event's position in its log, when known."""
        self.key = key
        """The key of the pin the event holds, when its position is not known (a pin read back by key)."""


class UndeclaredType(CorruptEvent):
    """A pin tags a value with a class that what answered it never declares: a recording does not choose a class."""

    def __init__(self, named: str, *, source: str, key: str | None = None) -> None:
        super().__init__(
            f"a value is tagged as type {named!r}, which {source} does not declare, so nothing is built from it:"
            " the recording was edited, or the tool's return annotation changed since it was recorded (record"
            " it again)",
            seq=None,
            key=key,
        )
        self.named = named
        """The `module:qualname` the tag names."""
        self.source = source
        """What declares the types the value may be rebuilt as (`tool 'survey'`, `the provider details`)."""


class PinResultError(AnagrapheusError):
    """An effect returned a result that cannot be pinned (not JSON-shaped)."""


class PartialPin(AnagrapheusError):
    """A pin holds a response whose stream stopped before completing, and the run asked for more than it holds."""

    def __init__(self, key: str, *, state: str) -> None:
        super().__init__(
            f"the pin {key} holds a response whose stream stopped before completing (state {state!r}): the consumer"
            " stopped early or the stream failed when it was drawn, and this run reads past where it stopped."
            " Under replay the run has left its recording; in a live unit, abandon() it to draw the call again"
        )
        self.key = key
        self.state = state


class PinnedFailure(AnagrapheusError):
    """A draw that failed was pinned, and its exception cannot be rebuilt as it was: it is raised as this instead."""

    def __init__(self, record: JSONValue, *, type_name: str, message: str) -> None:
        super().__init__(f"the pinned draw failed with {type_name}: {message}")
        self.record = record
        """The pinned description of the failure, as the resolver's failure codec wrote it."""
        self.type_name = type_name
        """The original exception's class, `module:qualname`."""
        self.original_message = message
        """The original exception's message."""


class PinMiss(AnagrapheusError):
    """Strict replay was asked for a key the recording has no pin for."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.describe())
        self.divergence = divergence
        """Where and how the run left the recording."""


class AmbiguousPin(AnagrapheusError):
    """A key was pinned by several units with different results, so the whole log cannot answer it."""

    def __init__(self, key: str, *, unit_ids: list[str]) -> None:
        super().__init__(
            f"key {key} was pinned with different results by units {', '.join(unit_ids)};"
            " replay one unit (unit_id=...) to answer it exactly"
        )
        self.key = key
        self.unit_ids = unit_ids


class RecordingError(AnagrapheusError):
    """A recording file is malformed, truncated, foreign or of an unknown format."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class RecordingExpired(RecordingError):
    """A recording holds units recorded longer ago than a test or a check allows (`max_age`)."""

    def __init__(self, path: str, *, max_age: timedelta, units: Mapping[str, str], rerecord: str | None = None) -> None:
        listed = ", ".join(f"{unit} recorded {when}" for unit, when in units.items())
        again = f"; record it again with `{rerecord}`" if rerecord else ""
        super().__init__(f"older than max_age ({max_age.days} days): {listed}{again}", path=path)
        self.max_age = max_age
        self.units = dict(units)
        """Each unit past `max_age`, with when it was recorded."""


class ProvenanceMismatch(RecordingError):
    """A recording was made under a key scheme, call policy or (strictly) versions other than the ones replaying it."""

    def __init__(self, message: str, *, path: str, field: str, recorded: object, current: object) -> None:
        super().__init__(message, path=path, line=1)
        self.field = field
        """The provenance field that differs (`key_scheme`, `call_policy`, `pydantic_ai`, ...)."""
        self.recorded = recorded
        """What the recording's header says."""
        self.current = current
        """What this process would have written."""


class SealBroken(RecordingError):
    """A sealed recording's lines no longer match its seal: one was edited, deleted, added or moved by hand."""

    def __init__(self, message: str, *, path: str, line: int | None, unit: str | None, change: str) -> None:
        super().__init__(
            f"{message}. If the change is intended, accept it with `anagrapheus reseal {path}` (it lists what it"
            " accepts), or record the run again",
            path=path,
            line=line,
        )
        self.unit = unit
        """The unit of work whose seal no longer holds (None for events outside any unit)."""
        self.change = change
        """What was found: `edited`, `deleted` or `added` (a line, or a whole unit)."""


class SecretInRecording(AnagrapheusError):
    """A recording about to be written holds a credential-shaped string; the error never holds the string."""

    def __init__(self, *, path: str, seq: int | None, json_path: str, rule: str) -> None:
        where = "the header" if seq is None else f"the event at seq {seq}"
        super().__init__(
            f"refusing to write {path}: {where} holds a value matching secret rule {rule!r} at {json_path}."
            " Keep the credential out of what the run pins, or pass redact=SecretScanner(...) to write placeholders"
            " instead (a replay then sees the placeholders); see the how-to 'Commit recordings safely'"
        )
        self.path = path
        """The recording that was not written."""
        self.seq = seq
        """The seq of the event holding the value; None for the header."""
        self.json_path = json_path
        """Where in that line the value sits, as `$.payload.raw.parts[0].content`."""
        self.rule = rule
        """The name of the rule that matched."""


class RecordingConflict(UsageError):
    """Two tests of one session would write one recording: the second is refused before it draws anything."""

    def __init__(self, path: str, *, first: str, second: str) -> None:
        super().__init__(
            f"{second} would write {path}, which {first} records to in this session: the last to finish would"
            " replace the other's pins. Give each test its own path (keep {name} in the path template, or set"
            " path= on one of them)"
        )
        self.path = path
        """The recording both would write."""
        self.first = first
        """The test that claimed it first."""
        self.second = second
        """The test refused."""


class RecordingMissing(AnagrapheusError):
    """A run is to be replayed from a recording that does not exist yet."""

    def __init__(self, path: str, *, command: str) -> None:
        super().__init__(f"no recording at {path}; create it with: {command}")
        self.path = path
        self.command = command
        """The command that records it."""


class UnusedPins(AnagrapheusError):
    """A replay finished without asking for some of its recording's pins: the recording is stale."""

    def __init__(self, path: str, *, unused: dict[str, str]) -> None:
        kinds = sorted(set(unused.values()))
        super().__init__(
            f"{len(unused)} pin(s) in {path} were never asked for ({', '.join(kinds)}): the recording is stale"
        )
        self.path = path
        self.unused = unused
        """Each unused key, with its kind."""


class RecordingDrifted(AnagrapheusError):
    """Asked live again, the provider answered some of a recording's model calls otherwise; the file was left as is."""

    def __init__(self, path: str, *, calls: list[str]) -> None:
        listed = "\n  ".join(calls)
        super().__init__(f"the provider now answers {len(calls)} model call(s) of {path} otherwise:\n  {listed}")
        self.path = path
        self.calls = calls
        """Each call that drifted, described (`model_call #2: drifted: result.parts[0].content: ...`)."""


class RemoteConnectionRefused(AnagrapheusError):
    """A connection to a host other than loopback was attempted where only loopback is allowed."""

    def __init__(self, address: object) -> None:
        super().__init__(f"refused a connection to {address!r}: a replay reaches no host but loopback")
        self.address = address


class ManifestError(AnagrapheusError):
    """A determinism manifest (`[tool.anagrapheus.entropy]` or `nondeterminism.toml`) cannot be used."""

    def __init__(self, message: str, *, path: str, key: str | None = None) -> None:
        where = path if key is None else f"{path}: {key}"
        super().__init__(f"{where}: {message}")
        self.message = message
        self.path = path
        self.key = key
        """The dotted key at fault (`clock.step`), or None when the file as a whole is."""
