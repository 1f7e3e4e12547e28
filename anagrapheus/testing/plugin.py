"""The pytest plugin (entry point `anagrapheus`): mark a test, record once, replay strictly on every run after.

A thin shell over `RecordingSession`: options, the marker, fixtures, and where a test's recording lives.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import tempfile
import threading
import tomllib
from collections.abc import Generator, Iterable, Mapping
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest

from anagrapheus.errors import (
    AnagrapheusError,
    PinMiss,
    RecordingConflict,
    RecordingDrifted,
    UnresolvedName,
    UnusedPins,
)
from anagrapheus.importing import load_object, load_typed
from anagrapheus.provider import CallPolicy
from anagrapheus.provider.usage import PinnedUsage
from anagrapheus.testing.session import MODES, Mode, RecordingSession
from anagrapheus.timeline import DEFAULT_RULES, SecretRule, SecretScanner

__all__ = ["DEFAULT_PATH", "MARKER", "recording_name"]

# The determinism guard (`--anagrapheus-guard`) keeps its hooks in a module of its own.
pytest_plugins = ["anagrapheus.testing.entropy.plugin"]

MARKER = "anagrapheus"
DEFAULT_PATH = "{test_dir}/recordings/{module}/{name}.jsonl"
"""Where a test's recording lives unless configured: `{test_dir}`, `{module}` and `{name}` are filled per test."""

_KEYS = frozenset(("path", "policy", "allow_unused", "redact", "max_age"))
_MODE = pytest.StashKey[Mode]()
_SESSION = pytest.StashKey[RecordingSession]()
_TABLE = pytest.StashKey[dict[str, Any]]()
_CLAIMS = pytest.StashKey[Path]()
# The error the plugin itself raised for a test (its recording missing, stale, unreadable or unwritable): shown as
# its message alone, where a traceback through the plugin would say nothing more.
_OURS = pytest.StashKey[AnagrapheusError]()
_CLAIMS_OPTION = "anagrapheus_claims"
_REPLAYED = "anagrapheus_replayed"
"""The user property a replayed test's report carries: what its recording answered (`PinnedUsage.as_json`)."""
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
        " rewrite (draw everything anew), live (no recording) or drift (draw every model call live, the world"
        " from the recording, and fail where the provider now answers otherwise; writes nothing)."
        " Default: $ANAGRAPHEUS_MODE or replay.",
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
        f"{MARKER}(path=None, policy=None, allow_unused=False, redact=None, max_age=None): pin every pydantic-ai"
        " agent run of the test into its recording, replayed strictly unless --anagrapheus says otherwise.",
    )
    config.stash[_MODE] = _mode(config)
    config.stash[_TABLE] = _table(config)
    workerinput: object = getattr(config, "workerinput", None)
    given = cast("dict[str, Any]", workerinput).get(_CLAIMS_OPTION) if isinstance(workerinput, dict) else None
    if given is not None:
        config.stash[_CLAIMS] = Path(given)
    elif config.stash[_MODE] in ("record", "rewrite"):
        # Which test writes which recording, for the whole session: xdist workers are handed this folder, and
        # only the process that made it (the controller) removes it, once every worker is done.
        claims = Path(tempfile.mkdtemp(prefix="anagrapheus-claims-"))
        config.stash[_CLAIMS] = claims
        config.add_cleanup(partial(shutil.rmtree, claims, ignore_errors=True))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Under xdist: hand each worker the session's claims folder, so two workers cannot write one recording."""
    claims = cast("pytest.Config", node.config).stash.get(_CLAIMS, None)
    node.workerinput[_CLAIMS_OPTION] = None if claims is None else str(claims)


def _claim(claims: Path, path: Path, nodeid: str, *, shown: str) -> None:
    """Claim `path` for `nodeid` for the session; raise `RecordingConflict` if another test claimed it first."""
    claim = claims / hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()
    draft = claim.with_name(f"{claim.name}.{os.getpid()}.{threading.get_ident()}")
    draft.write_text(nodeid, encoding="utf-8")
    try:
        # A hard link appears whole or not at all: a reader never finds a claim without its test's id.
        os.link(draft, claim)
    except FileExistsError:
        first = claim.read_text(encoding="utf-8")
        if first != nodeid:
            raise RecordingConflict(shown, first=first, second=nodeid) from None
    finally:
        draft.unlink()


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
    try:
        return load_typed(value, CallPolicy, what="a CallPolicy")
    except UnresolvedName as e:
        raise pytest.UsageError(f"{where}: policy {e}") from None


def _redaction(value: object, *, where: str) -> SecretScanner | None:
    """The marker's `redact=`: a `SecretScanner`, `SecretRule`s beside the default rules, or `MODULE:NAME` of either."""
    if value is None or value is False:
        return None
    if value is True:
        return SecretScanner()
    if isinstance(value, str):
        try:
            value = load_object(value)
        except UnresolvedName as e:
            raise pytest.UsageError(f"{where}: redact {e}") from None
        if callable(value) and not isinstance(value, SecretScanner | SecretRule):
            value = value()  # a function making the scanner or the rules, as `policy=` may name one
    if isinstance(value, SecretScanner):
        return value
    if isinstance(value, SecretRule):
        value = [value]
    many = isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)
    rules: list[object] = list(cast("Iterable[object]", value)) if many else []
    if not rules or not all(isinstance(rule, SecretRule) for rule in rules):
        raise pytest.UsageError(
            f"{where}: redact takes a SecretScanner, SecretRules or 'module:NAME' naming either, not {value!r}"
        )
    return SecretScanner((*DEFAULT_RULES, *cast("list[SecretRule]", rules)))


def _max_age(value: object, *, where: str) -> timedelta | None:
    """The marker's `max_age=`: a `timedelta`, or a number of days."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return timedelta(days=value)
    raise pytest.UsageError(f"{where}: max_age takes a timedelta or a number of days, not {value!r}")


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
        "redact": _redaction(chosen.get("redact"), where=item.nodeid),
        "max_age": _max_age(chosen.get("max_age"), where=item.nodeid),
    }


@pytest.fixture
def anagrapheus_config() -> dict[str, Any]:
    """Override in a conftest.py to set `path`, `policy`, `allow_unused`, `redact` or `max_age` for the tests below."""
    return {}


@pytest.fixture
def anagrapheus(request: pytest.FixtureRequest, anagrapheus_config: dict[str, Any]) -> Generator[RecordingSession]:
    """The test's recording session: its `capability`, its `resolver` and its recording `path`."""
    item = request.node
    assert isinstance(item, pytest.Item)
    settings = _settings(item, anagrapheus_config, item.config.stash[_TABLE])
    try:
        session = RecordingSession(
            settings["path"],
            name=item.nodeid,
            rerecord=f"pytest {shlex.quote(item.nodeid)} --anagrapheus=record",
            mode=item.config.stash[_MODE],
            policy=settings["policy"],
            allow_unused=settings["allow_unused"],
            redact=settings["redact"],
            max_age=settings["max_age"],
        )
    except AnagrapheusError as e:
        item.stash[_OURS] = e
        raise
    item.stash[_SESSION] = session
    claims = item.config.stash.get(_CLAIMS, None)
    if claims is not None and session.mode in ("record", "rewrite"):
        try:
            _claim(claims, session.path, item.nodeid, shown=session.shown_path)
        except RecordingConflict as e:
            session.close()
            item.stash[_OURS] = e
            raise
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
    if session is None:
        return (yield)
    try:
        session.require()
    except AnagrapheusError as e:
        item.stash[_OURS] = e
        raise
    outcome = yield
    try:
        session.finish()
    except AnagrapheusError as e:
        item.stash[_OURS] = e
        raise
    if session.replayed is not None:
        # On the report (xdist carries user properties to the controller), for the session's summary line.
        item.user_properties.append((_REPLAYED, session.replayed.as_json()))
    return outcome


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say what the replays spared: the model calls the recordings answered, their tokens and their price."""
    spared = PinnedUsage()
    tests = 0
    for report in terminalreporter.stats.get("passed", []):
        for name, value in cast("list[tuple[str, object]]", getattr(report, "user_properties", [])):
            if name == _REPLAYED and isinstance(value, dict):
                tests += 1
                spared.add(PinnedUsage.from_json(cast("dict[str, Any]", value)))
    if tests:
        terminalreporter.write_line(spared.spared_line(tests))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """Show a failure the test itself raised as pytest does, and what the plugin adds after it, where it helps.

    A replay that left its recording is told in a short account instead of a traceback; an error the
    plugin raised (a recording missing, stale, unwritable, or holding a secret) by its message alone.
    """
    report = cast("pytest.TestReport", (yield))
    if not report.failed or call.excinfo is None:
        return report
    error = call.excinfo.value
    ours = item.stash.get(_OURS, None)
    session = item.stash.get(_SESSION, None)
    account = None if session is None or session.mode != "replay" else session.report()
    if account is not None and isinstance(error, AnagrapheusError):
        # The miss (or what the application made of it) is the failure: where the run left its recording.
        report.longrepr = account
    elif error is ours:
        text = f"{item.nodeid}: {error}"
        if isinstance(error, UnusedPins | PinMiss | RecordingDrifted) and session is not None:
            text += f"\n  re-record: {session.rerecord}"
        report.longrepr = text
    elif session is not None and report.when == "call":
        _add_section(report, account if account is not None else _not_written(session))
    return report


def _not_written(session: RecordingSession) -> str | None:
    """Under `record` and `rewrite`: that the failing test wrote nothing, and where its run left the recording."""
    if session.mode not in ("record", "rewrite"):
        return None
    text = f"the test failed, so {session.shown_path} was left as it was"
    divergence = session.divergence
    if divergence is not None:
        moved = ", ".join(divergence.moved) or "nothing the fingerprint covers"
        text += (
            f"\nthe run left the recording at a {divergence.kind} after {divergence.after_hits} hit(s)"
            f" (moved: {moved}) and drew from there on"
        )
    return text


def _add_section(report: pytest.TestReport, text: str | None) -> None:
    """Show `text` after the failure's own traceback, as a section of its own."""
    if text is not None:
        report.sections.append(("anagrapheus", text))
