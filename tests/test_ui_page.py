"""The page a teacher presents from, in a real browser (Debian's chromium via Playwright) on the embedded model:
the run on the first screen at 1280x720, links that open runs, comparisons and case studies, presenting
mode, a scripted lesson end to end, WCAG 2.2 AA with axe-core, and every method ticked at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.engine.embedded import embedded_display_name
from explorer.methods.base import method_names
from explorer.store import RunStore
from explorer.ui.page import controls
from explorer.ui.panels import decisions
from explorer.ui.runs import gallery
from explorer.ui.views.view import TraceView
from tests.browser_support import (
    AXE,
    CHROMIUM,
    axe_violations,
    browser_context,
    click_run,
    open_settings,
    set_methods,
    set_whatif,
    shot,
    start_app,
    wait_done,
    wait_ready,
    wait_tokens,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

SHELF = gallery.load()
#: The model the shared app runs (``make run``'s default); recorded cases of another model are not forked on it.
APP_MODEL = str(embedded_display_name("embedded"))
FIRST_SCREEN = {"width": 1280, "height": 720}
MENU = ".dre-forkmenu"


@pytest.fixture(scope="module")
def app(ui_app):
    return ui_app


@pytest.fixture(scope="module")
def context(app):
    with browser_context() as ctx:
        yield ctx


@pytest.fixture()
def page(context):
    page = context.new_page()
    page.set_viewport_size(FIRST_SCREEN)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert errors == [], errors


def _open(page, url: str) -> None:
    page.goto(url, timeout=120_000)
    page.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=120_000)
    page.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')", timeout=30_000)


def _in_first_screen(page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    return box is not None and 0 <= box["y"] and box["y"] + min(box["height"], 40) <= FIRST_SCREEN["height"]


def test_the_open_run_is_on_the_first_screen_and_run_follows_the_stream(page, app) -> None:
    _open(page, app.url)
    assert _in_first_screen(page, "#run-view [data-panel=strip] .dre-tokens .tok")  # the strip, not just its title
    assert page.locator("#settings").is_visible() and not page.locator("#method-settings").is_visible()
    # the case's caption is one line above the strip, the rest folded; its "Look at" link highlights the token
    first = SHELF.first
    caption = page.locator("#recorded-note .dre-story")
    assert caption.get_attribute("data-story") == first.key and caption.bounding_box()["height"] <= 40
    assert not page.locator("#recorded-note .dre-story-paper").is_visible()
    trigger = next(e for e in SHELF.trace(first.key).events if e.kind == "trigger")
    page.locator("#recorded-note a.dre-look").click()
    target = page.locator(f"#run-view .dre-run[data-run='{first.run_id}'] .dre-look-target")
    target.wait_for(timeout=10_000)
    assert target.get_attribute("data-i") == str(trigger.payload["token_index"])
    page.evaluate("window.scrollTo(0, 0)")
    # the case-study links work from the keyboard (they are links, not a grid that throws)
    seakr = next(i for i in SHELF.items if i.method == "seakr")
    link = page.locator(f"#gallery a[data-case='{seakr.key}']")
    link.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#run-view .dre-run[data-run='{seakr.run_id}']", timeout=30_000)
    assert "?case=" + seakr.key in page.url and "Recorded run" in page.locator("#recorded-note").inner_text()
    shot(page, "first-screen-1280x720", None)

    wait_ready(page)
    page.locator("#gallery a[data-case='dragin-dragin']").click()
    page.wait_for_selector(f"#run-view .dre-run[data-run='{SHELF.item('dragin-dragin').run_id}']")
    page.mouse.wheel(0, 2000)  # the reader is further down the page when pressing Run
    click_run(page)
    wait_tokens(page)
    assert _in_first_screen(page, "#run-view .dre-run[data-view=live] .tok"), "the first streamed token is out of view"
    assert page.locator("#recorded-row").is_hidden()
    page.locator("#cancel").click()
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('Cancelled')", timeout=60_000)


def _lesson(trace):
    """What the lesson steps through, read from the recorded DRAGIN run (so it holds if the case is recorded
    again): its decisions, the token that fired, its retrieval, and a later span whose check kept the text."""
    steps = decisions.decisions(TraceView(trace))
    fired = next((e for e in trace.events if e.kind == "trigger"), None)
    retrieval = next((e for e in trace.events if e.kind == "retrieval"), None)
    kept = next((e.payload["span"] for e in reversed(trace.events) if e.kind == "check"
                 and e.payload.get("fired") is None and len(e.payload.get("units") or []) >= 2), None)
    assert fired and retrieval and kept is not None, "the recorded DRAGIN case no longer fires, retrieves and checks"
    return steps, fired, retrieval, kept


def _force_retrieval(page, query: str) -> None:
    """In the open token menu: force a retrieval with ``query``."""
    page.wait_for_selector(f"{MENU} [role=menuitem][data-kind=force_retrieval]:not([disabled])", timeout=30_000)
    page.locator(f"{MENU} [role=menuitem][data-kind=force_retrieval]").click()
    page.locator(f"{MENU} .dre-fm-query").fill(query)
    page.locator(f"{MENU} .dre-fm-go").click()


def test_a_scripted_lesson_from_a_case_link_to_a_fork_and_its_comparison_link(page, context, app) -> None:
    item = SHELF.item("dragin-dragin")
    steps, fired, retrieval, kept_span = _lesson(SHELF.trace(item.key))
    _open(page, f"{app.url}?case={item.key}&present=1")
    assert page.locator("#run-view .dre-run").get_attribute("data-run") == item.run_id
    # presenting: controls hidden, large type, the bar explains the highlighted decision
    page.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])", timeout=10_000)
    assert page.locator("#run-band").is_hidden() and page.locator("#settings").is_hidden()
    size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#run-view .dre-tokens')).fontSize)")
    assert size >= 20
    bar = page.locator("#dre-presenter p")
    assert bar.inner_text().startswith(f"Decision 1 of {len(steps)}: {steps[0].title}")
    assert page.locator(".dre-current").inner_text().strip() == fired.payload["token"].strip()
    assert _in_first_screen(page, ".dre-current")
    page.keyboard.press("ArrowRight")  # the bar that fired, in the decision chart, with its values shown
    assert steps[1].kind == "bar" and bar.inner_text().startswith(f"Decision 2 of {len(steps)}: {steps[1].title}")
    assert page.locator(".dre-current").get_attribute("data-shown-bar") == str(steps[1].bar)
    assert _in_first_screen(page, ".dre-current") and page.locator("#run-view .hoverlayer .hovertext").count() == 1
    at = next(n for n, s in enumerate(steps) if s.kind == "retrieval")
    for _ in range(at - 1):
        page.keyboard.press("ArrowRight")
    assert bar.inner_text().startswith(f"Decision {at + 1} of {len(steps)}: {steps[at].title}")
    assert page.locator(".dre-current").get_attribute("data-retrieval") == str(retrieval.id)
    for _ in range(at):
        page.keyboard.press("ArrowLeft")
    assert bar.inner_text().startswith("Decision 1 of")
    shot(page, "lesson-presenting", None)
    # θ changed live while presenting: the recorded decisions are replayed at another threshold
    set_whatif(page, 0.2)
    page.wait_for_selector("#run-view .dre-whatif", timeout=30_000)
    assert "recorded generation" in page.locator("#run-view .dre-whatif").inner_text()
    assert page.evaluate("document.body.classList.contains('dre-presenting')")
    page.keyboard.press("Escape")
    assert page.locator("#run-band").is_visible()

    # a fork with a forced retrieval from a token of the case itself (no rerun of the parent); the case was
    # recorded on another embedded model than the app's, which the app opens beside its own for the fork
    wait_ready(page)
    parent = item
    page.locator(f"#run-view .dre-run[data-run='{item.run_id}'] [data-span~='{kept_span}'] .tok[data-i='1']").click()
    _force_retrieval(page, "Androscoggin Bank Colisée seating capacity")
    page.wait_for_selector("#recorded-row", state="hidden", timeout=10_000)  # a live fork is not "recorded"
    page.wait_for_function("document.querySelector('#run-view .dre-forkpair') || "
                           "document.querySelector('#run-fork-status .dre-error')", timeout=240_000)
    assert page.locator("#run-view .dre-forkpair").count() == 1, page.locator("#run-fork-status").inner_text()
    wait_done(page, runs=2)
    fork = page.locator("#run-view .dre-forkpair .dre-run").nth(1)
    assert "retrieval forced by a fork" in fork.locator("[data-panel=retrievals]").inner_text()
    assert "forced by a fork" in fork.locator("[data-panel=decisions] .dre-decisions").text_content()
    assert "fired by" not in fork.inner_text()
    href = page.locator("#run-view .dre-linkline a.dre-link").get_attribute("href")
    child = fork.get_attribute("data-run")
    assert href == f"?compare={parent.run_id},{child}"
    stored = RunStore(app.db).get(child)
    assert stored.fork["parent"] == parent.run_id
    assert stored.model["name"] == SHELF.trace(item.key).model["name"] != APP_MODEL  # forked on the case's model

    # the comparison link, in a fresh page: both runs, the fork's diff, and it can be presented too
    fresh = context.new_page()
    fresh.set_viewport_size(FIRST_SCREEN)
    try:
        _open(fresh, app.url + href + "&present=1")
        # the page opens on the DRAGIN case, then the link's view replaces it
        fresh.wait_for_selector(f"#run-view .dre-grid .dre-run[data-run='{child}'][data-view=done]", timeout=60_000)
        assert fresh.locator("#run-view [data-panel=compare]").count() == 1
        assert fresh.locator("#run-view [data-panel=fork]").count() == 1
        assert [r.get_attribute("data-run") for r in fresh.locator("#run-view .dre-grid .dre-run").all()] == \
            [parent.run_id, child]
        fresh.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])", timeout=10_000)
        shot(fresh, "lesson-comparison", None)
    finally:
        fresh.close()


def test_links_to_a_stored_run_a_fork_and_a_bad_id(page, app) -> None:
    stored = RunStore(app.db).list(limit=50)
    fork = next((r for r in stored if r.get("parent_run_id")), None)
    if fork is None:
        pytest.skip("needs the fork the lesson test stores")
    _open(page, f"{app.url}?run={fork['run_id']}")  # a fork is a run: it opens beside its parent
    assert page.locator("#run-view .dre-forkpair .dre-run").nth(1).get_attribute("data-run") == fork["run_id"]
    page.goto(f"{app.url}?run=no-such-run")
    page.wait_for_function("document.querySelector('#run-status')?.innerText.includes('This link opens nothing')",
                           timeout=60_000)
    assert "no-such-run" in page.locator("#run-status").inner_text()


@pytest.mark.skipif(not AXE.exists(), reason="axe-core is not installed: `make test` runs `npm ci` (needs node/npm)")
def test_the_main_views_have_no_serious_or_critical_wcag_violations(page, app) -> None:
    _open(page, app.url)
    checked = {"DRAGIN case": axe_violations(page)}
    for key in ("seakr-seakr", "blendfilter-blendfilter", "drrag-drrag"):  # the other papers' panels
        item = SHELF.item(key)
        page.locator(f"#gallery a[data-case='{key}']").click()
        page.wait_for_selector(f"#run-view .dre-run[data-run='{item.run_id}']", timeout=30_000)
        page.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')")
        # each with its caption, and DR-RAG beside the one-shot retrieval run its paper contrasts it with
        assert page.locator("#recorded-note .dre-story").get_attribute("data-story") == key
        assert [r.get_attribute("data-run") for r in page.locator("#run-view .dre-run").all()] == \
            [i.run_id for i in SHELF.shown_with(item)]
        checked[key] = axe_violations(page)
    page.locator("#gallery a[data-compare]").first.click()  # recorded runs compared
    page.wait_for_selector("#run-view [data-panel=compare]", timeout=30_000)
    checked["comparison"] = axe_violations(page)
    for tab in ("history", "evaluations", "help"):
        page.locator(f"#tab-{tab}-button").click()
        page.wait_for_timeout(800)
        checked[tab] = axe_violations(page)
    page.locator("#tab-run-button").click()
    page.locator("#present-toggle").click()
    page.wait_for_selector("body.dre-presenting")
    checked["presenting"] = axe_violations(page)
    assert {k: v for k, v in checked.items() if v} == {}


def test_help_links_are_named_apart_and_focus_goes_there_and_back(page, app) -> None:
    _open(page, app.url)
    names = page.eval_on_selector_all("#run-view a.dre-help", "links => links.map(a => a.getAttribute('aria-label'))")
    assert len(names) >= 4 and len(set(names)) == len(names)
    link = page.locator("#run-view [data-panel=signal] a.dre-help")
    link.click()
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('#tab-help') &&"
                           " document.activeElement.textContent.includes('Decision signal')", timeout=10_000)
    page.locator("#tab-help a[href='#help-rind']").first.click()  # the glossary, in plain words
    page.wait_for_function("() => document.activeElement.textContent.includes('trigger score')", timeout=10_000)
    page.locator("#help-back").click()
    page.wait_for_function("() => document.activeElement && document.activeElement.matches("
                           "'#run-view [data-panel=signal] a.dre-help')", timeout=10_000)


LAYOUTS = {"phone 390x844": (390, 844), "1280x720 at 150 %": (853, 480), "1280x720 at 200 %": (640, 360),
           "1920x1080": (1920, 1080)}


@pytest.mark.skipif(not AXE.exists(), reason="axe-core is not installed: `make test` runs `npm ci` (needs node/npm)")
def test_phone_and_zoom_layouts_fit_with_the_linked_run_first(context, app) -> None:
    """A ?case= link on a phone, and the page at 150 % and 200 % zoom (the CSS pixels a 1280x720 screen gives)
    and at 1920x1080: no horizontal scroll, the linked run before the form on a phone, the fork menu inside
    the viewport, presenting's bar inside the screen and beside the chart on a wide one, no serious WCAG
    violation."""
    item = SHELF.item("dragin-flare")
    problems: dict[str, object] = {}
    for name, (width, height) in LAYOUTS.items():
        page = context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        try:
            _open(page, f"{app.url}?case={item.key}")
            page.wait_for_selector(f"#run-view .dre-run[data-run='{item.run_id}']", timeout=60_000)
            wide = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            if wide > 0:
                problems[f"{name}: horizontal scroll"] = wide
            if width < 700:
                view, band = page.locator("#run-view").bounding_box(), page.locator("#run-band").bounding_box()
                if not view["y"] < band["y"]:
                    problems[f"{name}: the linked run is below the form"] = (view["y"], band["y"])
            if width == 390:
                wait_ready(page)
                right = page.evaluate("""() => { const t = [...document.querySelectorAll(
                    '#run-view .dre-run[data-view=done] .dre-span:not(.group) .tok')];
                    return t.reduce((b, e, i) => e.getBoundingClientRect().right >
                                    t[b].getBoundingClientRect().right ? i : b, 0); }""")
                page.locator("#run-view .dre-run[data-view=done] .dre-span:not(.group) .tok").nth(right).click()
                page.wait_for_selector(f"{MENU} [role=menuitem]", timeout=30_000)
                box = page.locator(MENU).bounding_box()
                if box["x"] < 0 or box["x"] + box["width"] > width:
                    problems[f"{name}: the fork menu leaves the viewport"] = box
                page.keyboard.press("Escape")
            if width == 1920:  # each method's checkbox says in one line what the method does
                titles = page.eval_on_selector_all("#methods label", "ls => ls.map(l => l.title)")
                if not (titles and all(": " in t for t in titles) and titles[0].startswith("wo-RAG: answers")):
                    problems[f"{name}: method checkboxes without their line"] = titles
            if width != 1920:
                violations = axe_violations(page)
                if violations:
                    problems[f"{name}: axe"] = violations
            page.locator("#present-toggle").click()
            page.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])")
            bar = page.locator("#dre-presenter").bounding_box()
            if bar["x"] < 0 or bar["x"] + bar["width"] > width or bar["y"] + bar["height"] > height:
                problems[f"{name}: the presenting bar leaves the screen"] = bar
            if page.locator("#dre-presenter p").bounding_box()["width"] < 300:
                problems[f"{name}: presenting text a word or two a line"] = bar
            if width == 1920:
                chart = page.locator("#run-view [data-panel=signal] .dre-plot").first.bounding_box()
                if chart["x"] + chart["width"] > bar["x"]:
                    problems[f"{name}: the bar covers the chart"] = (chart, bar)
            shot(page, f"layout-{name.split()[0]}-{width}x{height}", None)
        finally:
            page.close()
    assert problems == {}


@pytest.fixture(scope="module")
def tiny_app(tmp_path_factory):
    """The app on random:tiny (a real model with random weights): every method runs in seconds."""
    server = start_app(tmp_path_factory.mktemp("tiny-app"), name="tiny", extra_args=("--model", "random:tiny"))
    yield server
    server.stop()


def test_every_method_ticked_at_once_runs_from_the_form(context, tiny_app) -> None:
    page = context.new_page()
    try:
        page.goto(tiny_app.url, timeout=120_000)
        wait_ready(page)
        methods = method_names()
        set_methods(page, methods)
        open_settings(page, "seakr")
        assert page.locator("#param-seakr-layer :is(input, textarea)").input_value() == ""  # int | None: empty
        for method in methods:  # only the lengths are shortened; every other control is left as it is
            open_settings(page, method)
            page.locator(f"#param-{method}-max_length input").fill("8")
            page.locator(f"#param-{method}-answer_tokens input").fill("2")
            # the other token budgets too (BlendFilter's internal answer and filter, SEAKR's step, ...): every
            # update redraws the runs already finished, so streamed tokens are most of this test's time
            for param in controls.params(method):
                if param.name.endswith("_tokens") and param.name != "answer_tokens" and param.type == "int":
                    page.locator(f"#{param.elem_id} input").fill(str(max(4, int(param.lo or 0))))
        for name, value in (("k", 2), ("max_steps", 1)):
            open_settings(page, "seakr")
            page.locator(f"#param-seakr-{name} input").fill(str(value))
        click_run(page)
        wait_done(page, runs=len(methods), timeout=300_000)
        runs = page.locator("#run-view .dre-run")
        assert runs.count() == len(methods) and page.locator("#run-view .dre-refused").count() == 0
        assert [r.get_attribute("data-method") for r in runs.all()] == methods
        assert {r.get_attribute("data-status") for r in runs.all()} == {"complete"}
        assert f"Done: {len(methods)} run(s) stored" in page.locator("#run-status").inner_text()
        # the link to these runs side by side opens all of them, compared, with their model
        href = page.locator("#run-view .dre-linkline a.dre-link").get_attribute("href")
        ids = [r.get_attribute("data-run") for r in runs.all()]
        assert href == "?compare=" + ",".join(ids)
        page.goto(tiny_app.url + href, timeout=120_000)
        page.wait_for_selector("#run-view [data-panel=compare]", timeout=120_000)
        assert [r.get_attribute("data-run") for r in page.locator("#run-view .dre-grid .dre-run").all()] == ids
        assert f"Comparing {len(methods)} runs" in page.locator("#run-status").inner_text()
        assert page.locator("#run-view [data-panel=compare] tr", has_text="model").count() >= 1
    finally:
        page.close()
