"""How low figure 1 of keys.py can go while keys stay exact: the check of the messages already seen, taken apart.

A key at 200 messages costs the 2-message key plus the check that every message already seen holds what it
held when walked (any of them may have been changed in place). This prints, each against the 2-message key
in the same round:

- `pin_for` at 200 messages, as keys.py's figure 1;
- the check as the package does it (`operator.attrgetter` reads, then an identity comparison);
- the identity comparison alone, reading for free: the least any pure-Python check of those values costs;
- the same check compiled (`_watch_floor.c`, built here with the system's C compiler if it has one).

It ends with what figure 1 would be with each of those in place of today's check.

    python benchmarks/key_floor.py
    python benchmarks/key_floor.py --quick    # smoke test
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from itertools import chain
from operator import is_
from pathlib import Path
from types import ModuleType
from typing import Any

from _measure import Comparison, Variant, compare, machine_line, options, print_table, repeated, use_options
from keys import PARAMETERS, history
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.settings import ModelSettings

from anagrapheus import PinnedModel, ReplayPins
from anagrapheus.provider import SemanticCallPolicy
from anagrapheus.provider.keying.history import SEEN_BEFORE_KEPT, _read  # pyright: ignore[reportPrivateUsage]

HERE = Path(__file__).resolve().parent


def compiled_check(build: Path) -> ModuleType | str:
    """`_watch_floor.c` built and imported, or why it could not be."""
    compiler = shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0]) or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if compiler is None or not (Path(include) / "Python.h").exists():
        return "no C compiler or no Python headers here"
    target = build / f"_watch_floor{sysconfig.get_config_var('EXT_SUFFIX')}"
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(HERE / "_watch_floor.c"), "-o", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"the build failed: {done.stderr.strip()[:200]}"
    spec = importlib.util.spec_from_file_location("_watch_floor", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snapshots(objects: Sequence[object]) -> tuple[list[object], list[tuple[object, ...]]]:
    """Each distinct watched object and what the compiled check compares it with."""
    seen: set[int] = set()
    kept: list[object] = []
    held: list[tuple[object, ...]] = []
    for watched in objects:
        if id(watched) in seen:
            continue  # a dict is watched twice by the package (its keys, its values)
        seen.add(id(watched))
        kept.append(watched)
        if type(watched) is list:
            held.append(tuple(watched))  # pyright: ignore[reportUnknownArgumentType]
        elif type(watched) is dict:
            held.append(tuple(chain.from_iterable(watched.items())))  # pyright: ignore[reportUnknownArgumentType]
        else:
            entries = vars(watched)
            held.append((type(watched), entries, *chain.from_iterable(entries.items())))
    return kept, held


def timed(name: str, operation: Callable[[], object]) -> Variant:
    return Variant(name, repeated(operation))


def main(argv: Sequence[str] | None = None) -> None:
    parser = options(__doc__.splitlines()[0], rounds=7)
    args = parser.parse_args(argv)
    rounds = use_options(args)
    n = 20 if args.quick else 500
    print(machine_line())

    policy = SemanticCallPolicy()
    model = PinnedModel(
        FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name="keys"), ReplayPins({}), policy=policy
    )
    settings: ModelSettings = {"temperature": 0.0}
    whole = history(200)
    for _ in range(SEEN_BEFORE_KEPT + 1):
        model.pin_for(whole, settings, PARAMETERS)
    # The conversation as the policy keeps it (private: this script takes the check apart, no test relies on it).
    kept: Any = next(iter(policy._keys._history._chains.values()))  # pyright: ignore[reportPrivateUsage, reportOptionalMemberAccess]
    assert len(kept.nodes) == len(whole) and kept.unchanged(), "the kept conversation should read as walked"
    getters, watched, values = list(kept.getters), list(kept.objects), list(kept.values)
    same = list(values)

    def check_today() -> bool:
        now = _read(getters, watched)  # as `_Chain.unchanged` does
        return len(now) == len(values) and all(map(is_, now, values))

    assert check_today()
    short = history(2)  # another conversation: the same first message would be one conversation cut short
    variants = [
        timed("pin_for, 200 messages", lambda: model.pin_for(whole, settings, PARAMETERS)),
        timed("the check today (read, then compare)", check_today),
        timed("identity comparison alone (no reading)", lambda: all(map(is_, values, same))),
    ]
    with tempfile.TemporaryDirectory() as build:
        floor = compiled_check(Path(build))
        if isinstance(floor, ModuleType):
            objects, held = snapshots(watched)
            check: Callable[[list[object], list[tuple[object, ...]]], bool] = floor.unchanged
            assert check(objects, held), "the compiled check should read the kept conversation as walked"
            variants.append(timed("the check compiled (C)", lambda: check(objects, held)))
        else:
            print(f"the compiled check is not measured: {floor}")
        rows = compare(
            timed("pin_for, 2 messages", lambda: model.pin_for(short, settings, PARAMETERS)),
            variants,
            n=n,
            rounds=rounds,
        )
    print(f"\nchecked: {len(whole)} messages, {len(watched)} watched objects, {len(values)} values read")
    print_table("the check of 200 messages taken apart", "pin_for, 2 messages", rows)
    by_name: dict[str, Comparison] = {row.name: row for row in rows}

    def ratio(name: str) -> float:
        return by_name[name].ratio_median

    today = ratio("pin_for, 200 messages") - ratio("the check today (read, then compare)")
    print("\nfigure 1 (aim <= 2x) with each check in place of today's (ratios of medians added and taken away):")
    lines = [("today's check", ratio("pin_for, 200 messages")), ("no check at all (not exact)", today)]
    lines.append(("identity comparison, free reads", today + ratio("identity comparison alone (no reading)")))
    if "the check compiled (C)" in by_name:
        lines.append(("the check compiled", today + ratio("the check compiled (C)")))
    for label, figure in lines:
        print(f"  {label:<34}{figure:6.2f}x")


if __name__ == "__main__":
    main()
