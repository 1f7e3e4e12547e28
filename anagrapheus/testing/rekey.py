"""Re-key a recording offline: ask its runs again, answer each call from its recorded pin, store it under today's key.

When a pydantic-ai release changes what a call *means* (not an addition the key scheme absorbs), every key the
recording holds for such a call moves, and strict replay misses. The recorded answers are still the right ones:
the run asks the same things in the same order. `RekeyPins` answers a key the recording holds from its pin, as
replay does; a key it lacks from the recorded pin of the same kind that no key answered, taken in the order the
unit recorded them, adopted under the new key. Nothing reaches a model, a tool or the network. What each re-keyed
pin's request moved (its fingerprint against the recorded one) is reported, for a reviewer to read, and a call of a
kind with no recorded pin left is a miss, raised as strict replay raises it.

No request material beyond what a recording already holds is needed: the agent's code, asked again, rebuilds it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic_ai import Agent
from typing_extensions import override

from anagrapheus.errors import UsageError
from anagrapheus.provider import Pinning, every_agent_run, refuse_model_requests
from anagrapheus.provider.inputs import RecordedRun, output_json, recorded_runs
from anagrapheus.testing.network import loopback_only
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    canonical_json,
)
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent, PinPromoted, PinText
from anagrapheus.timeline.fingerprint import moved_fields
from anagrapheus.timeline.recording import RecordingHeader, write_recording
from anagrapheus.timeline.resolving.resolver import DelegatingResolver, Resolver
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = ["RekeyPins", "RekeyReport", "Rekeyed", "rekey_events"]


@dataclass(frozen=True)
class Rekeyed:
    """One recorded pin stored under the key its call has today."""

    unit_id: str
    """The unit it belongs to."""
    kind: str
    """What was pinned."""
    old_key: str
    """The key the recording held."""
    new_key: str
    """The key the call is asked under now."""
    moved: tuple[str, ...]
    """What moved in the request against the recorded one (its fingerprint's fields), as a miss would say."""


class RekeyPins(DelegatingResolver):
    """Answers one unit's calls from its recorded pins: by key, else by kind in recorded order, under the new key."""

    def __init__(
        self,
        events: Iterable[StoredEvent],
        *,
        unit_id: str,
        into: PinLedger,
        registry: EventTypeRegistry | None = None,
        upcasts: UpcastRegistry | None = None,
    ) -> None:
        events = list(events)
        types = registry if registry is not None else EventTypeRegistry()
        self.unit_id = unit_id
        """The recorded unit answered."""
        self.into = into
        """The ledger the pins are adopted into, each under the key its call has now."""
        self.replay = ReplayPins.from_events(
            events, types, unit_id=unit_id, upcasts=upcasts, on_miss="record", into=into
        )
        self._strict = ReplayPins.from_events(events, types, unit_id=unit_id, upcasts=upcasts)
        self._waiting: dict[str, list[PinText]] = {}
        for stored in events:
            if stored.namespace == BUILTIN_NAMESPACE and stored.type == PinPromoted.event_type:
                pin = PinPromoted.read_text(stored, types, upcasts=upcasts)
                if pin.unit_id == unit_id:
                    self._waiting.setdefault(pin.kind, []).append(pin)
        self.rekeyed: list[Rekeyed] = []
        """Each pin answered under a new key, in the order asked."""

    # What the layers above ask of a replay (see `anagrapheus.timeline.resolving.resolver`): this one answers as
    # `replay`, whose fresh draws (a run's inputs, a position the recording lacks) land in `into`.
    @property
    @override
    def draws_live(self) -> bool:
        """False: it answers from the recording, and draws only what the recording lacks, into `into`."""
        return False

    @property
    @override
    def replays(self) -> bool:
        """True: it says how many times the recording asked for a key."""
        return True

    @property
    @override
    def unit(self) -> str:
        """The recorded unit: a run's id and clock are positions in it, answered from its pins."""
        return self.unit_id

    @property
    @override
    def draws_into(self) -> PinLedger:
        """The ledger the re-keyed unit is written to."""
        return self.into

    @override
    def answering_position(self, key: str) -> Resolver | None:
        """Who answers a position in the unit (a run's id, its clock): the recording, as replay does."""
        self._asked(key)
        return self.replay.answering_position(key)

    def _asked(self, key: str) -> None:
        """Take `key`'s recorded pin off the waiting lists: its call asked it by its own key."""
        for kind, waiting in self._waiting.items():
            if any(pin.key == key for pin in waiting):
                self._waiting[kind] = [pin for pin in waiting if pin.key != key]

    @override
    def asked(self, key: str) -> int:
        """How many times the recording asked for `key`."""
        return self.replay.asked(key)

    @override
    def recorded(self, key: str) -> JSONValue | None:
        """What the recording holds under `key`, read without answering it."""
        return self.replay.recorded(key)

    @override
    def answered_within(self, keys: Iterable[str]) -> None:
        """Count `keys` as asked by a draw answered from its pin (see `ReplayPins.answered_within`)."""
        self.replay.answered_within(keys)
        for key in keys:
            self._asked(key)

    @override
    def note_event(self, event: PendingEvent) -> None:
        """Note `event` (a run's inputs) on the re-keyed unit."""
        self.into.note_event(event)

    @property
    def left_over(self) -> list[PinText]:
        """The recorded pins no call asked for, by key or by kind: a rekey that leaves one did not reproduce the run."""
        return [pin for pins in self._waiting.values() for pin in pins]

    @override
    def _target(self, key: str, kind: str) -> tuple[Resolver, str]:
        return self._pick(key, kind, None)

    @override
    def _pick(self, key: str, kind: str, fingerprint: Mapping[str, str] | None) -> tuple[Resolver, str]:
        """The recording for a key it holds; for one that moved, the recorded pin of its kind, adopted under it."""
        if key in self.replay:
            self._asked(key)
            return self.replay, key
        waiting = self._waiting.get(kind, [])
        if not waiting:
            return self._strict, key  # nothing recorded is left to answer it: a miss, as strict replay raises it
        pin = waiting.pop(0)
        recorded: object = json.loads(pin.fingerprint) if pin.fingerprint is not None else None
        moved = (
            moved_fields(fingerprint, cast(dict[str, str], recorded))
            if fingerprint and isinstance(recorded, dict)
            else []
        )
        self.into.adopt(
            key,
            kind=kind,
            raw=pin.raw_text,
            fingerprint=None if fingerprint is None else canonical_json(dict(fingerprint)),
            failed=pin.failed,
        )
        self.rekeyed.append(Rekeyed(self.unit_id, kind, pin.key, key, tuple(moved)))
        return self.into, key


@dataclass(frozen=True)
class RekeyReport:
    """What a rekey did: the pins it moved, the runs it asked, and whether the result replays strictly."""

    rekeyed: tuple[Rekeyed, ...]
    """Each pin stored under a new key."""
    runs: int
    """How many recorded runs were asked again."""
    kept: int
    """How many pins kept their key."""

    def describe(self) -> str:
        """A paragraph: how many pins moved, and what moved in their requests."""
        lines = [f"{self.runs} run(s) asked again; {self.kept} pin(s) kept their key, {len(self.rekeyed)} re-keyed"]
        by_moved: dict[tuple[str, ...], int] = {}
        for pin in self.rekeyed:
            by_moved[pin.moved] = by_moved.get(pin.moved, 0) + 1
        for moved, count in sorted(by_moved.items(), key=lambda item: -item[1]):
            what = ", ".join(moved) or "nothing the fingerprint can see"
            lines.append(f"  {count} pin(s): what moved in the request: {what}")
        return "\n".join(lines)


_COMPARED = ("prompt", "instructions", "model_settings", "outcome", "output")


def _same_inputs(recorded: list[RecordedRun], asked: list[RecordedRun]) -> None:
    """Refuse a rekey whose runs were asked otherwise than recorded: it re-keys one code under a new release only.

    What is compared is text the agent rendered (prompt, instructions, settings) and the outcome, none of it
    shaped by pydantic-ai's dataclasses, so a release's new shapes pass and an edited prompt does not.
    """
    if len(recorded) != len(asked):
        raise UsageError(f"the recording holds {len(recorded)} run(s) and {len(asked)} were asked again")
    for was, now in zip(recorded, asked, strict=True):
        for name in _COMPARED:
            if canonical_json(output_json(getattr(was, name))) != canonical_json(output_json(getattr(now, name))):
                raise UsageError(
                    f"run {was.run_id} of unit {was.unit_id}: its {name} is not what was recorded, so the agent"
                    " asks otherwise than the recording answers: a rekey re-keys the same code under a new"
                    " release, never a changed agent; record it again"
                )


def rekey_events(
    events: Iterable[StoredEvent],
    agent: Agent[Any, Any],
    target: str | Path,
    *,
    header: RecordingHeader,
    deps: Callable[[RecordedRun], object] | None = None,
) -> RekeyReport:
    """Ask each recorded run again of `agent`, answered from its pins, and write the re-keyed recording to `target`.

    Every unit's runs are asked in the order recorded, with the model refused and the network closed: a call the
    recording cannot answer, by key or by kind, raises `PinMiss`; a recorded pin left unasked raises `UsageError`.
    The new recording replays strictly under the installed release; `header` is written with fresh provenance.
    """
    events = list(events)
    runs = [run for run in recorded_runs(events) if not run.nested]
    if not runs:
        raise UsageError("the recording holds no recorded run inputs: re-key it from your own code with RekeyPins")
    registry = EventTypeRegistry()
    rekeyed: list[Rekeyed] = []
    with tempfile.TemporaryDirectory(prefix="anagrapheus-rekey-") as scratch:
        store = SQLiteEventStore(Path(scratch) / "rekeyed.db")
        try:
            for unit_id in dict.fromkeys(run.unit_id for run in runs):
                ledger = PinLedger(store, registry, unit_id=unit_id)
                pins = RekeyPins(events, unit_id=unit_id, into=ledger, registry=registry)
                with ExitStack() as stack:
                    stack.enter_context(refuse_model_requests())
                    stack.enter_context(loopback_only())
                    stack.enter_context(every_agent_run(Pinning(pins)))
                    for run in runs:
                        if run.unit_id == unit_id:
                            kwargs = run.run_kwargs()
                            if deps is not None:
                                kwargs["deps"] = deps(run)
                            with run.as_its_caller():
                                agent.run_sync(**kwargs)
                if pins.left_over:
                    ledger.abandon(reason="a rekey that did not ask every recorded pin")
                    missing = ", ".join(f"{pin.kind} {pin.key}" for pin in pins.left_over[:5])
                    raise UsageError(
                        f"unit {unit_id}: {len(pins.left_over)} recorded pin(s) were never asked ({missing}): the"
                        " agent no longer runs as recorded, so its answers cannot be paired; record it again"
                    )
                ledger.commit()
                rekeyed += pins.rekeyed
            written = list(store.read(namespace=BUILTIN_NAMESPACE))
            _same_inputs(runs, [run for run in recorded_runs(written) if not run.nested])
            kept = sum(1 for event in written if event.type == PinPromoted.event_type) - len(rekeyed)
            write_recording(target, written, header=header.model_copy(update={"provenance": None}))
        finally:
            store.close()
    return RekeyReport(tuple(rekeyed), len(runs), kept)
