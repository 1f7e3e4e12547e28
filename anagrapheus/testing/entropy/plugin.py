"""The guard's pytest half: `--anagrapheus-guard` (or `anagrapheus_guard = true`), per-test seeds and the `rng` fixture.

Loaded by the `anagrapheus` plugin; only tests marked `anagrapheus` are guarded, and only while their body runs.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Generator
from typing import Any, cast

import pytest

from anagrapheus.errors import ManifestError
from anagrapheus.testing.entropy.guard import guarded
from anagrapheus.testing.entropy.manifest import EntropyManifest, load_manifest, test_seed
from anagrapheus.testing.entropy.set_order import set_orders

__all__ = ["GUARD_INI", "GUARD_MARKER", "GUARD_OPTION"]

GUARD_OPTION = "--anagrapheus-guard"
GUARD_INI = "anagrapheus_guard"
_MARKER = "anagrapheus"  # anagrapheus.testing.plugin.MARKER, which imports this module's host
GUARD_MARKER = "anagrapheus_guard"
_MANIFEST = pytest.StashKey[EntropyManifest]()
_GUARD_ON = pytest.StashKey[bool]()
_SEED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add `--anagrapheus-guard` and the ini setting `anagrapheus_guard`."""
    group = parser.getgroup("anagrapheus")
    group.addoption(
        GUARD_OPTION,
        dest="anagrapheus_guard",
        action="store_true",
        default=None,
        help="fail a test marked anagrapheus that touches a clock, a random source, the network, a process or a"
        " file its determinism manifest ([tool.anagrapheus.entropy] or nondeterminism.toml) does not declare",
    )
    parser.addini(GUARD_INI, type="bool", default=False, help="turn the determinism guard on, as --anagrapheus-guard")


def _manifest(config: pytest.Config) -> EntropyManifest:
    manifest = config.stash.get(_MANIFEST, None)
    if manifest is None:
        try:
            manifest = load_manifest(config.rootpath)
        except ManifestError as e:
            raise pytest.UsageError(str(e)) from None
        config.stash[_MANIFEST] = manifest
    return manifest


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; read the manifest once, when the guard is on, so a bad one stops the run before any test."""
    config.addinivalue_line(
        "markers",
        f"{GUARD_MARKER}: guard the test's body with --anagrapheus-guard, as a test marked {_MARKER} is, without"
        " pinning its agent runs.",
    )
    on = cast("bool | None", config.getoption("anagrapheus_guard")) or bool(config.getini(GUARD_INI))
    config.stash[_GUARD_ON] = on
    if on:
        _manifest(config)


def _seed(item: pytest.Item) -> int:
    seed = item.stash.get(_SEED, None)
    if seed is None:
        base = _manifest(item.config).seed
        seed = item.stash[_SEED] = test_seed(0 if base is None else base, item.nodeid)
    return seed


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A `random.Random` seeded for this test from the manifest's seed and its node id, printed if it fails."""
    item = request.node
    assert isinstance(item, pytest.Item)
    return random.Random(_seed(item))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Seed each hypothesis test from its node id when the manifest opts in; hypothesis is left alone otherwise."""
    if not config.stash.get(_GUARD_ON, False):
        return
    manifest = _manifest(config)
    if not (manifest.hypothesis and manifest.seed is not None):
        return
    import hypothesis  # only a project that opts in needs it

    for item in items:
        function: Any = getattr(item, "obj", None)
        if getattr(function, "is_hypothesis_test", False):
            hypothesis.seed(_seed(item))(function)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Guard a marked test's body, and fail it listing everything it touched that its manifest does not declare."""
    marked = item.get_closest_marker(_MARKER) is not None or item.get_closest_marker(GUARD_MARKER) is not None
    if not (marked and item.config.stash.get(_GUARD_ON, False)):
        return (yield)
    manifest = _manifest(item.config)
    funcargs = cast("dict[str, object]", getattr(item, "funcargs", {}))
    allowed = [str(funcargs[name]) for name in ("tmp_path", "tmpdir") if name in funcargs]
    seed = _seed(item) if manifest.seed is not None else None
    with guarded(manifest, seed=seed, allowed_dirs=allowed) as guard:
        # What the test's source shows before it runs: the places it takes an order from a set.
        if isinstance(item, pytest.Function):
            for found in set_orders(item.obj):
                guard.report_at("order", found.what, found.where)
        try:
            outcome = yield
        except BaseException:
            if guard.violations:
                item.add_report_section("call", "anagrapheus guard", guard.describe(item.nodeid))
            raise
    if guard.violations:
        pytest.fail(guard.describe(item.nodeid), pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """Print the seed of a failed test that drew from one, as the recipe to run it again the same way."""
    report = cast("pytest.TestReport", (yield))
    seed = item.stash.get(_SEED, None)
    if seed is not None and report.when == "call" and report.failed:
        base = _manifest(item.config).seed
        guard = GUARD_OPTION if item.config.stash.get(_GUARD_ON, False) else ""
        report.sections.append(
            (
                "anagrapheus seed",
                f"seed {seed}: from the manifest's seed {base} and the node id {item.nodeid}\n"
                f"run it again: pytest {shlex.quote(item.nodeid)} {guard}".rstrip(),
            )
        )
    return report
