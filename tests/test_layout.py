"""The tests are laid out by layer and named for the module they test, so the layout cannot drift back to rounds.

A test file of a layer's folder is `test_<module>.py`, or `test_<module>_<concern>.py` for a concern that wants a
file of its own (a slow race, fault, stress or fuzz run, which `--dist loadfile` runs beside the rest), where
`<module>` is a module or subpackage of the package folder it mirrors. `.ci/mutation_slice.py` finds each module's
tests by this name, so a file named otherwise is a file no mutant is run against.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = ["timeline", "provider", "provider/keying", "testing", "cli"]
"""Folders below tests/ that mirror the package folder of the same path below anagrapheus/."""

MIRRORED = [
    *LAYERS,
    *(
        f"{layer}/{room.name}"
        for layer in ("timeline",)
        for room in sorted((ROOT / "tests" / layer).iterdir())
        if room.is_dir() and (ROOT / "anagrapheus" / layer / room.name / "__init__.py").is_file()
    ),
]
"""The layers, and each room of the timeline (resolving/, recording/, stores/) with a test folder of its own."""

ROUND_WORDS = frozenset(["rules", "outcomes", "checks", "values", "nearest", "report", "files", "shapes"])
"""Suffixes that name the round of work that wrote a file, not a concern of the module it tests."""

ALLOWED = {
    "provider/test_model_rules.py": "tests/provider is another change's; its tests belong in test_model.py",
    "provider/test_policy_key_rules.py": "tests/provider/test_policy*.py is another change's (the keying room)",
    "cli/test_cli.py": "the `anagrapheus` command as a whole, through main(), not one module of cli/",
    "cli/test_cli_faults.py": "the command as a whole on damaged, piped and read-only inputs",
}
"""Test files named otherwise, each with why (paths below tests/)."""


def modules_of(folder: str) -> set[str]:
    """The module and subpackage names of the package folder that tests/`folder` mirrors."""
    package = ROOT / "anagrapheus" / folder
    modules = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    return modules | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def misnamed(folder: str) -> list[str]:
    """The test files of tests/`folder` named for no module of its package, or for a round, and not allowed."""
    modules = modules_of(folder)
    wrong = []
    for test in sorted((ROOT / "tests" / folder).glob("test_*.py")):
        name = test.stem.removeprefix("test_")
        owner = next((m for m in sorted(modules, key=len, reverse=True) if name == m or name.startswith(m + "_")), None)
        concern = None if owner is None else name.removeprefix(owner).removeprefix("_")
        if owner is None or concern in ROUND_WORDS or any(w in ROUND_WORDS for w in (concern or "").split("_")):
            wrong.append(f"{folder}/{test.name}")
    return [path for path in wrong if path not in ALLOWED]


@pytest.mark.parametrize("folder", MIRRORED)
def test_each_test_file_is_named_for_a_module_of_its_layer(folder: str) -> None:
    assert (ROOT / "anagrapheus" / folder).is_dir() and (ROOT / "tests" / folder).is_dir()
    assert misnamed(folder) == []


def test_a_file_named_for_a_round_or_for_no_module_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself, on a copy of the layout: a round's name and a stray name are both reported.
    for folder, names in {"anagrapheus/timeline": ["canonical.py", "__init__.py"], "tests/timeline": []}.items():
        (tmp_path / folder).mkdir(parents=True)
        for name in names:
            (tmp_path / folder / name).write_text("")
    for name in ["test_canonical.py", "test_canonical_races.py", "test_canonical_outcomes.py", "test_ledger.py"]:
        (tmp_path / "tests" / "timeline" / name).write_text("")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert misnamed("timeline") == ["timeline/test_canonical_outcomes.py", "timeline/test_ledger.py"]


def test_every_allowed_file_gives_its_reason() -> None:
    assert all(reason.strip() for reason in ALLOWED.values())
    assert all(path.split("/")[0] in {f.split("/")[0] for f in MIRRORED} for path in ALLOWED)


def test_every_test_path_the_ci_script_names_exists() -> None:
    """A test moved or renamed must not drop out of a CI step silently (the floor step named two moved files)."""
    import re

    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    named = sorted(set(re.findall(r"\btests/[\w/]+\.py\b", script)))
    assert named, "the CI script names test files"
    assert [path for path in named if not (ROOT / path).is_file()] == []
