"""The README's quick start: its two commands are the ones CI runs, and the demo's own step works offline."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def ci_command(name: str) -> str:
    """Return the command `.ci/run` assigns to `name` (a double-quoted bash string)."""
    found = re.search(rf'^{name}="(.+)"$', CI_RUN, flags=re.MULTILINE)
    assert found, f".ci/run does not define {name}"
    return found[1]


def readme_lines() -> set[str]:
    return {line.strip() for line in README.splitlines()}


def test_readme_commands_are_the_ones_ci_runs() -> None:
    for name in ("DEMO_COMMAND", "TEST_COMMAND"):
        command = ci_command(name)
        assert command in readme_lines(), f"README.md lacks .ci/run's {name} on a line of its own: {command}"
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    starts = ("python3 -m venv", "test -d .venv")
    commands = [line.strip() for line in quick_start.splitlines() if line.strip().startswith(starts)]
    assert commands == [ci_command("DEMO_COMMAND"), ci_command("TEST_COMMAND")]


def test_the_test_command_reuses_the_demos_venv_and_makes_one_on_a_fresh_clone(tmp_path: Path) -> None:
    # Only the set-up, up to the activation: with the venv there it is kept as it is; without, it is made.
    setup = ci_command("TEST_COMMAND").split(" && pip install", 1)[0] + " && echo ready"
    kept = tmp_path / "with" / ".venv" / "bin"
    kept.mkdir(parents=True)
    (kept / "activate").write_text("KEPT=yes\n")
    run = subprocess.run(["bash", "-c", setup + " $KEPT"], cwd=kept.parents[1], capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, "ready yes\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = subprocess.run(
        ["bash", "-c", setup.replace("python3 -m venv", f"{sys.executable} -m venv --without-pip")],
        cwd=fresh,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0 and (fresh / ".venv" / "bin" / "activate").is_file(), made.stderr


def test_readme_states_the_python_the_package_requires() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11"
    assert "Python >= 3.11" in README


def test_demo_step_runs_offline() -> None:
    # The last step of the demo command, run with this interpreter from the repository root as the README says.
    demo = shlex.split(ci_command("DEMO_COMMAND").split("&&")[-1])
    assert demo[0] == "python", demo
    env = {**os.environ, "CI": "true"}
    done = subprocess.run(
        [sys.executable, *demo[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{' '.join(demo)} failed:\n{done.stdout}\n{done.stderr}"
    # The demo replays its committed recording, so the model must not have been reached at all.
    assert re.search(r"^Model calls: 0\b", done.stdout, flags=re.MULTILINE), done.stdout


def test_readme_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links no local files"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
