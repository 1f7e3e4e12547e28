"""What a caller's digest costs its owner once, and a reader of the recording per guess (issue #41).

    python benchmarks/caller_digest.py            # the full PIN search before, a sample of it after
    python benchmarks/caller_digest.py --quick    # a few guesses of each (the smoke test's run)

A recording holds a digest of each caller's identity (by default the run's deps). The figures: the digest of one
distinct caller, as a run pays it once per process (`caller_digest` caches it); one more digest of a known caller;
and the search a reader runs to get a 4-digit PIN back from `Login(account="alice", pin=...)`: before #41 the
unsalted sha256 of each of the 10,000 guesses, after it scrypt under the unit's salt (a sample of guesses timed,
the whole search extrapolated). The keyed mode (`ANAGRAPHEUS_CALLER_KEY`) has no search to time: without the key,
no guess can be tested at all.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time

from anagrapheus.provider import callers
from anagrapheus.provider.callers import SCRYPT_COST, CallerSalt, caller_digest
from anagrapheus.timeline.canonical import canonical_json

PINS = 10_000


def identity(pin: int) -> str:
    """The canonical JSON a run's deps `Login(account="alice", pin=...)` are digested from."""
    return canonical_json({"account": "alice", "pin": f"{pin:04}"})


def search_before(target: str) -> tuple[float, int]:
    """The search of all PINs against the unsalted digest recordings held before #41: seconds, and the PIN."""
    started = time.perf_counter()
    found = -1
    for pin in range(PINS):
        if "p1:caller:" + hashlib.sha256(identity(pin).encode()).hexdigest() == target:
            found = pin
            break
    return time.perf_counter() - started, found


def per_guess_after(salt: CallerSalt, guesses: int) -> list[float]:
    """Seconds per guess against a salted digest: each a first digest, as a reader's guesses all are."""
    times: list[float] = []
    for pin in range(guesses):
        callers._stretched.cache_clear()  # pyright: ignore[reportPrivateUsage]
        started = time.perf_counter()
        caller_digest(identity(pin), salt)
        times.append(time.perf_counter() - started)
    return times


def main(quick: bool) -> None:
    salt = CallerSalt("5a" * 16, keyed=False)
    secret = 9_999  # the last PIN tried: the whole search
    print(f"scrypt n={SCRYPT_COST['n']} r={SCRYPT_COST['r']} p={SCRYPT_COST['p']}")

    samples = per_guess_after(salt, 3 if quick else 30)
    first = statistics.median(samples)
    known = identity(secret)
    caller_digest(known, salt)
    started = time.perf_counter()
    for _ in range(1000):
        caller_digest(known, salt)
    cached = (time.perf_counter() - started) / 1000
    print(f"one distinct caller, first digest in a process: {first * 1e3:.1f} ms (median of {len(samples)})")
    print(f"the same caller again (cached):                 {cached * 1e6:.2f} us")

    if quick:
        before = search_before("p1:caller:" + hashlib.sha256(identity(99).encode()).hexdigest())[0] * PINS / 100
    else:
        spent, found = search_before("p1:caller:" + hashlib.sha256(identity(secret).encode()).hexdigest())
        assert found == secret
        before = spent
    after = first * PINS
    print(f"PIN search, unsalted sha256 (before #41):        {before:.3f} s for {PINS:,} guesses")
    print(f"PIN search, salted scrypt (after #41):           {after:.0f} s for {PINS:,} guesses (extrapolated)")
    print(f"per guess: before {before / PINS * 1e6:.2f} us, after {first * 1e3:.1f} ms; ratio {after / before:,.0f}x")


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
