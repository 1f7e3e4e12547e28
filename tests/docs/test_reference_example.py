"""The example in "Pinning and Replay" runs as written and prints exactly its two lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "pinning_replay.py"


def run_example(path: Path, *, warnings: str | None = None) -> None:
    """Run the example at `path` (under `-W warnings`, if given): its two lines on stdout, nothing on stderr."""
    options = [] if warnings is None else ["-W", warnings]
    done = subprocess.run(
        [sys.executable, *options, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The UK holds firm on fisheries. | model calls: 1\ndiverged after 1 hit(s)\n"
    assert done.stderr == ""


def test_the_reference_example_prints_its_two_lines() -> None:
    run_example(EXAMPLE)
