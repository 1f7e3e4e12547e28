"""Score the mutants whose names start with the given prefixes (from `mutmut results --all true`); fail below a floor.

Usage: python .ci/mutation_score.py FLOOR PREFIX... < results. Prints every surviving mutant, so the
CI log names what the tests missed (`mutmut show NAME` prints its diff).
"""

from __future__ import annotations

import sys
from collections import Counter


def main(floor: float, prefixes: list[str], lines: list[str]) -> int:
    """Print the score and the survivors of the mutants under `prefixes`; return 1 below `floor` percent."""
    status: dict[str, str] = {}
    for line in lines:
        name, sep, outcome = line.strip().rpartition(": ")
        if sep and name.startswith(tuple(prefixes)):
            status[name] = outcome
    counts = Counter(status.values())
    checked = sum(n for outcome, n in counts.items() if outcome not in ("not checked", "skipped"))
    killed = counts["killed"] + counts["timeout"]
    if not checked:
        print(f"no mutant under {prefixes} was checked", file=sys.stderr)
        return 1
    score = 100.0 * killed / checked
    print(f"mutation score: {killed}/{checked} killed = {score:.1f}% (floor {floor}%); {dict(sorted(counts.items()))}")
    for name, outcome in sorted(status.items()):
        if outcome not in ("killed", "timeout", "not checked", "skipped"):
            print(f"  {outcome}: {name}")
    return 0 if score >= floor else 1


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), sys.argv[2:], sys.stdin.read().splitlines()))
