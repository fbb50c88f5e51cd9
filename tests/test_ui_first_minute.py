"""The first minute of a visitor, in a real browser: the page opens on the DRAGIN case study with
its recorded run shown, the recorded runs open without any model call, Run works untouched, and
panel titles lead to their help paragraph."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.store import RunStore
from explorer.trace import TRACE_VERSION
from explorer.ui.runs import gallery
from tests.browser_support import (
    CHROMIUM,
    browser_context,
    open_settings_panel,
    shot,
    ticked_methods,
    wait_done,
    wait_ready,
    wait_tokens,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

SHELF = gallery.load()
#: The recorded runs with a case link of their own.
#: A run recorded only as another's contrast opens beside it, with no link of its own; a case's own
#: method's run keeps its link even when a newer method is recorded beside it.
_CONTRASTS = {j.beside for j in SHELF.items if j.beside} - {j.key for j in SHELF.items if j.method == j.case}
LINKED = [i for i in SHELF.items if i.key not in _CONTRASTS]


@pytest.fixture(scope="module")
def app(ui_app):
    return ui_app


@pytest.fixture(scope="module")
def context(app):
    with browser_context() as ctx:
        yield ctx


@pytest.fixture(scope="module")
def client(app):
    from gradio_client import Client

    return Client(app.url, verbose=False)


@pytest.fixture()
def page(context, app):
    page = context.new_page()
    page.goto(app.url, timeout=120_000)
    page.wait_for_selector("#run-view .dre-run", timeout=120_000)  # the recorded run, drawn at page load
    yield page
    page.close()


def forward_passes(client) -> int:
    return int(client.predict(api_name="/status")["forward_passes"])


def test_the_page_opens_with_a_question_a_method_and_the_recorded_case_study(page) -> None:
    assert SHELF.problem == "", SHELF.problem
    first = SHELF.first
    assert page.locator("#question textarea").input_value() == first.question
    open_settings_panel(page)  # the question's source, folded under Settings
    assert "Case studies" in page.locator("#question-source input").input_value()
    assert "Lewiston" in page.locator("#question-pick input").input_value()
    assert "3,677" in page.locator("#gold").inner_text()
    assert ticked_methods(page) == ["dragin"]
    run = page.locator("#run-view .dre-run")
    assert run.get_attribute("data-run") == first.run_id and run.get_attribute("data-view") == "done"
    page.wait_for_selector("#run-view [data-panel=signal] .dre-plot[data-done='1'] .main-svg", timeout=30_000)
    assert "Recorded run" in page.locator("#recorded-note").inner_text()
    assert page.locator("#run-live").is_visible()
    assert page.locator("#gallery a[data-case]").count() == len(LINKED)
    assert page.locator("#model-status").inner_text().strip() != ""  # loading progress, then ready
    shot(page, "first-view")


def test_a_recorded_run_opens_complete_with_no_model_call(page, app, client) -> None:
    wait_ready(page)  # the warm-up is over: from now on every forward pass is counted
    before, stored = forward_passes(client), len(RunStore(app.db).list(limit=10_000))
    seen: set[str] = set()
    for item in LINKED:
        page.locator(f"#gallery a[data-case='{item.key}']").click()
        page.wait_for_selector(f"#run-view .dre-run[data-run='{item.run_id}'][data-view=done]", timeout=15_000)
        page.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')",
                               timeout=30_000)
        view = page.locator("#run-view")
        shown = [r.get_attribute("data-run") for r in view.locator(".dre-run").all()]
        assert shown == [i.run_id for i in SHELF.shown_with(item)], item.key  # a contrast opens beside its run
        seen.update(shown)
        assert view.locator("[data-panel=strip] .tok").count() > 3, item.key
        assert view.locator("[data-panel=costs]").count() == 1
        panel = {"seakr": "uncertainty", "blendfilter": "filter", "drrag": "stages"}.get(item.method)
        if panel:
            assert view.locator(f"[data-panel={panel}]").count() == 1, item.key
        assert item.label in page.locator("#recorded-note").inner_text()
    shot(page, "recorded-drrag", "#run-view")
    assert seen == {i.run_id for i in SHELF.items}
    assert forward_passes(client) == before, "opening a recorded run ran the model"
    assert len(RunStore(app.db).list(limit=10_000)) == stored
    assert all(t.version == TRACE_VERSION for t in SHELF.traces.values())


def test_a_panel_title_opens_its_paragraph_of_the_help_tab(page) -> None:
    page.locator("#run-view [data-panel=signal] h3 a.dre-help").first.click()
    page.wait_for_selector("#help-signal", state="attached", timeout=10_000)
    page.wait_for_function("() => { const r = document.querySelector('#help-signal').getBoundingClientRect();"
                           " return r.top >= 0 && r.top < window.innerHeight; }", timeout=10_000)
    assert page.locator("#tab-help-button").get_attribute("aria-selected") == "true"


def test_run_from_the_opened_page_works_without_touching_any_control(page, app) -> None:
    wait_ready(page)
    log = app.log.read_text()
    assert "model and corpus ready" in log and "warm-up run skipped" not in log  # the start-up warm-up ran
    before = {r["run_id"] for r in RunStore(app.db).list(limit=10_000)}
    page.evaluate("document.querySelector('#run-view .dre-root')?.setAttribute('data-stale', '1')")
    page.locator("#run").click()
    wait_tokens(page)
    wait_done(page)
    assert page.locator("#recorded-row").is_hidden()  # a live run is not marked recorded
    new = [r for r in RunStore(app.db).list(limit=10_000) if r["run_id"] not in before]
    assert len(new) == 1 and new[0]["method"] == "dragin"
    trace = RunStore(app.db).get(new[0]["run_id"])
    assert trace.question == SHELF.first.question and trace.status == "complete"
    assert trace.gold.get("answers")  # picked from the case studies, so its gold answer came along
    assert page.locator("#run-view .dre-run").get_attribute("data-run") == trace.run_id


def test_run_it_live_fills_the_controls_and_runs_the_recorded_method(page, app) -> None:
    wait_ready(page)
    wo = next(i for i in SHELF.items if i.method == "wo")
    page.locator(f"#gallery a[data-case='{wo.key}']").click()
    page.wait_for_selector(f"#run-view .dre-run[data-run='{wo.run_id}']", timeout=15_000)
    before = {r["run_id"] for r in RunStore(app.db).list(limit=10_000)}
    page.evaluate("document.querySelector('#run-view .dre-root')?.setAttribute('data-stale', '1')")
    page.locator("#run-live").click()
    wait_done(page)
    assert ticked_methods(page) == ["wo"]
    new = [r for r in RunStore(app.db).list(limit=10_000) if r["run_id"] not in before]
    assert len(new) == 1 and new[0]["method"] == "wo"
    live = RunStore(app.db).get(new[0]["run_id"])
    recorded = SHELF.trace(wo.key)
    assert live.question == recorded.question and live.config == recorded.config
    assert live.gold == recorded.gold
