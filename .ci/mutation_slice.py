"""Run mutmut over a fixed list of modules, each against its own test files, and score the result.

Usage (from the project root, with the `mutation` extra installed):

    python .ci/mutation_slice.py                  # the CI slice (SLICE below), fails below FLOOR
    python .ci/mutation_slice.py MODULE...        # any modules of TESTS_OF, e.g. anagrapheus/timeline/canonical.py
    python .ci/mutation_slice.py --equivalent [MODULE...]   # only check EQUIVALENT's names still hold their lines

mutmut reads `[tool.mutmut]` of pyproject.toml; this script narrows it in the running process (the files
mutated, the tests run), so a module's mutants run only against the test files written for it: seconds per
mutant instead of the hundreds of tests that merely pass through it. Those are the tests that ought to kill
them; the whole suite could only kill more. The verdicts are mutmut's; a timeout counts as killed.

Determinism: the list is fixed, hypothesis runs derandomized without its example database
(`--hypothesis-profile=anagrapheus-fixed`), and no test run here may open a network connection (refused in
this process, which every mutmut worker is forked from), with one exception: with ANAGRAPHEUS_POSTGRES_DSN
set, the PostgreSQL server it names, and nothing else, is let through.

The PostgreSQL modules (NEEDS_POSTGRES) are measured only against a server that answers:

    ANAGRAPHEUS_POSTGRES_DSN=postgresql://postgres@127.0.0.1:5432/test \
        python .ci/mutation_slice.py anagrapheus/timeline/stores/postgres.py

Without the variable, or without a server answering there, the run stops before mutating anything; with it,
a Postgres test that skips fails (`--require-postgres`), so a server gone mid-run cannot pass for surviving
mutants, and the server is asked again after the run.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))

from mutation_score import EQUIVALENT, score  # noqa: E402

FLOOR = 90.0
"""Percent of the slice's mutants that must be killed (equivalent mutants excluded)."""


def tests_of(module: str) -> list[str]:
    """The test files written for `module`, found from their paths: tests/LAYER/test_NAME.py and test_NAME_*.py.

    A file belongs to one module: the one of its folder whose name is the longest prefix of the file's, so
    `tests/timeline/resolving/test_ledger_races.py` is `timeline/resolving/ledger.py`'s,
    and `tests/timeline/recording/test_header.py` is `timeline/recording/header.py`'s,
    not `timeline/recording/__init__.py`'s (tests/test_layout.py keeps every file so named), and a subpackage's tests
    have a folder of their own (`tests/provider/keying/test_history.py` is `provider/keying/history.py`'s).
    A test that starts Python processes importing the package lives in tests/integration/, which mirrors no
    module: the child would inherit mutmut's environment and fail in its trampoline.
    """
    source = Path(module)
    layer = source.parent.relative_to("anagrapheus")
    folder = ROOT / "tests" / layer
    siblings = sorted((p.stem for p in (ROOT / source.parent).glob("*.py")), key=len, reverse=True)

    def owner(test: Path) -> str | None:
        name = test.stem.removeprefix("test_")
        return next((s for s in siblings if name == s or name.startswith(s + "_")), None)

    return [f"tests/{layer}/{t.name}" for t in sorted(folder.glob("test_*.py")) if owner(t) == source.stem]


MUTATED = sorted(
    str(p.relative_to(ROOT))
    for layer in ("timeline", "provider")
    for p in (ROOT / "anagrapheus" / layer).rglob("*.py")
    if p.name != "__init__.py"
)
"""The modules that can be mutated here: those of `[tool.mutmut]`'s `only_mutate` with test files of their own."""

TESTS_OF: dict[str, list[str]] = {m: tests for m in MUTATED if (tests := tests_of(m))}
"""Each module, and the test files written for it (derived from paths by `tests_of`)."""

SLICE = [
    "anagrapheus/timeline/canonical.py",
    "anagrapheus/timeline/divergence.py",
    "anagrapheus/timeline/upcast.py",
]
"""The modules CI mutates: at the core (keys, the diagnosis of a miss, reading old events), with fast tests."""

NEEDS_POSTGRES = ["anagrapheus/timeline/stores/postgres.py", "anagrapheus/timeline/stores/postgres_schema.py"]
"""Modules whose tests all need a PostgreSQL server: without one every mutant would survive as its tests skip."""


def _refuse_network(postgres_dsn: str | None) -> None:
    """Make every internet connection and name lookup in this process (and its forks) fail, but to `postgres_dsn`.

    libpq connects in C, past Python's sockets: psycopg's connections are checked where psycopg reads their
    parameters, and one to any server but the DSN's is refused with psycopg's own error, as a closed port is.
    """
    try:
        import psycopg
    except ImportError:  # then nothing here can reach a PostgreSQL server
        psycopg = None
    allowed = None
    if postgres_dsn is not None and psycopg is not None:
        allowed = _server(psycopg.Connection._get_connection_params(postgres_dsn))
    # The DSN's host as Python would look it up and connect to it (psycopg resolves a name itself, not libpq).
    addresses = set()
    if allowed is not None and allowed[0] and not allowed[0].startswith("/"):
        addresses = {(info[4][0], int(allowed[1])) for info in socket.getaddrinfo(allowed[0], allowed[1])}

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and tuple(address[:2]) not in addresses:
            raise OSError(f"the mutation run never reaches the network (connect to {address!r})")
        return original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and tuple(address[:2]) not in addresses:
            raise OSError(f"the mutation run never reaches the network (connect to {address!r})")
        return original_connect_ex(self, address)

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if allowed is None or (host, str(port)) != allowed:
            raise OSError(f"the mutation run never reaches the network (name lookup of {host!r})")
        return original_getaddrinfo(host, port, *args, **kwargs)

    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo
    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    if psycopg is not None:
        _refuse_postgres(psycopg, allowed)


def _refuse_postgres(psycopg: Any, allowed: tuple[str, str] | None) -> None:
    """Make psycopg refuse, before libpq connects, every connection but to the `allowed` host and port."""

    def checked(params: Any) -> Any:
        if _server(params) != allowed:
            host, port = _server(params)
            raise psycopg.OperationalError(
                f"the mutation run never reaches the network (a PostgreSQL connection to {host or 'the local socket'}"
                f":{port}; only ANAGRAPHEUS_POSTGRES_DSN's server is let through)"
            )
        return params

    sync_params = psycopg.Connection._get_connection_params.__func__
    async_params = psycopg.AsyncConnection._get_connection_params.__func__

    def get_params(cls: Any, conninfo: str, **kwargs: Any) -> Any:
        return checked(sync_params(cls, conninfo, **kwargs))

    async def aget_params(cls: Any, conninfo: str, **kwargs: Any) -> Any:
        return checked(await async_params(cls, conninfo, **kwargs))

    psycopg.Connection._get_connection_params = classmethod(get_params)
    psycopg.AsyncConnection._get_connection_params = classmethod(aget_params)


def _server(params: Any) -> tuple[str, str]:
    """The host (or socket directory) and port a psycopg connection's parameters lead to, as libpq picks them."""
    host = params.get("hostaddr") or params.get("host") or os.environ.get("PGHOSTADDR") or os.environ.get("PGHOST")
    return str(host or ""), str(params.get("port") or os.environ.get("PGPORT") or "5432")


def _postgres_unavailable(dsn: str | None) -> str | None:
    """Why the PostgreSQL modules cannot be measured here, or None when the DSN's server answers."""
    if dsn is None:
        return "set ANAGRAPHEUS_POSTGRES_DSN to a PostgreSQL server (e.g. postgresql://postgres@127.0.0.1:5432/test)"
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev,mutation]')"
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"no PostgreSQL answers at ANAGRAPHEUS_POSTGRES_DSN: {first}"
    return None


def main(modules: list[str]) -> int:
    """Mutate `modules` against their tests; print the score and the survivors; 1 below FLOOR (CI slice only)."""
    unknown = [m for m in modules if m not in TESTS_OF]
    if unknown:
        print(f"no test files are named for {unknown} (tests/LAYER/test_NAME*.py; see tests_of)", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    # From scratch: mutmut keeps verdicts in mutants/ across runs, and a verdict reached against other tests
    # (another selection, an older tree) would stand.
    shutil.rmtree("mutants", ignore_errors=True)
    postgres_dsn = os.environ.get("ANAGRAPHEUS_POSTGRES_DSN")
    needs_postgres = postgres_dsn is not None or any(m in NEEDS_POSTGRES for m in modules)
    if needs_postgres and (reason := _postgres_unavailable(postgres_dsn)) is not None:
        # Else every test of these modules would skip and every mutant survive: a score of nothing.
        print(f"cannot measure {modules}: {reason}", file=sys.stderr)
        return 2
    _refuse_network(postgres_dsn)
    from mutmut.__main__ import cli
    from mutmut.configuration import config

    tests = sorted({t for m in modules for t in TESTS_OF[m]})
    cfg = config()
    cfg.only_mutate = modules
    cfg.pytest_add_cli_args_test_selection = tests
    cfg.pytest_add_cli_args = [*cfg.pytest_add_cli_args, "--hypothesis-profile=anagrapheus-fixed"]
    if needs_postgres:
        # A Postgres test that skips fails, as under CI=true: no mutant survives because the server was away.
        cfg.pytest_add_cli_args.append("--require-postgres")
    print(f"mutating {modules}\nagainst {tests}", flush=True)
    started = time.monotonic()
    try:
        cli.main(["run"], standalone_mode=False)
    except SystemExit as stop:
        if stop.code:
            return 1
    print(f"mutmut ran for {time.monotonic() - started:.0f} s")
    if needs_postgres and (reason := _postgres_unavailable(postgres_dsn)) is not None:
        # A server gone during the run failed the tests of the mutants run after it: they count as killed.
        print(f"the PostgreSQL server went away during the run, so its verdicts stand for nothing: {reason}")
        return 1
    prefixes = [m.removesuffix(".py").replace("/", ".") + "." for m in modules]
    equivalent = [name for name in EQUIVALENT if name.startswith(tuple(prefixes))]
    stale = _stale(cli, equivalent)
    if stale:
        print(f"equivalent mutants no longer holding their line (update EQUIVALENT in .ci/mutation_score.py): {stale}")
        return 1
    return score(FLOOR, prefixes, _output(cli, ["results", "--all", "true"]).splitlines(), equivalent)


def check_equivalent(modules: list[str]) -> int:
    """Generate `modules`' mutants without running any, and fail if a name in EQUIVALENT no longer holds its line.

    Seconds, where a run takes minutes: after a module changes, this says which exclusions mutmut renumbered
    or dropped (each must be looked at again), without measuring the module.
    """
    os.chdir(ROOT)
    shutil.rmtree("mutants", ignore_errors=True)
    from mutmut.__main__ import cli, create_mutants
    from mutmut.configuration import config

    config().only_mutate = modules
    with contextlib.redirect_stdout(io.StringIO()):
        create_mutants(max_children=os.cpu_count() or 1)
    prefixes = tuple(m.removesuffix(".py").replace("/", ".") + "." for m in modules)
    named = [name for name in EQUIVALENT if name.startswith(prefixes)]
    stale = _stale(cli, named)
    for name in stale:
        print(f"  no longer holds its line: {name}")
    print(f"{len(named) - len(stale)} of {len(named)} equivalent mutants of {len(modules)} module(s) hold their lines")
    return 1 if stale else 0


def _stale(cli: Any, names: list[str]) -> list[str]:
    """The names of `EQUIVALENT` among `names` whose mutant no longer writes the line recorded for it."""
    return [name for name in names if _mutated_line(cli, name) != EQUIVALENT[name][0]]


def _output(cli: Any, arguments: list[str]) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli.main(arguments, standalone_mode=False)
    return printed.getvalue()


def _mutated_line(cli: Any, name: str) -> str | None:
    """The line a mutant puts in place of the original (the `+` line of `mutmut show`), or None."""
    try:
        diff = _output(cli, ["show", name])
    except Exception:  # a name mutmut no longer generates
        return None
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added[0] if len(added) == 1 else None


if __name__ == "__main__":
    if sys.argv[1:2] == ["--equivalent"]:
        sys.exit(check_equivalent(sys.argv[2:] or MUTATED))
    sys.exit(main(sys.argv[1:] or SLICE))
