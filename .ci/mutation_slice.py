"""Run mutmut over a fixed list of modules, each against its own test files, and score the result.

Usage (from the project root, with the `mutation` extra installed):

    python .ci/mutation_slice.py                  # the CI slice (SLICE below), fails below FLOOR
    python .ci/mutation_slice.py MODULE...        # any modules of TESTS_OF, e.g. anagrapheus/timeline/replay.py

mutmut reads `[tool.mutmut]` of pyproject.toml; this script narrows it in the running process (the files
mutated, the tests run), so a module's mutants run only against the test files written for it: seconds per
mutant instead of the hundreds of tests that merely pass through it. Those are the tests that ought to kill
them; the whole suite could only kill more. The verdicts are mutmut's; a timeout counts as killed.

Determinism: the list is fixed, hypothesis runs derandomized without its example database
(`--hypothesis-profile=anagrapheus-fixed`), and no test run here may open a network connection (refused in
this process, which every mutmut worker is forked from).
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

TESTS_OF: dict[str, list[str]] = {
    "anagrapheus/timeline/canonical.py": ["tests/test_canonical.py"],
    "anagrapheus/timeline/divergence.py": [
        "tests/test_divergence_report.py",
        "tests/test_divergence_values.py",
        "tests/test_divergence_nearest.py",
    ],
    "anagrapheus/timeline/fingerprint.py": [
        "tests/test_fingerprint.py",
        "tests/test_divergence_values.py",
        "tests/test_divergence_nearest.py",
    ],
    "anagrapheus/timeline/upcast.py": ["tests/test_upcast.py", "tests/test_events.py"],
    "anagrapheus/timeline/events.py": [
        "tests/test_events.py",
        "tests/test_recording.py",
        "tests/test_recording_checks.py",
        "tests/test_ledger.py",
        "tests/test_replay_corrupt_pins.py",
        "tests/test_pin_codec.py",
    ],
    "anagrapheus/timeline/recording.py": [
        "tests/test_recording.py",
        "tests/test_recording_checks.py",
        "tests/test_recording_files.py",
        "tests/test_recording_provenance.py",
        "tests/test_recording_secrets.py",
    ],
    "anagrapheus/timeline/secrets.py": [
        "tests/test_secret_card_numbers.py",
        "tests/test_recording_secrets.py",
        "tests/test_secret_policy.py",
    ],
    "anagrapheus/timeline/provenance.py": [
        "tests/test_provenance_rules.py",
        "tests/test_recording_provenance.py",
        "tests/test_recording.py",
    ],
    "anagrapheus/timeline/replay.py": [
        "tests/test_replay.py",
        "tests/test_replay_record_async.py",
        "tests/test_recording.py",
        "tests/test_replay_corrupt_pins.py",
        "tests/test_divergence_nearest.py",
        "tests/test_replay_sources.py",
        "tests/test_recording_provenance.py",
    ],
    "anagrapheus/timeline/copying.py": ["tests/test_copy_rules.py", "tests/test_copy.py"],
    "anagrapheus/timeline/ownership.py": ["tests/test_sqlite_ownership.py", "tests/test_ownership_rules.py"],
    "anagrapheus/timeline/sqlite.py": [
        "tests/test_sqlite_store.py",
        "tests/test_sqlite_store_rules.py",
        "tests/test_sqlite_ownership.py",
        "tests/test_sqlite_utils_side_effects.py",
    ],
    "anagrapheus/timeline/stamps.py": ["tests/test_stamps.py", "tests/test_sqlite_store.py"],
    "anagrapheus/timeline/seeded.py": ["tests/test_seeded.py", "tests/test_capability_clock.py"],
    "anagrapheus/timeline/failures.py": ["tests/test_failure_pins.py", "tests/test_capability_failures.py"],
    "anagrapheus/timeline/pins.py": [
        "tests/test_ledger.py",
        "tests/test_ledger_failures.py",
        "tests/test_ledger_races.py",
        "tests/test_ledger_outcomes.py",
        "tests/test_failure_pins.py",
        "tests/test_replay_record_async.py",
    ],
    "anagrapheus/provider/failures.py": [
        "tests/test_exception_codec.py",
        "tests/test_capability_failures.py",
        "tests/test_capability_telemetry.py",
        "tests/test_provider_model.py",
    ],
    "anagrapheus/provider/compat.py": [
        "tests/test_compat.py",
        "tests/test_capability_failures.py",
        "tests/test_capability_telemetry.py",
    ],
    "anagrapheus/provider/policy_settings.py": ["tests/test_policy_settings.py", "tests/test_key_rules.py"],
    "anagrapheus/provider/policy_material.py": [
        "tests/test_policy.py",
        "tests/test_key_rules.py",
        "tests/test_policy_material.py",
    ],
    "anagrapheus/provider/policy.py": [
        "tests/test_policy.py",
        "tests/test_policy_agent.py",
        "tests/test_key_rules.py",
        "tests/test_keyed_history.py",
    ],
    "anagrapheus/provider/policy_history.py": ["tests/test_keyed_history.py", "tests/test_key_mutation.py"],
    "anagrapheus/provider/model.py": [
        "tests/test_provider_model.py",
        "tests/test_provider_suspended.py",
        "tests/test_provider_divergence.py",
        "tests/test_provider_endpoint.py",
        "tests/test_provider_model_rules.py",
    ],
    "anagrapheus/provider/tools.py": ["tests/test_provider_tools.py", "tests/test_capability.py"],
    "anagrapheus/provider/stream.py": ["tests/test_provider_model.py", "tests/test_provider_early_stop.py"],
    "anagrapheus/provider/discovery.py": ["tests/test_discovery.py"],
    "anagrapheus/provider/every_run.py": ["tests/test_every_run.py"],
    "anagrapheus/provider/run_clock.py": ["tests/test_capability_clock.py", "tests/test_capability.py"],
    "anagrapheus/provider/capability.py": [
        "tests/test_capability.py",
        "tests/test_capability_tools.py",
        "tests/test_capability_failures.py",
        "tests/test_discovery.py",
        "tests/test_capability_clock.py",
        "tests/test_capability_telemetry.py",
    ],
}
"""Each module, and the test files written for it. A file whose tests start Python processes that import the package
cannot be listed for a module those processes reach: the child inherits mutmut's environment and fails in its
trampoline (so the read-only mount test lives in `tests/test_sqlite_read_only_mount.py`, and the process holding a
unit in `tests/test_ledger_process_holder.py`, both listed nowhere)."""

SLICE = [
    "anagrapheus/timeline/canonical.py",
    "anagrapheus/timeline/divergence.py",
    "anagrapheus/timeline/upcast.py",
]
"""The modules CI mutates: at the core (keys, the diagnosis of a miss, reading old events), with fast tests."""


def _refuse_network() -> None:
    """Make every internet socket connection and name lookup in this process (and its forks) fail."""

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"the mutation run never reaches the network (connect to {address!r})")
        return original_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        raise OSError(f"the mutation run never reaches the network (name lookup of {host!r})")

    original_connect = socket.socket.connect
    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def main(modules: list[str]) -> int:
    """Mutate `modules` against their tests; print the score and the survivors; 1 below FLOOR (CI slice only)."""
    unknown = [m for m in modules if m not in TESTS_OF]
    if unknown:
        print(f"no test files are listed for {unknown} in TESTS_OF", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    # From scratch: mutmut keeps verdicts in mutants/ across runs, and a verdict reached against other tests
    # (another selection, an older tree) would stand.
    shutil.rmtree("mutants", ignore_errors=True)
    _refuse_network()
    from mutmut.__main__ import cli
    from mutmut.configuration import config

    tests = sorted({t for m in modules for t in TESTS_OF[m]})
    cfg = config()
    cfg.only_mutate = modules
    cfg.pytest_add_cli_args_test_selection = tests
    cfg.pytest_add_cli_args = [*cfg.pytest_add_cli_args, "--hypothesis-profile=anagrapheus-fixed"]
    print(f"mutating {modules}\nagainst {tests}", flush=True)
    started = time.monotonic()
    try:
        cli.main(["run"], standalone_mode=False)
    except SystemExit as stop:
        if stop.code:
            return 1
    print(f"mutmut ran for {time.monotonic() - started:.0f} s")
    prefixes = [m.removesuffix(".py").replace("/", ".") + "." for m in modules]
    equivalent = [name for name in EQUIVALENT if name.startswith(tuple(prefixes))]
    stale = [name for name in equivalent if _mutated_line(cli, name) != EQUIVALENT[name][0]]
    if stale:
        print(f"equivalent mutants no longer holding their line (update EQUIVALENT in .ci/mutation_score.py): {stale}")
        return 1
    return score(FLOOR, prefixes, _output(cli, ["results", "--all", "true"]).splitlines(), equivalent)


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
    sys.exit(main(sys.argv[1:] or SLICE))
