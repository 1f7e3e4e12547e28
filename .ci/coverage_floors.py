"""Fail CI when the package's line or branch coverage falls below its floor (reads `coverage json` output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Floors on the package (anagrapheus/), measured with subprocess coverage on; raise them as coverage rises.
# The aim, 95% of lines and 90% of branches (docs/testing.md), is met; the floors are the last measurement on
# main rounded down to the half percent (98.27% to 98.29% / 95.37% to 95.44% in two .ci/run at 004fa80 and after
# on 2026-12-01; the half percent leaves room for the few lines only a race reaches), so new code comes with its tests.
LINE_FLOOR = 97.5
BRANCH_FLOOR = 94.5


def main(path: str) -> int:
    """Print the line and branch figures; return 1 when either is below its floor."""
    totals = json.loads(Path(path).read_text(encoding="utf-8"))["totals"]
    line = 100.0 * totals["covered_lines"] / totals["num_statements"]
    branch = 100.0 * totals["covered_branches"] / totals["num_branches"]
    print(f"coverage of anagrapheus/: {line:.2f}% of lines (floor {LINE_FLOOR}%),", end=" ")
    print(f"{branch:.2f}% of branches (floor {BRANCH_FLOOR}%)")
    if line < LINE_FLOOR or branch < BRANCH_FLOOR:
        print("coverage fell below its floor", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
