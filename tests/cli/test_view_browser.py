"""`anagrapheus view` pages opened as a person opens them: headless Chromium, from file://, keys pressed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.cli import main
from anagrapheus.testing.miss import write_miss
from tests.cli.test_view import NEGOTIATION, changed_copy, recorded_miss

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    if CHROMIUM is None:
        return "no chromium on PATH (Debian's package `chromium`)"
    try:
        import playwright.sync_api  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        return "playwright is not installed (the dev extra has it)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        # .ci/run installs Chromium: there a missing browser is a failure, not a skip.
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run under CI=true: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Flags of a closed network: no background fetches, no sandbox as root.
        flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=[*flags, "--disable-sync"])
        yield launched
        launched.close()


def open_page(browser: Any, path: Path) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri())
    # The page asks for nothing but itself.
    assert requests == [path.as_uri()]
    return page


def test_the_conversation_reads_and_keys_move_between_pins(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "negotiation.html"
    assert main(["view", str(NEGOTIATION), "-o", str(out)]) == 0
    page = open_page(browser, out)
    assert page.locator(".pin").count() == 59
    assert page.get_by_text("tool_call · stock_survey").first.is_visible()
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == "pin-eu-uk-talks-round-1-2"
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.id") == "pin-eu-uk-talks-round-1-1"
    page.keyboard.press("u")
    assert page.evaluate("document.activeElement.id") == "pin-eu-uk-talks-round-2-1"
    # What was asked is laid out when a reader opens it.
    first = page.locator("details.fp").first
    assert first.locator("table").count() == 0
    first.locator("summary").click()
    # The table is laid out by the page's script on the toggle event: wait for it, as a reader's eye does.
    first.locator("table").wait_for(state="attached")
    assert first.locator("tr").count() == 3  # a header and the entity id's two fields
    assert first.locator("td").first.text_content() == "entity"
    page.screenshot(path=str(tmp_path / "negotiation.png"))
    assert (tmp_path / "negotiation.png").stat().st_size > 10_000


def test_a_divergence_is_shown_side_by_side_with_the_moved_field_marked(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "against.html"
    main(["view", str(NEGOTIATION), "--against", str(changed_copy(tmp_path)), "-o", str(out)])
    page = open_page(browser, out)
    moved = page.locator("#divergence tr.moved")
    assert moved.count() == 2
    assert moved.first.is_visible()
    # The moved row is highlighted: its cells are painted, not left white.
    colour = page.evaluate("getComputedStyle(document.querySelector('#divergence tr.moved td')).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")


def test_a_miss_page_jumps_to_the_nearest_recorded_call(browser: Any, tmp_path: Path) -> None:
    # The agent runs its own event loop; Playwright's sync API holds this thread's.
    with ThreadPoolExecutor(1) as pool:
        recording, miss = pool.submit(recorded_miss, tmp_path).result()
    out = tmp_path / "miss.html"
    main(["view", "--miss", str(write_miss(miss, tmp_path / "miss.json", recording=recording)), "-o", str(out)])
    page = open_page(browser, out)
    assert page.locator("#divergence mark").first.is_visible()
    page.keyboard.press("d")
    assert "focus" in page.evaluate("document.activeElement.className")
    assert page.evaluate("document.activeElement.closest('#divergence') !== null")
