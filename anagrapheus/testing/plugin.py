"""The pytest plugin (entry point `anagrapheus`): mark a test, record once, replay strictly on every run after.

A thin shell over `RecordingSession`: options, the marker, fixtures, and where a test's recording lives.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shlex
import tomllib
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from anagrapheus.errors import AnagrapheusError, RecordingMissing, UnusedPins
from anagrapheus.provider import CallPolicy
from anagrapheus.testing.session import MODES, Mode, RecordingSession

__all__ = ["DEFAULT_PATH", "MARKER", "recording_name"]

# The determinism guard (`--anagrapheus-guard`) keeps its hooks in a module of its own.
pytest_plugins = ["anagrapheus.testing.entropy.plugin"]

MARKER = "anagrapheus"
DEFAULT_PATH = "{test_dir}/recordings/{module}/{name}.jsonl"
"""Where a test's recording lives unless configured: `{test_dir}`, `{module}` and `{name}` are filled per test."""

_KEYS = frozenset(("path", "policy", "allow_unused"))
_MODE = pytest.StashKey[Mode]()
_SESSION = pytest.StashKey[RecordingSession]()
_TABLE = pytest.StashKey[dict[str, Any]]()
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_NAME_LIMIT = 120


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add `--anagrapheus=MODE` and `--anagrapheus-force`."""
    group = parser.getgroup("anagrapheus", "pin pydantic-ai agent runs into per-test recordings")
    group.addoption(
        "--anagrapheus",
        dest="anagrapheus_mode",
        choices=MODES,
        default=None,
        help="replay (default; a miss fails), record (draw what diverged, rewrite the recording),"
        " rewrite (draw everything anew) or live (no recording). Default: $ANAGRAPHEUS_MODE or replay.",
    )
    group.addoption(
        "--anagrapheus-force",
        dest="anagrapheus_force",
        action="store_true",
        help="allow record and rewrite where CI is set (also $ANAGRAPHEUS_FORCE=1)",
    )


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def _mode(config: pytest.Config) -> Mode:
    given = cast("str | None", config.getoption("anagrapheus_mode"))
    if given is None:
        given = os.environ.get("ANAGRAPHEUS_MODE") or "replay"
        if given not in MODES:
            raise pytest.UsageError(f"ANAGRAPHEUS_MODE={given!r} is not a mode; use one of {', '.join(MODES)}")
    mode = cast("Mode", given)
    forced = bool(config.getoption("anagrapheus_force")) or _truthy(os.environ.get("ANAGRAPHEUS_FORCE"))
    if mode in ("record", "rewrite") and _truthy(os.environ.get("CI")) and not forced:
        raise pytest.UsageError(
            f"--anagrapheus={mode} is refused because CI is set: CI replays recordings, it does not make them."
            " Record on a workstation and commit the files, or pass --anagrapheus-force."
        )
    return mode


def _table(config: pytest.Config) -> dict[str, Any]:
    """The `[tool.anagrapheus]` table of the project's pyproject.toml, if any."""
    pyproject = config.rootpath / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        with pyproject.open("rb") as file:
            document = tomllib.load(file)
    except tomllib.TOMLDecodeError as e:
        raise pytest.UsageError(f"{pyproject}: {e}") from None
    table: object = document.get("tool", {}).get("anagrapheus", {})
    if not isinstance(table, dict):
        raise pytest.UsageError(f"{pyproject}: [tool.anagrapheus] must be a table")
    return cast("dict[str, Any]", table)


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, settle the mode (refusing record and rewrite under CI) and read the config table."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(path=None, policy=None, allow_unused=False): pin every pydantic-ai agent run of the test"
        " into its recording, replayed strictly unless --anagrapheus says otherwise.",
    )
    config.stash[_MODE] = _mode(config)
    config.stash[_TABLE] = _table(config)


def recording_name(nodeid: str) -> str:
    """The file-safe name of a test's recording: `Class.test_name.param-id`, hashed where characters were lost."""
    _, _, inside = nodeid.partition("::")
    base, bracket, params = (inside or nodeid).partition("[")
    readable = base.replace("::", ".") + (f".{params[:-1]}" if bracket else "")
    safe = _SAFE.sub("_", readable)
    if safe != readable or len(safe) > _NAME_LIMIT:
        # Two ids that differ only in the characters replaced must not share a file.
        safe = f"{safe[:_NAME_LIMIT]}-{hashlib.sha256(readable.encode()).hexdigest()[:8]}"
    return safe


def _policy(value: object, *, where: str) -> CallPolicy | None:
    if value is None or not isinstance(value, str):
        return cast("CallPolicy | None", value)
    module, _, attribute = value.partition(":")
    try:
        found: object = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as e:
        raise pytest.UsageError(f"{where}: policy {value!r} is not an importable 'module:attribute' ({e})") from None
    return cast("CallPolicy", found() if isinstance(found, type) else found)


def _settings(item: pytest.Item, fixture: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, Any]:
    """Marker keywords (closest first) over the `anagrapheus_config` fixture over `[tool.anagrapheus]`."""
    test_dir = item.path.parent
    chosen: dict[str, Any] = {}
    bases: dict[str, Path] = {}
    for marker in item.iter_markers(MARKER):
        unknown = sorted(set(marker.kwargs) - _KEYS)
        if marker.args or unknown:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} takes only {sorted(_KEYS)} as keywords")
        for key, value in marker.kwargs.items():
            if key not in chosen:
                chosen[key], bases[key] = value, test_dir
    for source, base in ((fixture, test_dir), (table, item.config.rootpath)):
        for key in _KEYS & source.keys():
            if key not in chosen:
                chosen[key], bases[key] = source[key], base
    template = str(chosen.get("path", DEFAULT_PATH))
    try:
        path = Path(template.format(test_dir=test_dir, module=item.path.stem, name=recording_name(item.nodeid)))
    except (KeyError, IndexError, ValueError) as e:
        raise pytest.UsageError(
            f"{item.nodeid}: recording path {template!r} may use only {{test_dir}}, {{module}} and {{name}} ({e!r})"
        ) from None
    allow_unused = chosen.get("allow_unused", False)
    if not isinstance(allow_unused, bool):
        raise pytest.UsageError(f"{item.nodeid}: allow_unused must be true or false, not {allow_unused!r}")
    return {
        "path": path if path.is_absolute() else bases.get("path", test_dir) / path,
        "policy": _policy(chosen.get("policy"), where=item.nodeid),
        "allow_unused": allow_unused,
    }


@pytest.fixture
def anagrapheus_config() -> dict[str, Any]:
    """Override in a conftest.py to set `path`, `policy` or `allow_unused` for the tests below it."""
    return {}


@pytest.fixture
def anagrapheus(request: pytest.FixtureRequest, anagrapheus_config: dict[str, Any]) -> Generator[RecordingSession]:
    """The test's recording session: its `capability`, its `resolver` and its recording `path`."""
    item = request.node
    assert isinstance(item, pytest.Item)
    settings = _settings(item, anagrapheus_config, item.config.stash[_TABLE])
    session = RecordingSession(
        settings["path"],
        name=item.nodeid,
        rerecord=f"pytest {shlex.quote(item.nodeid)} --anagrapheus=record",
        mode=item.config.stash[_MODE],
        policy=settings["policy"],
        allow_unused=settings["allow_unused"],
    )
    item.stash[_SESSION] = session
    try:
        with session.active():
            yield session
    finally:
        session.close()


@pytest.fixture(autouse=True)
def _anagrapheus_marked(request: pytest.FixtureRequest) -> None:  # pyright: ignore[reportUnusedFunction]
    """Give every marked test the `anagrapheus` fixture, whether or not it asks for it."""
    if request.node.get_closest_marker(MARKER) is not None:
        request.getfixturevalue("anagrapheus")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Fail a replay with no recording before the test runs; conclude the session once the test passed."""
    session = item.stash.get(_SESSION, None)
    if session is not None:
        session.require()
    outcome = yield
    if session is not None:
        session.finish()
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """Replace the traceback of a test that left its recording with a short account of what moved."""
    report = cast("pytest.TestReport", (yield))
    session = item.stash.get(_SESSION, None)
    if session is None or report.when != "call" or not report.failed:
        return report
    error = call.excinfo.value if call.excinfo is not None else None
    text = session.report()
    if text is None and isinstance(error, (RecordingMissing, UnusedPins)):
        text = f"{item.nodeid}: {error}"
        if isinstance(error, UnusedPins):
            text += f"\n  re-record: {session.rerecord}"
    if text is not None and (isinstance(error, AnagrapheusError) or session.divergence is not None):
        report.longrepr = text
    return report
