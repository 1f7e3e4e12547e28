"""A recording's seal: per unit of work, a sha256 chain over its event lines, kept in the header's `details`.

The seal makes a hand edit visible; it is no signature (anyone can reseal a file). Each unit's chain runs over
its lines' bytes in file order; a short digest of every line is kept beside the chain's head, so a reader names
the first line that no longer matches. It sits in `details`, which readers before the seal take as they find it.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Literal, cast

from anagrapheus.errors import RecordingError, SealBroken
from anagrapheus.timeline.canonical import JSONValue

__all__ = [
    "SEAL_DETAIL",
    "SEAL_SCHEME",
    "Seal",
    "SealCheck",
    "Sealer",
    "UnitSeal",
    "read_seal",
    "seal_changes",
    "verified",
]

SEAL_DETAIL = "seal"
"""The header `details` entry that holds the seal; `write_recording` owns it."""

SEAL_SCHEME = "sha256-chain-1"
"""How the seal is computed; a reader refuses a scheme it does not know rather than pass the file unchecked."""

SealCheck = Literal["verify", "ignore"]
"""How reading treats a seal: refuse a line that no longer matches (`verify`), or look at nothing (`ignore`)."""

# Hex digits of each line's digest kept in the seal: enough to name an edited line, while the chain's head,
# a whole sha256, is what a forged line must match.
_SHORT = 8


@dataclass(frozen=True, slots=True)
class UnitSeal:
    """One unit's seal: the head of the chain over its lines and each line's short digest, in file order."""

    unit: str | None
    """The unit of work (the events' correlation id; None for events outside any unit)."""
    chain: str
    """The hex sha256 at the end of the unit's chain."""
    lines: tuple[str, ...]
    """Each line's short digest, in file order."""


@dataclass(frozen=True, slots=True)
class Seal:
    """A recording's seal: each unit's, in the order the units first appear in the file."""

    units: tuple[UnitSeal, ...]
    """The units' seals."""

    def detail(self) -> dict[str, JSONValue]:
        """The seal as the header's `details` holds it."""
        return {
            "scheme": SEAL_SCHEME,
            "units": [{"unit": u.unit, "chain": u.chain, "lines": list(u.lines)} for u in self.units],
        }


def _digest(text: str) -> bytes:
    """A line's digest: the sha256 of its bytes as written (canonical JSON, without the newline)."""
    return hashlib.sha256(text.encode()).digest()


@dataclass(slots=True)
class _Chain:
    """One unit's chain as it grows: its head, each line's short digest and file line number."""

    head: bytes
    lines: list[str] = field(default_factory=lambda: [])
    numbers: list[int] = field(default_factory=lambda: [])

    @classmethod
    def of(cls, unit: str | None) -> _Chain:
        # The unit's id starts its chain, so a line moved to another unit changes both chains.
        return cls(hashlib.sha256(b"anagrapheus.seal\n" + json.dumps(unit).encode()).digest())

    def add(self, digest: bytes, line: int) -> None:
        """Chain a line's digest onto the head, and keep its short form and line number."""
        self.head = hashlib.sha256(self.head + digest).digest()
        self.lines.append(digest.hex()[:_SHORT])
        self.numbers.append(line)


def _unit_named(unit: str | None) -> str | None:
    """A unit's id as the seal names it: NFC, so a line kept as drawn and a header searched as NFC agree."""
    return None if unit is None else unicodedata.normalize("NFC", unit)


class Sealer:
    """Seals lines as they come: feed each event line's unit and text, then read the `seal`."""

    def __init__(self) -> None:
        self._chains: dict[str | None, _Chain] = {}

    def add(self, unit: str | None, text: str, *, line: int = 0) -> None:
        """Chain the line `text` (without its newline) into `unit`'s seal; `line` numbers it for `seal_changes`."""
        unit = _unit_named(unit)
        chain = self._chains.get(unit)
        if chain is None:
            chain = self._chains[unit] = _Chain.of(unit)
        chain.add(_digest(text), line)

    @property
    def seal(self) -> Seal:
        """The seal of every line added so far."""
        return Seal(tuple(UnitSeal(unit, c.head.hex(), tuple(c.lines)) for unit, c in self._chains.items()))

    def line_numbers(self, unit: str | None) -> list[int]:
        """The line numbers given for `unit`'s lines, in order."""
        chain = self._chains.get(_unit_named(unit))
        return [] if chain is None else chain.numbers


def read_seal(details: dict[str, Any], *, where: str) -> Seal | None:
    """The seal a header's `details` hold; None for an unsealed recording; a malformed one refused naming line 1."""
    if SEAL_DETAIL not in details:
        return None
    held: object = details[SEAL_DETAIL]
    if not isinstance(held, dict) or cast(dict[str, Any], held).get("scheme") != SEAL_SCHEME:
        scheme = cast(dict[str, Any], held).get("scheme") if isinstance(held, dict) else None
        raise RecordingError(
            f"details.{SEAL_DETAIL} is not a seal this anagrapheus reads (scheme {scheme!r}, not {SEAL_SCHEME!r})",
            path=where,
            line=1,
        )
    units: list[UnitSeal] = []
    seen: set[str | None] = set()
    raw_units: object = cast(dict[str, Any], held).get("units")
    for entry in cast(list[object], raw_units) if isinstance(raw_units, list) else [None]:
        unit_seal = _unit_seal(entry)
        if unit_seal is None or unit_seal.unit in seen:
            raise RecordingError(f"details.{SEAL_DETAIL} is malformed", path=where, line=1)
        seen.add(unit_seal.unit)
        units.append(unit_seal)
    return Seal(tuple(units))


_UNIT_FIELDS = frozenset(("unit", "chain", "lines"))


def _unit_seal(entry: object) -> UnitSeal | None:
    """One unit's seal as the header holds it; None when it is not one."""
    if not isinstance(entry, dict):
        return None
    fields = cast(dict[str, Any], entry)
    unit, chain, lines = fields.get("unit"), fields.get("chain"), fields.get("lines")
    if fields.keys() != _UNIT_FIELDS or not (unit is None or isinstance(unit, str)):
        return None
    if not isinstance(chain, str) or not isinstance(lines, list):
        return None
    shorts = cast(list[object], lines)
    # Every line's type at once (a million lines' seal is read before a replay's first answer): only strings.
    if not set(map(type, shorts)) <= {str}:
        return None
    return UnitSeal(_unit_named(unit), chain, tuple(cast(list[str], shorts)))


@dataclass(slots=True)
class _Tally:
    """One unit's chain as a reader checks it: the head, how many lines it has seen and the last one's number.

    Nothing per line is kept, so checking a recording holds no more than its seal.
    """

    head: bytes
    count: int = 0
    last: int = 0


class _Verifier:
    """Checks each line against the seal as it is read; `finish` checks what no line showed."""

    def __init__(self, seal: Seal, where: str) -> None:
        self._where = where
        self._sealed = {u.unit: u for u in seal.units}
        self._order = [u.unit for u in seal.units]
        self._begun = 0  # how many of `_order` have shown a line
        self._chains: dict[str | None, _Tally] = {}
        self._read = 1  # the last line read

    def _broken(self, message: str, *, line: int | None, unit: str | None, change: str) -> SealBroken:
        return SealBroken(message, path=self._where, line=line, unit=unit, change=change)

    def see(self, number: int, text: str, unit: str | None) -> None:
        """Check line `number` (text `text`, of `unit`) against the seal."""
        unit = _unit_named(unit)
        self._read = number
        sealed = self._sealed.get(unit)
        if sealed is None:
            raise self._broken(
                f"the seal holds no unit {unit!r}: this line was added by hand (or its correlation id edited)",
                line=number,
                unit=unit,
                change="added",
            )
        chain = self._chains.get(unit)
        if chain is None:
            chain = self._chains[unit] = _Tally(_Chain.of(unit).head)
            position = self._order.index(unit)
            if position > self._begun:
                skipped = self._order[self._begun]
                count = len(self._sealed[skipped].lines)
                raise self._broken(
                    f"unit {skipped!r}, sealed with {count} line(s) before unit {unit!r}, has none left: deleted by"
                    " hand",
                    line=number,
                    unit=skipped,
                    change="deleted",
                )
            self._begun = position + 1
        digest = _digest(text)
        short = digest.hex()[:_SHORT]
        index = chain.count
        if index >= len(sealed.lines):
            raise self._broken(
                f"unit {unit!r} was sealed with {len(sealed.lines)} line(s); this one is beyond them: added by hand",
                line=number,
                unit=unit,
                change="added",
            )
        if short != sealed.lines[index]:
            if short in sealed.lines[index + 1 :]:
                missing = sealed.lines.index(short, index + 1) - index
                message = (
                    f"{missing} sealed line(s) of unit {unit!r} are missing before this line: deleted by hand"
                    " (or moved)"
                )
                raise self._broken(message, line=number, unit=unit, change="deleted")
            raise self._broken(
                f"this line no longer matches the seal (line {index + 1} of unit {unit!r}): edited by hand",
                line=number,
                unit=unit,
                change="edited",
            )
        chain.head = hashlib.sha256(chain.head + digest).digest()
        chain.count += 1
        chain.last = number

    def finish(self) -> None:
        """Check, once every line was read, that no sealed line is missing at a unit's end and every chain holds.

        What is missing is named at the line where it would be: after the unit's last line, or the file's.
        """
        for unit in self._order:
            sealed = self._sealed[unit]
            chain = self._chains.get(unit)
            if chain is None:
                raise self._broken(
                    f"unit {unit!r}, sealed with {len(sealed.lines)} line(s), has none left after line"
                    f" {self._read}: deleted by hand",
                    line=self._read + 1,
                    unit=unit,
                    change="deleted",
                )
            if chain.count < len(sealed.lines):
                missing = len(sealed.lines) - chain.count
                raise self._broken(
                    f"the last {missing} sealed line(s) of unit {unit!r} are missing after line {chain.last}:"
                    " deleted by hand",
                    line=chain.last + 1,
                    unit=unit,
                    change="deleted",
                )
            if chain.head.hex() != sealed.chain:
                # Every line matched its short digest, but not the chain: a line forged to match one.
                raise self._broken(
                    f"unit {unit!r}'s lines match their digests but not the unit's sealed chain: forged by hand",
                    line=1,
                    unit=unit,
                    change="edited",
                )


def verified(
    entries: Iterator[tuple[int, str, dict[str, Any]]], seal: Seal | None, where: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each checked line's number and fields, each line checked against `seal` first (None: nothing to check)."""
    verifier = None if seal is None else _Verifier(seal, where)
    for number, text, fields in entries:
        if verifier is not None:
            verifier.see(number, text, fields["correlation_id"])
        yield number, fields
    if verifier is not None:
        verifier.finish()


def seal_changes(old: Seal | None, new: Sealer) -> list[str]:
    """What resealing accepts, a line per unit that changed: which lines were edited, added or deleted."""
    fresh = new.seal
    if old is None:
        count = sum(len(u.lines) for u in fresh.units)
        return [f"unsealed: sealing {len(fresh.units)} unit(s), {count} line(s), as they stand"]
    changes: list[str] = []
    now = {u.unit: u for u in fresh.units}
    for sealed in old.units:
        if sealed.unit not in now:
            changes.append(f"unit {sealed.unit!r}: all {len(sealed.lines)} sealed line(s) deleted")
    for unit_seal in fresh.units:
        numbers = new.line_numbers(unit_seal.unit)
        before = next((u for u in old.units if u.unit == unit_seal.unit), None)
        if before is None:
            changes.append(f"unit {unit_seal.unit!r}: added, {_lines(numbers)}")
            continue
        found: list[str] = []
        matcher = SequenceMatcher(None, before.lines, unit_seal.lines, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag in ("replace", "insert"):
                found.append(f"{_lines(numbers[j1:j2])} {'edited' if tag == 'replace' else 'added'}")
            if tag in ("replace", "delete") and i2 - i1 != j2 - j1:
                gone = (i2 - i1) - (j2 - j1) if tag == "replace" else i2 - i1
                if gone > 0:
                    where = f"before line {numbers[j2]}" if j2 < len(numbers) else "at its end"
                    found.append(f"{gone} sealed line(s) deleted {where}")
        if not found and before.chain != unit_seal.chain:
            found.append("its lines no longer match the sealed chain")
        if found:
            changes.append(f"unit {unit_seal.unit!r}: {'; '.join(found)}")
    return changes


def _lines(numbers: list[int]) -> str:
    """`line 5` or `lines 5-9` (file lines of one unit, which may not be contiguous: listed then)."""
    if len(numbers) == 1:
        return f"line {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"lines {numbers[0]}-{numbers[-1]}"
    return "lines " + ", ".join(map(str, numbers))
