"""`anagrapheus view` on a large recording: the page's size and the time a browser takes to open it.

- size: the page's bytes against the recording's (aim: within a few times).
- writing: `anagrapheus view` writing the page, against `write_recording` writing the recording it shows.
- opening: headless Chromium (Debian's, driven by Playwright) loading the page from file:// until its `load`
  event, against loading the recording file itself as text in the same browser; and the page's time, since
  the aim is stated in seconds (10,000 pins open in under 2 s). Skipped, saying why, without a browser.

The pins are model-call-shaped (`recording.py`'s): about 1.5 kB of response each, with text and a tool call.

    python benchmarks/view.py            # 10,000 pins, five rounds
    python benchmarks/view.py --quick    # smoke test: 50 pins, one round
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _measure import Variant, compare, print_table, repeated
from recording import HEADER, prepared

from anagrapheus.cli import main as cli
from anagrapheus.timeline.recording import write_recording


def _opening(browser: Any, url: str) -> float:
    page = browser.new_page()
    page.set_default_timeout(300_000)
    started = time.perf_counter()
    page.goto(url, wait_until="load")
    elapsed = time.perf_counter() - started
    page.close()
    return elapsed


def main() -> None:
    rounds, events = prepared(__doc__ or "")
    count = len(events)
    with tempfile.TemporaryDirectory() as tmp:
        recording, page = Path(tmp) / "run.jsonl", Path(tmp) / "run.html"

        def view() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                cli(["view", str(recording), "-o", str(page)])

        # No index, as the figures before it were measured (an index adds about 16% to the write).
        write_recording(recording, events, header=HEADER, index=False)
        baseline = Variant(
            "write_recording of the same pins",
            repeated(lambda: write_recording(recording, events, header=HEADER, index=False)),
        )
        rows = compare(baseline, [Variant("anagrapheus view writing its page", repeated(view))], n=1, rounds=rounds)
        print_table(f"writing the page of {count:,} pins", baseline.name, rows)
        size = page.stat().st_size / recording.stat().st_size
        print(f"\npage size: {page.stat().st_size:,} bytes, {size:.2f}x the recording's {recording.stat().st_size:,}")

        chromium = shutil.which("chromium")
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            print("opening: not measured (playwright is not installed: pip install -e '.[dev]')")
            return
        if chromium is None:
            print("opening: not measured (no chromium on PATH: Debian's package `chromium`)")
            return
        # As .txt, so the browser shows the recording as text rather than offer it for download.
        text_copy = recording.with_suffix(".txt")
        text_copy.write_bytes(recording.read_bytes())
        with sync_playwright() as playwright:
            flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
            browser = playwright.chromium.launch(executable_path=chromium, args=flags)
            text = Variant(
                "Chromium loading the recording as text",
                lambda n: sum(_opening(browser, text_copy.as_uri()) for _ in range(n)),
            )
            shown = Variant(
                "Chromium opening the page (to its load event)",
                lambda n: sum(_opening(browser, page.as_uri()) for _ in range(n)),
            )
            rows = compare(text, [shown], n=1, rounds=rounds)
            browser.close()
        print_table(f"opening the page of {count:,} pins", text.name, rows)
        opened = rows[-1]
        print(f"\npage opened in {opened.per_op_median:.2f} s (median), {opened.per_op_min:.2f} s at best")


if __name__ == "__main__":
    main()
