"""Every runnable code block in the docs and the README is executed here.

Conventions (also described in docs/index.md, "About these pages"):

- A fenced block whose info string starts with `python` or `py` runs. A page's blocks run in order,
  in one namespace (so a later block can use what an earlier one defined), in a fresh temporary
  working directory, with pydantic-ai's real model requests disabled: examples use `FunctionModel`
  or `TestModel`.
- `<!-- no-run -->` on the line before a block opts it out (a fragment, or code that needs a real
  provider).
- `<!-- output -->` on the line before a ```text block makes that block the expected standard output
  of the runnable block just before it; trailing whitespace is ignored.

A failure names the file and the line of the block; tracebacks point at the Markdown file's own
line numbers.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NO_RUN = "<!-- no-run -->"
OUTPUT = "<!-- output -->"
RUNNABLE = re.compile(r"^(python|py)(\s|\{|$)")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    name: str
    """The file as failures name it, relative to the repository."""
    line: int
    """The 1-based line of the block's first code line."""
    info: str
    code: str
    marker: str | None
    """The HTML comment on the line before the opening fence, if it is one of ours."""
    expected_output: str | None = field(default=None)

    @property
    def where(self) -> str:
        return f"{self.name}:{self.line}"


def blocks_of(path: Path, *, root: Path = ROOT) -> list[Block]:
    """Split a Markdown file into its fenced blocks, attaching expected output to the block it checks."""
    name = str(path.relative_to(root))
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = previous if previous in (NO_RUN, OUTPUT) else None
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence[0] * len(fence)) and lines[j].strip().strip(fence[0]) == ""
        ):
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{name}:{i + 1}: code fence is never closed")
        block = Block(path, name, i + 2, info, "\n".join(body) + "\n", marker)
        if marker == OUTPUT:
            runnable = [b for b in found if is_runnable(b)]
            if not runnable or block.info.split()[:1] != ["text"]:
                raise AssertionError(f"{block.where}: {OUTPUT} must precede a ```text block after a runnable block")
            if runnable[-1].expected_output is not None:
                raise AssertionError(f"{block.where}: a second {OUTPUT} block for {runnable[-1].where}")
            runnable[-1].expected_output = block.code
        found.append(block)
        i = j + 1
    return found


def is_runnable(block: Block) -> bool:
    return RUNNABLE.match(block.info) is not None and block.marker != NO_RUN


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def runnable_pages() -> list[Path]:
    """The pages with at least one runnable block; a page that cannot be parsed is kept, to fail visibly."""
    kept: list[Path] = []
    for path in pages():
        try:
            if any(is_runnable(block) for block in blocks_of(path)):
                kept.append(path)
        except AssertionError:
            kept.append(path)
    return kept


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_fences_and_markers_parse(path: Path) -> None:
    blocks_of(path)


def normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@pytest.mark.parametrize("path", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai import models

    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in blocks_of(path):
        if not is_runnable(block):
            continue
        # Padding with blank lines makes tracebacks report the Markdown file's own line numbers.
        source = "\n" * (block.line - 1) + block.code
        stdout = io.StringIO()
        try:
            code = compile(source, str(block.path), "exec")
            with contextlib.redirect_stdout(stdout):
                exec(code, namespace)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            sys.stdout.write(stdout.getvalue())
            pytest.fail(
                f"code block at {block.where} raised {type(e).__name__}: {e}\n\n{traceback.format_exc()}",
                pytrace=False,
            )
        if block.expected_output is not None:
            got, want = normalised(stdout.getvalue()), normalised(block.expected_output)
            assert got == want, f"output of the code block at {block.where} differs from the text block after it"


def nav_pages(entries: object) -> list[str]:
    """Flatten mkdocs.yml's nav into the page paths it names."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def mkdocs_nav() -> list[str]:
    # mkdocs.yml uses a !!python/name tag for the mermaid fence; a loader that ignores unknown tags is enough here.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    return nav_pages(config["nav"])


def test_nav_pages_exist() -> None:
    missing = [page for page in mkdocs_nav() if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"


def test_every_page_is_in_the_nav() -> None:
    unlisted = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} - set(mkdocs_nav())
    assert not unlisted, f"pages missing from mkdocs.yml's nav: {sorted(unlisted)}"


def test_block_parser_reads_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n"
        "```python\nprint('hi')\n```\n\n"
        "<!-- output -->\n```text\nhi\n```\n\n"
        "<!-- no-run -->\n```python\nraise SystemExit\n```\n\n"
        "1. Step:\n\n   ```py\n   x = 1\n   ```\n"
    )
    blocks = blocks_of(page, root=tmp_path)
    assert [(b.line, b.info, is_runnable(b)) for b in blocks] == [
        (4, "python", True),
        (9, "text", False),
        (14, "python", False),
        (20, "py", True),
    ]
    assert blocks[0].expected_output == "hi\n"
    assert blocks[3].code == "x = 1\n"
