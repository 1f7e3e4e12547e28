"""The peer page "Declare Your Entropy" (../shared/reference/peers/determinism-manifest.md): claims made our own.

The project's entropy guard (`anagrapheus.testing.entropy`, docs/how-to/guard-entropy.md) is that page's manifest
and audit hook: what a test body touches outside its manifest is a violation. Each test guards a small body here
directly (the pytest plugin around it is tested in tests/testing/test_entropy.py).
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from anagrapheus.testing.entropy import ClockDeclaration, EntropyManifest, guarded, load_manifest, test_seed

FROZEN = datetime(2026, 1, 1, tzinfo=UTC)


def kinds(manifest: EntropyManifest, body: object) -> list[str]:
    """The kinds of violation a guarded call of `body` reports."""
    with guarded(manifest, seed=manifest.seed) as guard:
        body()  # type: ignore[operator]
    return [violation.kind for violation in guard.violations]


def test_an_undeclared_clock_read_is_a_violation_and_a_declared_one_is_frozen() -> None:
    """§ Three classes of nondeterminism (clock): reading the wall clock undeclared fails; declared, it is frozen."""
    assert kinds(EntropyManifest(), lambda: datetime.now(UTC)) == ["clock"]
    frozen = EntropyManifest(clock=ClockDeclaration(frozen_at=FROZEN))
    with guarded(frozen, seed=None) as guard:
        seen = (datetime.now(UTC), time.time())
    assert guard.violations == [] and seen == (FROZEN, FROZEN.timestamp())


def test_datetime_now_is_frozen_too_not_only_time_time() -> None:
    """§ Step 3 (be honest about the gaps): `datetime.now()` goes around a patched `time.time`; the guard covers it."""
    with guarded(EntropyManifest(clock=ClockDeclaration(frozen_at=FROZEN)), seed=None):
        assert datetime.now(UTC) == FROZEN


def test_a_monotonic_clock_steps_rather_than_stopping_so_deadlines_pass() -> None:
    """§ Step 3: a constant monotonic clock hangs deadline loops; the declared one advances by a step per read."""
    with guarded(EntropyManifest(clock=ClockDeclaration(frozen_at=FROZEN)), seed=None):
        first, second = time.monotonic(), time.monotonic()
    assert second > first


def test_undeclared_entropy_is_a_violation_and_a_declared_seed_reproduces_the_draws() -> None:
    """§ Three classes of nondeterminism (entropy): a draw with no seed declared fails; a seed makes it repeatable."""
    assert kinds(EntropyManifest(), lambda: random.random()) == ["random"]
    seeded = EntropyManifest(seed=20261016)
    draws = []
    for _ in range(2):
        with guarded(seeded, seed=test_seed(20261016, "tests/seeds::x")) as guard:
            draws.append(random.random())
        assert guard.violations == []
    assert draws[0] == draws[1]


def test_each_test_gets_its_own_seed_from_the_manifests_seed_and_its_node_id() -> None:
    """§ Step 4 (one declared seed per property check): one manifest seed, a distinct stream per test."""
    assert test_seed(20261016, "a::one") == test_seed(20261016, "a::one")
    assert test_seed(20261016, "a::one") != test_seed(20261016, "a::two")


def test_a_socket_is_a_violation_unless_the_manifest_allows_the_network() -> None:
    """§ Three classes of nondeterminism (I/O): `allow_network = false` turns a real connection into a failure."""

    def connect() -> None:
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.settimeout(0.2)
            sock.connect(("127.0.0.1", 9))

    assert kinds(EntropyManifest(), connect) == ["network"]
    assert kinds(EntropyManifest(allow_network=True), connect) == []


def test_a_subprocess_is_a_violation_unless_the_manifest_allows_it() -> None:
    """§ Three classes of nondeterminism (I/O): `allow_subprocess = false` refuses an undeclared process."""

    def start() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)

    assert kinds(EntropyManifest(), start) == ["subprocess"]


def test_an_undeclared_read_is_a_violation_and_a_declared_read_is_not(tmp_path: Path) -> None:
    """§ Step 1 (write the manifest first): `declared_reads`, relative to the root, are the only files read."""
    (tmp_path / "fixtures").mkdir()
    for name in ("orders.jsonl", "tmp_orders.json"):
        (tmp_path / "fixtures" / name).write_text("{}")
    manifest = EntropyManifest(root=tmp_path, declared_reads=("fixtures/orders.jsonl",))
    assert kinds(manifest, lambda: (tmp_path / "fixtures" / "orders.jsonl").read_text()) == []
    assert kinds(manifest, lambda: (tmp_path / "fixtures" / "tmp_orders.json").read_text()) == ["read"]


def test_the_manifest_is_a_file_next_to_pyproject_reviewed_like_code(tmp_path: Path) -> None:
    """§ Step 1: `nondeterminism.toml` beside `pyproject.toml` declares the clock, the seed and the I/O."""
    (tmp_path / "nondeterminism.toml").write_text(
        '[clock]\nfrozen_at = "2026-01-01T00:00:00Z"\n[entropy]\nseed = 20261016\n'
        '[io]\nallow_network = false\ndeclared_reads = ["tests/fixtures/orders.jsonl"]\n'
    )
    manifest = load_manifest(tmp_path)
    assert manifest.clock is not None and manifest.clock.frozen_at == FROZEN
    assert (manifest.seed, manifest.allow_network, manifest.declared_reads) == (
        20261016,
        False,
        ("tests/fixtures/orders.jsonl",),
    )
