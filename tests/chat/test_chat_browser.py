"""Aria in a real browser: Debian's chromium, driven by Playwright, against the chat served by
uvicorn on 127.0.0.1, with the scripted oracle LM in place of the model."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from chat_helpers import serving

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
QUESTION = "How long has table 5 been waiting for its appetizer, in minutes?"
ARTIFACT = Path(__file__).resolve().parents[2] / "experiments" / "results" / "aria_chat.png"


@pytest.fixture
def served(chat_app):
    """(base URL, script) of the chat served by uvicorn on 127.0.0.1, the question held until released."""
    app, script = chat_app(hold=QUESTION)
    with serving(app) as url:
        yield url, script
        script.release.set()


@pytest.fixture
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Offline: every request that leaves 127.0.0.1 would fail; the test also asserts none is made.
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield b
        b.close()


def test_the_manager_asks_sees_the_steps_and_marks_the_answer_correct(served, browser, tmp_path, restaurant_kb):
    from reflect_sql.kb.enrich import history

    url, script = served
    _, kb = restaurant_kb
    page = browser.new_page(viewport={"width": 1100, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    page.fill("#question", QUESTION)
    page.click("#send")

    entry = page.locator(".entry").last
    # The model is held on the question: the tab shows it is being answered and the steps so far.
    entry.locator(".queue .now").wait_for(timeout=30_000)
    entry.locator('.step[data-loop="retrieval"]:not(.running) .scores').wait_for(timeout=30_000)
    assert "accept" in entry.locator('.step[data-loop="retrieval"]').inner_text()
    assert entry.locator(".step").count() == 1  # the generator is still writing: no later step yet
    assert entry.locator(".answer").inner_text() == ""  # streamed: no answer yet
    script.release.set()

    entry.locator(".sentence").wait_for(timeout=60_000)
    sentence = entry.locator(".sentence").inner_text()
    assert sentence.startswith("The answer (waited_minutes) is ")
    cells = entry.locator("table.result td").all_inner_texts()
    assert entry.locator("table.result th").all_inner_texts() == ["waited_minutes"] and len(cells) == 1
    assert cells[0] in sentence  # the sentence states the number the table shows
    assert "kitchen_tickets" in entry.locator("details.sql code").inner_text()
    loops = entry.locator(".step").evaluate_all("els => els.map(e => e.dataset.loop)")
    assert loops[:2] == ["retrieval", "synthesis.generate"] and "entailment" in loops and loops[-1] == "answer"
    assert "Es5 Ed5 =5" in entry.locator('.step[data-loop="entailment"]').inner_text()
    assert "LM calls" in entry.locator(".cost").inner_text()

    versions = len(history(kb))
    entry.locator("button.correct").click()
    entry.locator(".verdict-message").wait_for(timeout=30_000)
    assert "human-verified" in entry.locator(".verdict-message").inner_text()
    assert len(history(kb)) == versions + 1 and history(kb)[-1]["provenance"]["verified_by"] == "human"

    screenshot = tmp_path / "aria_chat.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("REFLECT_SQL_UPDATE_SCREENSHOTS"):  # the committed one changes only when asked
        shutil.copyfile(screenshot, ARTIFACT)

    history_page = browser.new_page()
    history_page.goto(url + "kb/history")
    newest = history_page.locator("table.history tbody tr").first
    assert "human" in newest.locator(".verified-by").inner_text()
    assert "human-verified answer to: How long has table 5" in newest.inner_text()
    assert all(r.startswith(url) for r in requests), [r for r in requests if not r.startswith(url)]
