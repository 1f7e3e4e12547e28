"""A caller's digest that gives nothing back: salted per unit, memory-hard, or keyed (issue #41).

A tool call's key, a run's inputs and its place hold a digest of its caller's identity (by default the run's
deps). Unsalted, a reader of the recording could test guesses of the deps at sha256's speed: a 4-digit PIN fell in
0.3 s. So each unit draws a salt once (a `caller_salt` pin of 16 bytes, derived from the unit's id, or random where
the unit is picked per run; kept in the unit like a run's id, so a replay, a fork or a rekey reads it back), and
a caller's digest is `scrypt(identity, salt)` (n=2**14, r=8, p=1: 16 MiB and tens of milliseconds per guess),
computed once per distinct caller and salt in a process. Where deps hold guessable personal data, a team sets
`ANAGRAPHEUS_CALLER_KEY`: the digest is then an HMAC under that key, which never reaches a recording, and no guess
can be tested without it. A recording made before salts (its unit holds no `caller_salt` pin) keeps its unsalted
digests, and replays as it was recorded.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Final

from anagrapheus.errors import CallerKeyMissing, PinResultError
from anagrapheus.timeline.canonical import KEY_SCHEME, JSONValue, digest_key, pin_key
from anagrapheus.timeline.resolving.resolver import Attachment, Resolver

__all__ = [
    "CALLER",
    "CALLER_KEY_ENV",
    "CALLER_SALT",
    "SCRYPT_COST",
    "CallerSalt",
    "caller_digest",
    "is_salted",
    "unit_salt",
]

CALLER = "caller"
"""The kind a caller's identity is digested under (`p1:caller:<digest>`), the form it joins a tool call's key in."""
CALLER_SALT = "caller_salt"
"""The pin kind of a unit's caller salt."""
CALLER_KEY_ENV: Final = "ANAGRAPHEUS_CALLER_KEY"
"""The environment variable holding the key of keyed caller digests (never written anywhere by anagrapheus)."""
SCRYPT_COST: Final = {"n": 2**14, "r": 8, "p": 1}
"""scrypt's parameters for a caller's digest: 128 * r * n = 16 MiB of memory per digest."""

_SALT_KEY = pin_key(CALLER_SALT, {"scheme": 1})
_SALTS: Attachment[dict[str, CallerSalt | None]] = Attachment("the caller salt of each unit")


@dataclass(frozen=True, slots=True)
class CallerSalt:
    """A unit's caller salt, and whether its digests are keyed (`ANAGRAPHEUS_CALLER_KEY`) or memory-hard."""

    salt: str
    """16 bytes, as hex."""
    keyed: bool
    """Whether the unit's caller digests are an HMAC under the key in `ANAGRAPHEUS_CALLER_KEY`."""

    def raw(self) -> JSONValue:
        """The salt as its pin keeps it."""
        return {"salt": self.salt, "keyed": self.keyed}

    @classmethod
    def from_raw(cls, raw: JSONValue) -> CallerSalt:
        """A salt pin read back; `PinResultError` for anything else."""
        salt = raw.get("salt") if isinstance(raw, dict) else None
        keyed = raw.get("keyed") if isinstance(raw, dict) else None
        if not (isinstance(salt, str) and len(salt) == 32 and isinstance(keyed, bool)):
            raise PinResultError(f"a caller salt pin holds {raw!r:.200}, not a salt")
        try:
            bytes.fromhex(salt)
        except ValueError:
            raise PinResultError(f"a caller salt pin holds {salt!r}, not 16 bytes of hex") from None
        return cls(salt, keyed)


def _fresh(unit: str | None) -> JSONValue:
    """A new unit's salt, keyed when the environment holds a key: derived from the unit's id, or random without one.

    From the id, two recordings of one unit (a test recorded afresh) hold the same keys, and a pull request shows
    what changed; a unit's id is unique unless its caller names it (a UUIDv7 by default).
    """
    salt = secrets.token_hex(16) if unit is None else hashlib.sha256(f"{CALLER_SALT}\0{unit}".encode()).hexdigest()
    return CallerSalt(salt[:32], keyed=bool(os.environ.get(CALLER_KEY_ENV))).raw()


def unit_salt(resolver: Resolver) -> CallerSalt | None:
    """The caller salt of the unit `resolver` draws for, drawn at its first caller; None for a unit made before salts.

    A live unit draws it once and pins it; a replay answers it from the recording (several units' salts that
    differ are `AmbiguousPin`: replay one unit); a replay of a unit that holds none (recorded before #41) has
    none, and its callers are digested as they were then.
    """
    unit = resolver.unit
    if unit is None and resolver.serves_each_run is not None:
        return _drawn(resolver)  # a resolver picking a unit per run: asked of the run's unit each time
    unit = "" if unit is None else unit  # a resolver of one unit it does not name (a fork, a rekey)
    salts = resolver.attached(_SALTS, dict[str, "CallerSalt | None"])
    if salts is None:
        return _drawn(resolver)
    if unit not in salts:
        salts[unit] = _drawn(resolver)  # two threads may both draw: the second is answered from the first's pin
    return salts[unit]


def _drawn(resolver: Resolver) -> CallerSalt | None:
    if resolver.replays and resolver.asked(_SALT_KEY):
        answering: Resolver | None = resolver
    else:
        # A live unit draws it; a replay recording anew draws it into its new unit; a strict replay of a unit
        # recorded before salts has none (None).
        answering = resolver.answering_position(_SALT_KEY)
    if answering is None:
        return None
    unit = answering.unit
    return answering.resolve(_SALT_KEY, kind=CALLER_SALT, effect=lambda: _fresh(unit), interpret=CallerSalt.from_raw)


def is_salted(digest: str) -> bool:
    """Whether a caller's digest (as a run's inputs recorded it) was made under its unit's salt."""
    return digest.startswith((f"{KEY_SCHEME}:{CALLER}:s1-", f"{KEY_SCHEME}:{CALLER}:k1-"))


def caller_digest(identity: str, salt: CallerSalt | None) -> str:
    """The digest naming the caller whose identity's canonical JSON is `identity`, under its unit's `salt`.

    None for `salt` gives the form recordings made before salts hold (`p1:caller:<sha256>`).
    """
    if salt is None:
        return digest_key(CALLER, hashlib.sha256(identity.encode()).hexdigest())
    if salt.keyed:
        key = os.environ.get(CALLER_KEY_ENV)
        if not key:
            raise CallerKeyMissing(CALLER_KEY_ENV)
        return digest_key(CALLER, "k1-" + _keyed(identity, salt.salt, key))
    return digest_key(CALLER, "s1-" + _stretched(identity, salt.salt))


@functools.lru_cache(maxsize=4096)
def _stretched(identity: str, salt: str) -> str:
    """Scrypt of `identity` under `salt`: computed once per distinct caller and salt in a process."""
    cost = SCRYPT_COST
    digest = hashlib.scrypt(
        identity.encode(), salt=bytes.fromhex(salt), n=cost["n"], r=cost["r"], p=cost["p"], maxmem=64 << 20, dklen=32
    )
    return digest.hex()


def _keyed(identity: str, salt: str, key: str) -> str:
    """HMAC-SHA256 of `identity` under `key`, salted per unit so two units' digests of one caller differ."""
    return hmac.new(key.encode(), bytes.fromhex(salt) + identity.encode(), hashlib.sha256).hexdigest()
