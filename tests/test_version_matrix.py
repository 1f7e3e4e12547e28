"""The pydantic-ai range is stated once and agreed on: pyproject's floor, CI's constraints, the code and the README."""

from __future__ import annotations

import re
from pathlib import Path

from anagrapheus.provider.provenance import VERIFIED_PYDANTIC_AI
from anagrapheus.timeline.provenance import within_verified

ROOT = Path(__file__).resolve().parents[1]


def pinned(name: str) -> str:
    text = (ROOT / ".ci" / "constraints" / name).read_text(encoding="utf-8")
    (version,) = re.findall(r"^pydantic-ai-slim==(\S+)$", text, flags=re.MULTILINE)
    return version


def test_the_constraints_are_the_verified_range() -> None:
    assert (pinned("floor.txt"), pinned("newest.txt")) == VERIFIED_PYDANTIC_AI


def test_the_floor_is_pyprojects() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    floors = dict(re.findall(r'"pydantic-ai-slim(?:\[(\w+)\])?>=([\d.]+),<3"', pyproject))
    floor, newest = (version.removesuffix(".0") for version in VERIFIED_PYDANTIC_AI)
    # The durable engines' recipes close a unit by pydantic-ai's `@durable_operation`, which 2.78 brought: their
    # extras ask for the newest verified release; everything else installs from the floor.
    assert {extra: version for extra, version in floors.items() if extra in ("temporal", "prefect")} == {
        "temporal": newest,
        "prefect": newest,
    }
    assert {version for extra, version in floors.items() if extra not in ("temporal", "prefect")} == {floor}


def test_the_readme_states_the_supported_range() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"pydantic-ai-slim {VERIFIED_PYDANTIC_AI[0]} to {VERIFIED_PYDANTIC_AI[1]}" in readme


def test_versions_within_the_range_are_verified_and_others_not() -> None:
    assert within_verified("pydantic_ai", "2.68.0", "2.78.0")
    assert within_verified("pydantic_ai", "2.70.0")
    assert not within_verified("pydantic_ai", "2.68.0", "2.79.0")
    assert not within_verified("pydantic_ai", "2.67.0")
    assert not within_verified("pydantic_ai", "2.78.0rc1")
    assert not within_verified("pydantic_ai", None)
    # anagrapheus's own releases: 0.2.0 keys and pins as 0.1.0 did, so a recording of either replays quietly.
    assert within_verified("anagrapheus", "0.1.0", "0.2.0")
    assert not within_verified("anagrapheus", "0.0.9", "0.2.0")
    assert not within_verified("anagrapheus", "0.3.0")
