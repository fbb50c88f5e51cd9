"""Before Run, the page says how long the ticked methods take on this server (a first estimate that says so
until a run of that method has finished here, then the measured figure) and offers the recorded run of the
same method, which opens at once (Debian's chromium; the app on random:tiny, so a run takes a second)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser_support import (
    CHROMIUM,
    browser_context,
    click_run,
    open_settings,
    set_methods,
    start_app,
    wait_done,
    wait_ready,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

NOTE = "#wait-note"


@pytest.fixture(scope="module")
def tiny_app(tmp_path_factory):
    server = start_app(tmp_path_factory.mktemp("waits-app"), name="waits", extra_args=("--model", "random:tiny"))
    yield server
    server.stop()


def _note_says(page, text: str) -> str:
    page.wait_for_function("(t) => document.querySelector('#wait-note')?.innerText.includes(t)", arg=text,
                           timeout=30_000)
    return page.locator(NOTE).inner_text()


def test_the_wait_before_a_run_is_a_labelled_guess_then_measured_and_the_recorded_run_is_offered(tiny_app) -> None:
    with browser_context() as context:
        page = context.new_page()
        page.goto(tiny_app.url, timeout=120_000)
        wait_ready(page)
        # The page opens with DRAGIN ticked: its first estimate, and its recorded case study instead.
        note = _note_says(page, "Live run of DRAGIN: about")
        assert "a first estimate: dragin has not run on this server yet" in note
        assert page.locator(f"{NOTE} a[data-case=dragin-dragin]").inner_text() == "DRAGIN run"
        set_methods(page, ["wo"])
        note = _note_says(page, "Live run of wo-RAG: about")
        assert "a first estimate" in note and page.locator(f"{NOTE} a[data-case=dragin-wo]").count() == 1
        open_settings(page, "wo")
        page.locator("#param-wo-max_length input").fill("8")
        page.locator("#param-wo-answer_tokens input").fill("2")
        click_run(page)
        wait_done(page, runs=1, timeout=120_000)
        assert "Done: 1 run(s) stored" in page.locator("#run-status").inner_text()
        # The run just made is the measure now.
        note = _note_says(page, "measured over its last 1 run")
        assert re.search(r"Live run of wo-RAG: about \d+ s on this server", note) and "first estimate" not in note
        set_methods(page, ["wo", "fl"])  # FL-RAG has not run here and has no recorded run
        note = _note_says(page, "Live run of wo-RAG + FL-RAG")
        assert "a first estimate: fl has not run on this server yet" in note
        assert page.locator(f"{NOTE} a[data-case]").count() == 1  # only wo-RAG's recorded run is offered
        # The offer opens the recorded run in place, with no model call.
        page.locator(f"{NOTE} a[data-case=dragin-wo]").click()
        page.wait_for_selector("#recorded-note [data-recorded=dragin-wo]", timeout=30_000)
        assert "Opened the recorded" in page.locator("#run-status").inner_text()
        assert "?case=dragin-wo" in page.url
