"""Shared fixtures; real model requests are blocked for every test, as in pydantic-ai's own suite."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings
from pydantic import BaseModel
from pydantic_ai import models
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from tests import bounds
from tests.fork_server import ForkServer, fork_server

if TYPE_CHECKING:
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

# A test that reaches a real provider is a bug: pydantic-ai refuses every model but its test doubles.
models.ALLOW_MODEL_REQUESTS = False

# Properties are checked on what they compute, never on how fast: a loaded 2-core CI machine must not fail one.
settings.register_profile("anagrapheus", deadline=None)
settings.load_profile("anagrapheus")
# The same verdict on every run, whatever ran before (`--hypothesis-profile=anagrapheus-fixed`): the mutation slice
# in .ci/run runs one test for many mutants, and a failure saved by one must not be replayed against the next.
settings.register_profile("anagrapheus-fixed", deadline=None, derandomize=True, database=None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="scale the crash, fuzz and stress runs (tests marked soak) to their long sizes; see tests/bounds.py",
    )
    parser.addoption(
        "--require-postgres",
        action="store_true",
        default=False,
        help="fail a Postgres test that skips (no server, no psycopg), as CI=true does; .ci/mutation_slice.py sets it",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Before collection, so the test modules size their runs from it when they are imported.
    bounds.SOAK = bool(config.getoption("soak"))


# The modules that run under the project's own determinism guard (`anagrapheus_guard = true` and
# `[tool.anagrapheus.entropy]` in pyproject.toml; docs/how-to/guard-entropy.md). Left out: modules that start
# processes or reach sockets by design (crash tests, stub servers, PostgreSQL), and pytester runs, which guard
# their own tests (guarded bodies do not nest).
GUARDED_MODULES = frozenset(
    [
        "test_identity.py",
        "provider/test_capability.py",
        "provider/test_capability_clock.py",
        "provider/test_model.py",
        "provider/test_policy.py",
        "provider/test_policy_key_rules.py",
        "provider/keying/test_material_stability.py",
        "provider/test_tools.py",
        "testing/test_compare.py",
        "testing/test_regress.py",
        "timeline/test_canonical.py",
        "timeline/stores/test_copying.py",
        "timeline/test_divergence.py",
        "timeline/test_events.py",
        "timeline/test_fingerprint.py",
        "timeline/resolving/test_ledger.py",
        "timeline/test_recording.py",
        "timeline/recording/test_header.py",
        "timeline/recording/test_lines.py",
        "timeline/resolving/test_replay.py",
        "timeline/stores/test_sqlite.py",
        "timeline/stores/test_stamps.py",
        "timeline/test_upcast.py",
    ]
)
"""Paths below tests/, '/'-separated."""

UNGUARDED_TESTS = {
    "timeline/stores/test_sqlite.py::test_a_lease_is_taken_over_only_from_a_holder_that_is_gone": "asks if a pid lives",
}
"""Tests of a guarded module that reach what the guard refuses by design, each with why (node ids below tests/)."""

TESTS = Path(__file__).parent


# The slowest test files, slowest first (summed from `pytest -n 2 --durations=60` per file; docs/testing.md). They are
# collected first, so xdist's workers (`--dist loadfile`, in collection order) start on them and finish together on
# short files, instead of one worker running a long file alone at the end. Any order is correct: this one is only
# faster. tests/test_suite_order.py fails on a name that is no file (a file renamed without its entry here).
SLOWEST_FIRST = [
    "testing/test_entropy.py",
    "docs/test_benchmarks_smoke.py",
    "cli/test_export_as_test.py",
    "integration/test_dbos_recipe.py",
    "integration/test_ledger_commit_order.py",
    "integration/test_postgres_skips.py",
    "cli/test_cli_faults.py",
    "testing/test_plugin_faults.py",
    "testing/test_plugin.py",
    "docs/test_negotiation_demo.py",
    "integration/test_fidelity.py",
    "provider/test_policy_properties.py",
    "integration/test_capability_mcp.py",
    "test_surface.py",
    "integration/test_fidelity_providers.py",
    "integration/test_lease_takeover.py",
    "provider/keying/test_history_mutation.py",
    "cli/test_cli.py",
    "docs/test_docs.py",
    "integration/test_sqlite_read_only_mount.py",
    "integration/test_crash.py",
    "integration/test_durable_resume.py",
    "integration/test_postgres_processes.py",
    "provider/keying/test_material_stability.py",
    "cli/test_view_browser.py",
    "integration/test_kill_run.py",
]


def _under_tests(path: Path) -> str:
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        module = item.path.relative_to(TESTS).as_posix()
        if module in GUARDED_MODULES and f"{module}::{getattr(item, 'originalname', item.name)}" not in UNGUARDED_TESTS:
            item.add_marker(pytest.mark.anagrapheus_guard)
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # Stable: the rest keep their order.
    items.sort(key=lambda item: rank.get(_under_tests(item.path), len(rank)))


POSTGRES_DSN = os.environ.get("ANAGRAPHEUS_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
"""Where the Postgres tests run (trust authentication on the project's machines); each test gets its own schema."""


def _postgres_unavailable() -> str | None:
    """Why the Postgres tests cannot run here, in one line, or None when a server answers."""
    try:
        import psycopg

        from anagrapheus.timeline.stores.postgres_schema import PostgresPlace
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    place = PostgresPlace.of(POSTGRES_DSN, "public")
    try:
        psycopg.connect(POSTGRES_DSN, connect_timeout=3).close()
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"no PostgreSQL at {place.server}, database {place.database} (set ANAGRAPHEUS_POSTGRES_DSN): {first}"
    return None


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    reason = _postgres_unavailable()
    if reason is not None:
        pytest.skip(reason)
    return POSTGRES_DSN


@pytest.fixture(scope="session")
def forks() -> Iterator[ForkServer]:
    """Children forked from one process that has imported anagrapheus, for the tests that SIGKILL many of them."""
    # The PostgreSQL store too where psycopg is installed: its writers would import it after every kill.
    postgres = ["anagrapheus.timeline.stores.postgres"] if importlib.util.find_spec("psycopg") else []
    with fork_server("anagrapheus.timeline", *postgres) as server:
        yield server


@pytest.fixture
def pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name for one test, dropped (with everything in it) afterwards."""
    import psycopg

    name = f"anagrapheus_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")  # pyright: ignore


@pytest.fixture
def open_pg(postgres_dsn: str, pg_schema: str) -> Iterator[Callable[..., PostgresEventStore]]:
    """Open stores in this test's schema (keyword options pass through); all are closed afterwards."""
    opened: list[PostgresEventStore] = []

    from anagrapheus.timeline.stores.postgres import PostgresEventStore  # psycopg is needed here only

    def make(**options: object) -> PostgresEventStore:
        store = PostgresEventStore(postgres_dsn, **{"schema": pg_schema, **options})  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Under CI a Postgres test must run for real: a skip (no server, no psycopg) fails it instead. So it must in a
    # mutation run of the store's modules (--require-postgres), where a skip would pass for a surviving mutant.
    report = yield
    if report.skipped and item.get_closest_marker("postgres") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if os.environ.get("CI") == "true":
            report.outcome = "failed"
            report.longrepr = f"a Postgres test was skipped under CI=true, which counts as a failure: {reason}"
        elif item.config.getoption("require_postgres"):
            report.outcome = "failed"
            report.longrepr = f"a Postgres test was skipped under --require-postgres, a failure as under CI: {reason}"
    # So must a durable engine's (its server cannot start, its package is missing): CI starts all three.
    if report.skipped and item.get_closest_marker("durable") is not None and os.environ.get("CI") == "true":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a durable-engine test was skipped under CI=true, which counts as a failure: {reason}"
    return report


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CI, mode or force variable: CI sets CI=true, which refuses recording (`usefixtures("outside_ci")`)."""
    for name in ("CI", "ANAGRAPHEUS_MODE", "ANAGRAPHEUS_FORCE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def production(tmp_path: Path) -> Path:
    """A production log: the support agent run twice in unit support-7 (`tests.testing.test_rerun.record`)."""
    from tests.testing.test_rerun import record

    return record(tmp_path / "prod.db")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "run.db"


@pytest.fixture
def types() -> EventTypeRegistry:
    registry = EventTypeRegistry()
    return registry


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteEventStore]:
    opened = SQLiteEventStore(db_path)
    yield opened
    opened.close()


class Verdict(BaseModel):
    """The structured output the scripted models produce when asked for one."""

    city: str
    tonnes: int


@dataclass
class Scripted:
    """A scripted `FunctionModel` that plays one part and counts how often it is reached.

    It calls every function tool it is offered (with `city="Paris"`), then answers with text
    naming what the tools returned, or with a `Verdict` when the run asks for structured output.
    """

    name: str
    text: str = "The UK holds firm on fisheries."
    calls: int = 0
    fail_after_chunks: int | None = None

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self._answer, stream_function=self._stream, model_name=self.name)

    def _decide(self, messages: list[ModelMessage], info: AgentInfo) -> list[ModelResponsePart]:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if info.function_tools and not returns:
            return [ToolCallPart(tool.name, {"city": "Paris"}) for tool in info.function_tools]
        if info.output_tools:
            return [ToolCallPart(info.output_tools[0].name, {"city": "Paris", "tonnes": 10 * len(returns)})]
        seen = "; ".join(str(part.content) for part in returns)
        return [TextPart(f"{self.text} {seen}".strip())]

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=self._decide(messages, info))

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        self.calls += 1
        parts = self._decide(messages, info)
        chunks: list[str | DeltaToolCalls] = []
        for index, part in enumerate(parts):
            if isinstance(part, TextPart):
                chunks.extend(word + " " for word in part.content.split(" "))
            elif isinstance(part, ToolCallPart):
                args = json.dumps(part.args)
                half = len(args) // 2
                chunks.append({index: DeltaToolCall(name=part.tool_name, json_args=args[:half])})
                chunks.append({index: DeltaToolCall(json_args=args[half:])})
        for sent, chunk in enumerate(chunks):
            if self.fail_after_chunks is not None and sent == self.fail_after_chunks:
                raise ConnectionError("the provider dropped the stream")
            yield chunk


@pytest.fixture
def ledger(store: SQLiteEventStore, types: EventTypeRegistry) -> PinLedger:
    return PinLedger(store, types)


class SaysNothing:
    """A resolver over a ledger with the protocol's three methods only, as one written before the rest existed."""

    def __init__(self, ledger: PinLedger) -> None:
        self.ledger = ledger

    def resolve(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve(key, **options)

    async def aresolve(self, key: str, **options: Any) -> Any:
        return await self.ledger.aresolve(key, **options)

    def resolve_stream(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve_stream(key, **options)


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Python's own SIGINT handler for the test: `interrupt_main` does nothing where SIGINT is ignored or default.

    pytest started in the background by a non-interactive shell (`pytest ... &`) inherits SIGINT ignored, and Python
    keeps an inherited "ignored" rather than installing its own handler, as do the xdist workers; then no
    KeyboardInterrupt would be raised and the test would fail for a reason of how it was launched.
    """
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
