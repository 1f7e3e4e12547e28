"""`anagrapheus entropy digest`: a short hash of the determinism manifest and the collected test ids.

Stored beside a test report, it says which declared inputs and which tests produced it. It is never a gate:
it moves with every test added, which is what it is for.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

from anagrapheus.cli.commands import Command
from anagrapheus.cli.report import BadInput, Exit, Outcome
from anagrapheus.errors import ManifestError
from anagrapheus.testing.entropy.manifest import load_manifest

__all__ = ["COMMAND", "digest", "run"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `entropy`."""
    parser.add_argument("action", choices=("digest",), help="what to do (digest)")
    parser.add_argument("--root", default=".", metavar="DIR", help="the project's directory (default: here)")
    parser.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG", help="passed to pytest --collect-only")


def digest(manifest: str, test_ids: list[str]) -> str:
    """The digest of a manifest's canonical text and a set of test ids (order does not matter)."""
    hashed = hashlib.sha256(manifest.encode())
    for test_id in sorted(set(test_ids)):
        hashed.update(b"\n" + test_id.encode())
    return hashed.hexdigest()[:16]


def run(args: argparse.Namespace) -> Outcome:
    """Collect the project's tests and print the digest."""
    root = Path(args.root)
    try:
        manifest = load_manifest(root)
    except ManifestError as e:
        message = e.message if e.key is None else f"{e.key}: {e.message}"
        raise BadInput(message, path=str(root / e.path.split(" ")[0])) from e
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args.pytest_args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    # 5: nothing collected, which digests as well as anything.
    if collected.returncode not in (0, 5):
        last = (collected.stdout.strip().splitlines() or collected.stderr.strip().splitlines() or ["?"])[-1]
        raise BadInput(f"pytest could not collect the tests (exit {collected.returncode}): {last}", path=str(root))
    test_ids = sorted({line.strip() for line in collected.stdout.splitlines() if "::" in line})
    value = digest(manifest.digest_material(), test_ids)
    source = manifest.source or "no manifest"
    text = f"{value}  ({source}, {len(test_ids)} tests)"
    return Outcome(Exit.OK, text, {"digest": value, "manifest": manifest.source, "tests": len(test_ids)})


COMMAND = Command(
    "entropy",
    help="print the digest of the determinism manifest and the collected tests",
    description="digest: hash the determinism manifest ([tool.anagrapheus.entropy] of pyproject.toml, or"
    " nondeterminism.toml) and the ids pytest collects, and print the first 16 hex digits, to store beside a"
    " test report. Never a gate: it moves with every test added.",
    arguments=_arguments,
    run=run,
)
