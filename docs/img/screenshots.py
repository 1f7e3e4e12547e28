"""Make the screenshots of docs/how-to/see-a-run.md: `python docs/img/screenshots.py` (needs chromium and playwright).

Writes the negotiation's page and its `--diverge` page with `anagrapheus view`, opens each in headless Chromium
from file:// and saves a PNG beside this script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pages = {"view-negotiation": Path(tmp) / "run.html", "view-divergence": Path(tmp) / "diverge.html"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "anagrapheus",
                "view",
                "recordings/negotiation.jsonl",
                "-o",
                pages["view-negotiation"],
            ],
            cwd=ROOT,
            check=True,
        )
        subprocess.run(
            [sys.executable, "-m", "examples.negotiation", "--diverge", "--view", pages["view-divergence"]],
            cwd=ROOT,
            check=True,
        )
        with sync_playwright() as playwright:
            flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=flags)
            for name, page_path in pages.items():
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                page.goto(page_path.as_uri())
                if name == "view-negotiation":
                    page.locator("#unit-eu-uk-talks-round-1").scroll_into_view_if_needed()
                page.screenshot(path=str(HERE / f"{name}.png"))
            browser.close()


if __name__ == "__main__":
    main()
