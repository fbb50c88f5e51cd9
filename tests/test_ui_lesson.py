"""A class on one server, in real browsers (Debian's chromium) behind one ``--auth`` login.

One app (the tiny random-weight model, so runs take seconds; the recorded case studies are real
traces) serves both tests. Every student's browser is its own client: six sessions behind the one
login (three pages, three scripts) all get their run although each client may hold only one place.
A presenter steps through a recorded case; a follower on a 390x844 phone and one on a laptop show
the same decision after each key press over the lesson's event stream (and open the runs the
presenter opens next), a follower steps on their own and rejoins, and with "Ask the class first"
both answer the question, the presenter sees the tally, then reveals.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from explorer.store import RunStore
from tests.browser_support import ARTIFACTS, CHROMIUM, chromium_browser, click_run, set_methods, sign_in, start_app

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

USER, PASSWORD = "teacher", "class-of-30"
QUESTIONS = ["Who built the arena in Lewiston?", "Where did the Maineiacs play?", "Who directed the film?",
             "What is the capacity of the Colisee?", "Who lived longer?", "Where is the Androscoggin Bank Colisee?"]
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("lesson")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EXPLORER_RUNS_PER_CLIENT", "1")  # a shared login counted as one client would get one run
        server = start_app(workdir, name="lesson", timeout=240,
                           extra_args=("--auth", f"{USER}:{PASSWORD}", "--model", "random:tiny",
                                       "--concurrent-runs", "2"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


def _page(browser, app, path: str = "", **options):
    page = browser.new_context(**options).new_page()
    sign_in(page, app.url + path, USER, PASSWORD)
    return page


def test_six_sessions_behind_one_login_each_get_their_run(app, browser):
    from gradio_client import Client

    pages = [_page(browser, app) for _ in range(3)]
    for page, question in zip(pages, QUESTIONS, strict=False):
        page.wait_for_function("document.querySelector('#model-status')?.innerText.includes('ready')",
                               timeout=180_000)
        page.locator("#question textarea").fill(question)
        set_methods(page, ["wo"])
    results: list[dict] = []
    errors: list[BaseException] = []

    def call(question: str) -> None:
        try:
            client = Client(app.url, auth=(USER, PASSWORD), verbose=False, httpx_kwargs={"timeout": 120})
            results.append(client.predict(question, "wo", "", '{"max_length": 8}', "", api_name="/run"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(q,)) for q in QUESTIONS[3:]]
    for page in pages:
        click_run(page)
    for t in threads:
        t.start()
    for page in pages:
        page.wait_for_function("() => /Done: 1 run\\(s\\) stored/.test(document.querySelector('#run-status')"
                               "?.innerText || '')", timeout=240_000)
        assert "already has" not in page.locator("#run-status").inner_text()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors[:2]
    assert [r["status"] for r in results] == ["complete"] * 3
    stored = {r["question"] for r in RunStore(app.db, readonly=True).list()}
    assert set(QUESTIONS) <= stored  # six sessions, one login, six runs
    for page in pages:
        page.context.close()


def shot_path(name: str) -> Path:
    """Where a screenshot of the screen as it is seen (not the whole page) goes."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / f"{name}.png"


def _index(page) -> str | None:
    return page.locator("#dre-presenter").get_attribute("data-index")


def _follows(page, presenter, timeout: float = 10_000) -> None:
    """The follower shows the presenter's decision (same place, same words in the bar)."""
    want = _index(presenter)
    page.wait_for_function("(w) => document.querySelector('#dre-presenter')?.getAttribute('data-index') === w",
                           arg=want, timeout=timeout)
    assert page.locator("#dre-presenter p").inner_text() == presenter.locator("#dre-presenter p").inner_text()


def test_followers_track_the_presenter_rejoin_and_answer_before_the_reveal(app, browser):
    presenter = _page(browser, app, "?case=dragin", viewport={"width": 1280, "height": 720})
    presenter.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=60_000)
    presenter.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')",
                                timeout=30_000)  # the page's scripts have drawn the view: Present works
    presenter.locator("#present-toggle").click()
    presenter.wait_for_selector("#dre-lesson .dre-ls-code", timeout=30_000)
    code = presenter.locator("#dre-lesson .dre-ls-code").inner_text()
    link = presenter.locator("#dre-lesson a.dre-ls-link").get_attribute("href")
    assert link.endswith(f"?follow={code}")
    presenter.locator("#dre-lesson [data-qr]").click()
    assert presenter.locator("#dre-lesson-qr img").get_attribute("src").startswith("data:image/svg+xml")
    presenter.keyboard.press("Escape")  # closes the QR code, not presenting mode
    assert presenter.locator("#dre-lesson-qr").count() == 0 and presenter.locator("body.dre-presenting").count()

    phone = _page(browser, app, f"?follow={code}", **PHONE)
    laptop = _page(browser, app, f"?follow={code}")
    runs = presenter.eval_on_selector_all("#run-view .dre-run[data-run]", "rs => rs.map(r => r.dataset.run)")
    for follower in (phone, laptop):
        _follows(follower, presenter, timeout=60_000)
        assert follower.eval_on_selector_all("#run-view .dre-run[data-run]",
                                             "rs => rs.map(r => r.dataset.run)") == runs
    presenter.wait_for_function("() => /2 following/.test(document.querySelector('#dre-lesson').innerText)")
    for _ in range(2):
        presenter.keyboard.press("ArrowRight")
        for follower in (phone, laptop):
            _follows(follower, presenter)
    assert phone.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.screenshot(path=str(shot_path("lesson-phone-follower")))

    # the phone steps on its own; the laptop keeps following; Rejoin brings the phone back
    phone.locator("#dre-presenter [data-step='1']").click()
    phone.wait_for_selector("#dre-lesson [data-rejoin]")
    own = _index(phone)
    presenter.keyboard.press("ArrowLeft")
    _follows(laptop, presenter)
    assert _index(phone) == own
    phone.locator("#dre-lesson [data-rejoin]").click()
    _follows(phone, presenter)

    # predict, then reveal: the first decision with a question is asked before it is shown
    asked = presenter.evaluate("() => [...document.querySelectorAll('#run-view li.dre-decision')]"
                               ".findIndex(li => li.hasAttribute('data-ask') && li.dataset.kind !== 'retrieval')")
    assert asked >= 0  # a retrieval check: "will it retrieve?"
    while int(_index(presenter)) != asked:
        presenter.keyboard.press("ArrowRight" if int(_index(presenter)) < asked else "ArrowLeft")
    presenter.locator("#dre-lesson [data-askfirst]").check()
    presenter.wait_for_selector("body.dre-asking")
    item = presenter.locator("#run-view li.dre-decision").nth(asked)
    text, answer = item.get_attribute("data-ask"), item.get_attribute("data-answer")
    choices = item.get_attribute("data-choices").split(",")
    assert not presenter.locator("#dre-presenter p").is_visible() or \
        presenter.locator("#dre-presenter p").evaluate("p => getComputedStyle(p).visibility") == "hidden"
    hidden = ("() => { const a = document.querySelector('#run-view .dre-asked'); return !!a && "
              "[...a.querySelectorAll('.dre-flag, .dre-cut-mark')].every(f => getComputedStyle(f).visibility === "
              "'hidden') && [...a.querySelectorAll('.dre-current')].every(c => getComputedStyle(c).outlineStyle "
              "=== 'none'); }")
    for follower, choice in ((phone, choices[0]), (laptop, choices[1])):
        _follows(follower, presenter)
        follower.wait_for_selector("#dre-lesson [data-choice]")
        assert follower.evaluate(hidden)  # the outcome (the flag where it fired, the cut) is hidden while asked
        assert follower.locator("#dre-lesson .dre-ls-ask-text").inner_text() == text
        follower.locator(f"#dre-lesson [data-choice='{choice}']").click()
        follower.wait_for_selector(f"#dre-lesson [data-choice='{choice}'][aria-pressed=true]")
    tally = f"{choices[0]} 1 · {choices[1]} 1"
    presenter.wait_for_function("(t) => document.querySelector('#dre-lesson').innerText.includes(t)", arg=tally)
    assert "2 answer(s)" in presenter.locator("#dre-lesson").inner_text()
    assert tally not in laptop.locator("#dre-lesson").inner_text()  # the class sees it once revealed
    presenter.screenshot(path=str(shot_path("lesson-projector-asking")))
    at = _index(presenter)
    presenter.keyboard.press("ArrowRight")  # reveals, stays on the decision
    presenter.wait_for_function("() => !document.body.classList.contains('dre-asking')")
    assert _index(presenter) == at
    for follower, choice in ((phone, choices[0]), (laptop, choices[1])):
        follower.wait_for_function("(a) => document.querySelector('#dre-lesson').innerText.includes('Answer: ' + a)",
                                   arg=answer)
        shown = follower.locator("#dre-lesson").inner_text()
        assert tally in shown and f"You said {choice}" in shown
    phone.screenshot(path=str(shot_path("lesson-phone-revealed")))
    presenter.keyboard.press("ArrowRight")  # then moves on
    assert _index(presenter) == str(int(at) + 1)
    _follows(phone, presenter)

    # the presenter opens another recorded case: followers' pages open the same runs and follow on
    before = runs
    presenter.evaluate("() => window.DRE.senders['run:link']({nonce: Date.now(), case: 'seakr'})")
    presenter.wait_for_function("(b) => { const r = [...document.querySelectorAll('#run-view .dre-run[data-run]')]"
                                ".map(x => x.dataset.run); return r.length && r.join() !== b.join(); }", arg=before,
                                timeout=30_000)
    runs = presenter.eval_on_selector_all("#run-view .dre-run[data-run]", "rs => rs.map(r => r.dataset.run)")
    for follower in (phone, laptop):
        follower.wait_for_function("(w) => [...document.querySelectorAll('#run-view .dre-run[data-run]')]"
                                   ".map(x => x.dataset.run).join() === w.join()", arg=runs, timeout=30_000)
        _follows(follower, presenter)
