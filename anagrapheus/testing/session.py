"""RecordingSession: one recording file opened in a mode, pinning every agent run while it is active.

The pytest plugin is a thin shell over this: one session per marked test. It knows nothing of pytest.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Literal, get_args

from anagrapheus.errors import (
    PinMiss,
    RecordingDrifted,
    RecordingError,
    RecordingExpired,
    RecordingMissing,
    UnusedPins,
    UsageError,
)
from anagrapheus.provider import CallPolicy, Pinning
from anagrapheus.provider.callers import CALLER_SALT
from anagrapheus.provider.every_run import every_agent_run, refuse_model_requests
from anagrapheus.provider.provenance import STAMPING
from anagrapheus.provider.run_clock import RUN_PLACE
from anagrapheus.provider.usage import PinnedUsage, usage_by_unit
from anagrapheus.testing.drift import DriftPins, drifted_calls
from anagrapheus.testing.miss import write_miss
from anagrapheus.testing.network import loopback_only
from anagrapheus.timeline import (
    Divergence,
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    PinPromoted,
    RecordingHeader,
    ReplayPins,
    Resolver,
    SecretScanner,
    SeededRun,
    SQLiteEventStore,
    write_recording,
)
from anagrapheus.timeline.ages import expired
from anagrapheus.timeline.events import RunInputs, events_of
from anagrapheus.timeline.recording import read_recording

__all__ = ["MODES", "Mode", "RecordingSession"]

Mode = Literal["replay", "record", "rewrite", "live", "drift"]
"""`replay` answers only from the recording (a miss fails); `record` answers what matches and draws what
diverged, then rewrites the recording with the pins used; `rewrite` draws everything anew; `live` reads
and writes no recording; `drift` draws every model call live, the world still from the recording, fails
where the provider now answers otherwise, and writes nothing."""

MODES: tuple[Mode, ...] = get_args(Mode)


class RecordingSession:
    """One recording, opened in a mode: a resolver and the `Pinning` capability over it, then `finish()`.

    While `active()`, every agent run in the process is pinned; under `replay` model requests and
    connections to hosts other than loopback are refused too. `finish()` is for a run that passed:
    under `replay` it fails on pins never asked for, under `record` and `rewrite` it writes the file.
    The pins are drawn into a scratch database; the recording's unit id, event ids and times are
    seeded from `name`, so re-recording an unchanged run writes the same bytes. The recording is
    stamped with `policy`'s identity, and read back only under the same policy. `redact` writes what its
    rules match as placeholders instead of refusing the file. With `max_age`, replaying a recording holding a
    unit recorded longer ago raises `RecordingExpired` before the run (a unit of unknown date is not judged).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str,
        rerecord: str,
        mode: Mode = "replay",
        policy: CallPolicy | None = None,
        allow_unused: bool = False,
        redact: SecretScanner | None = None,
        max_age: timedelta | None = None,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.path = Path(path)
        """The recording file."""
        self.mode: Mode = mode
        """How the session treats its recording."""
        self.name = name
        """What run the recording holds (a test's node id)."""
        self.rerecord = rerecord
        """The command that records it again."""
        self.allow_unused = allow_unused
        """Whether a replay may leave recorded pins unasked."""
        self.redact = redact
        """The rules whose matches are written as placeholders (`write_recording(redact=)`); None refuses them."""
        self.replayed: PinnedUsage | None = None
        """Under `replay`, once the run passed: the model calls the recording answered, their tokens and price."""
        if mode in ("record", "rewrite"):
            # Refused before the run draws anything: a folder that cannot be made would cost every draw.
            _check_folder(self.path, shown=self.shown_path)
        self._policy = policy
        self._types = EventTypeRegistry()
        self._scratch = tempfile.TemporaryDirectory(prefix="anagrapheus-")
        self._store = SQLiteEventStore(Path(self._scratch.name) / "pins.db", synchronous="NORMAL")
        # The unit's id is in every pin's payload, so it is drawn from the name, like the recording's ids.
        unit_id = SeededRun(f"anagrapheus-unit:{name}").new_id()
        self._ledger: PinLedger | None = None
        self._replay: ReplayPins | None = None
        self.missing = mode in ("replay", "drift") and not self.path.exists()
        """Whether replay was asked of a recording that does not exist."""
        # A recording that holds its runs' inputs (a test exported from a production run asks them again) keeps
        # them when it is recorded again; any other keeps its pins only, as it always has. Canonical JSON spells it so.
        self._with_inputs = mode in ("record", "rewrite") and _holds_inputs(self.path)
        try:
            resolver = self._open(unit_id)
            if max_age is not None and mode in ("replay", "drift") and self.path.exists():
                self._refuse_expired(max_age)
        except BaseException:
            # A recording that cannot be read (its RecordingError names the line) leaves no scratch behind.
            self._store.close()
            self._scratch.cleanup()
            raise
        self.resolver: Resolver = resolver
        """Answers each pinned call: the recording (`replay`, `record`) or a live ledger."""
        self.capability: Pinning = Pinning(resolver, policy=policy)
        """The `Pinning` capability over `resolver`: what every agent run carries while the session is active."""

    def _open(self, unit_id: str) -> Resolver:
        if self.mode == "drift":
            self._ledger = PinLedger(self._store, self._types, unit_id=unit_id)
            self._replay = (
                ReplayPins.from_recording(self.path, self._types, call_policy=self._policy, stamping=STAMPING)
                if self.path.exists()
                else ReplayPins.from_events((), self._types)
            )
            return DriftPins(self._replay, self._ledger)
        if self.mode not in ("replay", "record"):
            self._ledger = PinLedger(self._store, self._types, unit_id=unit_id)
            return self._ledger
        if self.mode == "record":
            self._ledger = PinLedger(self._store, self._types, unit_id=unit_id)
        on_miss = "strict" if self.mode == "replay" else "record"
        if self.path.exists():
            # Recording again is how a recording made under another policy or key scheme is brought up to date:
            # its pins that still match are reused, the rest drawn, and the file is stamped anew.
            self._replay = ReplayPins.from_recording(
                self.path,
                self._types,
                on_miss=on_miss,
                into=self._ledger,
                call_policy=self._policy,
                provenance="ignore" if self.mode == "record" else "warn",
                stamping=STAMPING,
            )
        else:
            self._replay = ReplayPins.from_events((), self._types, on_miss=on_miss, into=self._ledger)
        return self._replay

    def _refuse_expired(self, max_age: timedelta) -> None:
        """Raise `RecordingExpired` when a unit of the recording was recorded longer ago than `max_age`."""
        old = expired(read_recording(self.path, provenance="ignore").ages(), max_age)
        if old:
            raise RecordingExpired(self.shown_path, max_age=max_age, units=old, rerecord=self.rerecord)

    @property
    def shown_path(self) -> str:
        """The recording's path as a reader finds it: relative to the working directory when it lies inside."""
        try:
            return str(self.path.relative_to(Path.cwd()))
        except ValueError:
            return str(self.path)

    @property
    def divergence(self) -> Divergence | None:
        """Where the run first left its recording, if it did."""
        return None if self._replay is None else self._replay.divergence

    def unused(self) -> dict[str, str]:
        """Recorded keys the run has not asked for, each with its kind; a run's place among its unit's runs aside.

        A place is pinned under the run's inputs only to tell runs started at once apart: one not asked for says
        nothing stale (its run was asked as another caller, say, and placed where it started), and a run that was
        not asked at all leaves its other pins unused.
        """
        if self._replay is None:
            return {}
        # A place, and a unit's caller salt, are read as the run's inputs say: neither is stale when unasked.
        return {key: kind for key, kind in self._replay.unused().items() if kind not in (RUN_PLACE, CALLER_SALT)}

    def require(self) -> None:
        """Raise `RecordingMissing`, with the command that creates it, if replay has no recording to read."""
        if self.missing:
            raise RecordingMissing(self.shown_path, command=self.rerecord)

    @contextmanager
    def active(self) -> Generator[None]:
        """Pin every agent run while open; under `replay`, refuse model requests and non-loopback sockets too."""
        with ExitStack() as stack:
            stack.enter_context(every_agent_run(self.capability))
            if self.mode == "replay":
                stack.enter_context(refuse_model_requests())
                stack.enter_context(loopback_only())
            yield

    def finish(self) -> Path | None:
        """Conclude a run that passed: check for unused pins (`replay`), or write the recording and return its path."""
        if self.mode == "replay":
            if self.divergence is not None:
                # The application caught the miss and carried on: the run still left its recording.
                raise PinMiss(self.divergence)
            unused = self.unused()
            if unused and not self.allow_unused:
                raise UnusedPins(self.shown_path, unused=unused)
            self.replayed = PinnedUsage()
            if self.path.exists():
                # Opened and checked above; read again for the answers, which the replay does not hand out.
                events = read_recording(self.path, provenance="ignore").events
                for usage in usage_by_unit(events, skip=unused).values():
                    self.replayed.add(usage)
            return None
        assert self._ledger is not None
        if self.mode == "drift":
            assert self._replay is not None
            calls = drifted_calls(self._replay, self._ledger)
            self._ledger.abandon(reason="drift: the recording is compared, never written")
            drifted = [call.describe() for call in calls if call.status != "same"]
            if drifted:
                raise RecordingDrifted(self.shown_path, calls=drifted)
            return None
        if self.mode == "live":
            self._ledger.abandon(reason="live run: nothing is recorded")
            return None
        kept = (PinPromoted, RunInputs) if self._with_inputs else (PinPromoted,)
        pins = events_of(self._ledger.commit(), *kept)
        # Renumbered into a fresh log with a clock and ids seeded from the name, so that re-recording an
        # unchanged run writes the same bytes whatever else the first log held (a ReplayDiverged marker).
        seeded = SeededRun(f"anagrapheus-recording:{self.name}")
        with SQLiteEventStore(
            Path(self._scratch.name) / "recording.db",
            clock=seeded.now,
            new_event_id=seeded.new_id,
            synchronous="NORMAL",
        ) as log:
            events = log.append(
                [
                    PendingEvent(
                        namespace=pin.namespace,
                        type=pin.type,
                        schema_version=pin.schema_version,
                        payload=pin.payload,
                        correlation_id=pin.correlation_id,
                    )
                    for pin in pins
                ]
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _folder_error(self.path, e.strerror or str(e), shown=self.shown_path) from e
        header = RecordingHeader(
            description=f"the pinned model and tool calls of {self.name}",
            recorded_with="the anagrapheus pytest plugin, against the models the test reaches",
            rerecord=self.rerecord,
        )
        return write_recording(
            self.path, events, header=header, call_policy=self._policy, redact=self.redact, stamp=STAMPING
        )

    def report(self) -> str | None:
        """A short account of where the run left its recording and how to record it again; None if it did not."""
        divergence = self.divergence
        if divergence is None:
            return None
        lines = [
            f"{self.name} left its recording",
            f"  recording: {self.shown_path}",
            f"  missed:    a {divergence.kind} after {divergence.after_hits} hit(s)",
        ]
        if divergence.moved:
            lines.append(f"  moved:     {', '.join(divergence.moved)}")
        elif divergence.nearest_key is None:
            lines.append("  moved:     the recording holds no call of this kind")
        else:
            lines.append("  moved:     nothing the fingerprint covers (the call policy keys more than it shows)")
        lines.append(f"  re-record: {self.rerecord}")
        miss = self._write_miss(divergence)
        if miss is not None:
            lines.append(f"  see it:    anagrapheus view --miss {miss}")
        return "\n".join(lines)

    def _write_miss(self, divergence: Divergence) -> str | None:
        """Keep the miss beside the recording (`<recording>.miss.json`), for `anagrapheus view --miss`."""
        target = self.path.with_name(self.path.name + ".miss.json")
        try:
            write_miss(divergence, target, recording=self.path)
        except OSError:
            return None  # a read-only checkout: the account above still says where the run left
        try:
            return str(target.relative_to(Path.cwd()))
        except ValueError:
            return str(target)

    def close(self) -> None:
        """Drop whatever the run drew without finishing, and remove the scratch database."""
        if self._ledger is not None and self._ledger.state == "open":
            self._ledger.abandon(reason="the run did not finish")
        self._store.close()
        self._scratch.cleanup()


def _folder_error(path: Path, why: str, *, shown: str) -> RecordingError:
    """The error of a recording whose folder cannot be made: what, where, and what to do."""
    return RecordingError(
        f"its folder {path.parent} cannot be created or written ({why}): make the folder writable,"
        " or record to a path in a writable folder",
        path=shown,
    )


def _check_folder(path: Path, *, shown: str) -> None:
    """Raise the typed error now if the recording's folder cannot be made or written, before any draw is paid for."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise _folder_error(path, f"{folder} is not a directory", shown=shown)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _folder_error(path, f"{folder} is read-only", shown=shown)


def _holds_inputs(path: Path) -> bool:
    """Whether the recording at `path` holds any run's inputs (a `run_inputs` line)."""
    try:
        return b'"type":"run_inputs"' in path.read_bytes()
    except OSError:
        return False
