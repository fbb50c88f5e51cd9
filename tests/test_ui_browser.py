"""The web app in a real browser (Debian's chromium via Playwright) against the real model and SQLite.

One app serves most tests (its corpus is the demo corpus plus a passage full of HTML/JS
payloads); the crash test starts its own app so it can kill it. Generation lengths are small to
keep the suite within minutes on a CPU. Screenshots of the main views go to test-artifacts/.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from explorer.store import RunStore
from explorer.trace import Trace
from tests.browser_support import (
    CHROMIUM,
    ROOT,
    browser_context,
    choose,
    click_run,
    external,
    open_app,
    open_settings,
    open_settings_panel,
    pick_question,
    set_methods,
    set_param,
    set_whatif,
    shot,
    start_app,
    wait_done,
    wait_ready,
    wait_tokens,
    write_corpus,
)
from tests.ui_payloads import IMG, LINK, SCRIPT

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

DEMO_Q = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
EVIL_Q = f"What is the zorblax quintessence? {SCRIPT} {IMG} {LINK}"
EVIL_PASSAGE = {"id": "evil-0001", "title": f"Zorblax {IMG}",
                "text": f"The zorblax quintessence is a made-up thing. {SCRIPT} {LINK} {IMG}"}
HOOK = """
window.__alerts = [];
window.alert = (m) => window.__alerts.push(String(m));
window.confirm = window.prompt = window.alert;
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("app")
    corpus = write_corpus(workdir / "corpus.jsonl", [EVIL_PASSAGE])
    server = start_app(workdir, corpus=str(corpus), name="browser")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def context(app):
    with browser_context() as ctx:
        ctx.add_init_script(HOOK)
        ctx.on("request", lambda r: app.requests.append(r.url))
        yield ctx


@pytest.fixture()
def page(context, app):
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs
    open_app(page, app.url)
    wait_ready(page)
    yield page
    assert page.dialogs == []
    page.close()


def _run_dragin(page, max_length: int = 24) -> None:
    pick_question(page, "seating capacity")
    set_methods(page, ["dragin"])
    set_param(page, "dragin", "max_length", max_length)
    set_param(page, "dragin", "fewshot", 2)
    set_param(page, "dragin", "answer_tokens", 8)
    set_param(page, "dragin", "threshold", 0.3)
    click_run(page)
    try:
        wait_tokens(page)  # tokens while it runs
        wait_done(page)
    finally:
        shot(page, "last-dragin-run")


def _open_history(page) -> None:
    page.locator("#tab-history-button").click()
    page.wait_for_selector("#history-runs label", timeout=30_000)


def _tick(page, text: str, n: int = 1) -> None:
    labels = page.locator("#history-runs label").filter(has_text=text)
    for i in range(n):
        labels.nth(i).click()


def test_dragin_run_history_reopen_compare_and_offline_report(page, app, context, tmp_path):
    _run_dragin(page)
    view = page.locator("#run-view")
    assert view.locator("[data-panel=strip] .tok").count() > 5
    assert view.locator("[data-panel=signal] .dre-plot[data-done='1'] .main-svg").count() >= 1
    assert view.locator("[data-panel=retrievals] .dre-ret").count() >= 1
    assert view.locator(".dre-gold, .dre-badge.gold").count() >= 1  # the demo question's gold is shown
    strip_text = view.locator("[data-panel=strip]").inner_text()
    assert "Done: 1 run(s) stored" in page.locator("#run-status").inner_text()
    shot(page, "run-dragin", "#run-view")

    # what-if: a lower θ' fires earlier; the view says it is a replay of the recorded text
    set_whatif(page, 0.05)  # the slider beside the decision chart
    page.wait_for_selector("#run-view .dre-whatif", timeout=15_000)
    assert "recorded generation" in view.locator(".dre-whatif").inner_text()
    assert view.locator(".tok.whatif").count() >= 1
    shot(page, "run-whatif", "#run-view")

    # history: the run is stored and reopens exactly as shown
    _open_history(page)
    _tick(page, "dragin/paper")
    page.locator("#history-open").click()
    page.wait_for_selector("#history-view [data-panel=strip]")
    assert page.locator("#history-view [data-panel=strip]").inner_text() == strip_text
    shot(page, "history-reopened")

    # a second method on the same question, then both compared
    page.locator("#tab-run-button").click()
    set_methods(page, ["wo"])
    set_param(page, "wo", "max_length", 16)
    set_param(page, "wo", "fewshot", 2)
    click_run(page)
    wait_done(page)
    _open_history(page)
    page.locator("#history-refresh").click()
    page.wait_for_timeout(500)
    _tick(page, "dragin/paper")
    _tick(page, "wo/paper")
    page.locator("#history-compare").click()
    page.wait_for_selector("#history-view [data-panel=compare]")
    wait_done(page, "#history-view", runs=2)
    assert page.locator("#history-view .dre-compare th").filter(has_text="output diff").count() == 1
    assert page.locator("#history-view [data-panel=costs] .dre-plot[data-done='1']").count() == 1
    shot(page, "history-compare")

    # the HTML report of the comparison opens from a file with the network off
    with page.expect_download() as download:
        page.locator("#export-html").click()
        page.wait_for_selector("#history-status:has-text('HTML report')", timeout=60_000)
        page.locator("#export-file a").first.click(timeout=30_000)
    report = tmp_path / "report.html"
    download.value.save_as(report)
    seen: list[str] = []
    context.set_offline(True)
    try:
        offline = context.new_page()
        offline.on("request", lambda r: seen.append(r.url))
        offline.goto(report.as_uri())
        offline.wait_for_selector(".dre-plot[data-done='1'] .main-svg", timeout=30_000)
        assert offline.locator(".dre-run").count() == 2
        assert offline.locator("[data-panel=compare]").count() == 1
        shot(offline, "report-offline")
        offline.close()
    finally:
        context.set_offline(False)
    assert external(seen, report.as_uri()) == []
    assert external(app.requests, app.url) == [], "the app loaded something from outside"


def test_history_tag_rename_search_export_and_delete(page, app, tmp_path):
    store = RunStore(app.db)
    if not store.list(limit=1):
        pytest.skip("needs a stored run from the previous test")
    _open_history(page)
    first = page.locator("#history-runs label").first
    first.click()
    page.locator("#history-tags input, #history-tags textarea").first.fill("keep, demo")
    page.locator("#history-tag-add").click()
    page.wait_for_selector("#history-status:has-text('Tagged 1 run')")
    page.locator("#history-runs label").first.click() if not page.locator("#history-runs input").first.is_checked() \
        else None
    page.locator("#history-name input, #history-name textarea").first.fill("my <b>favourite</b>")
    page.locator("#history-rename").click()
    page.wait_for_selector("#history-status:has-text('Renamed')")
    page.locator("#history-tag input, #history-tag textarea").first.fill("keep")
    page.locator("#history-refresh").click()
    page.wait_for_timeout(800)
    labels = page.locator("#history-runs label")
    assert labels.count() == 1 and "my <b>favourite</b>" in labels.first.inner_text() and "#keep" in \
        labels.first.inner_text()
    with page.expect_download() as download:
        page.locator("#export-csv").click()
        page.wait_for_selector("#history-status:has-text('CSV')")
        page.locator("#export-file a").first.click(timeout=30_000)
    csv_path = tmp_path / "history.csv"
    download.value.save_as(csv_path)
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("run_id,") and len(lines) == 2 and "keep" in lines[1]
    run_id = lines[1].split(",")[0]
    page.locator("#history-runs label").first.click()
    with page.expect_download() as download:
        page.locator("#export-json").click()
        page.wait_for_selector("#history-status:has-text('Trace of run')")
        page.locator("#export-file a").first.click(timeout=30_000)
    json_path = tmp_path / "trace.json"
    download.value.save_as(json_path)
    assert Trace.from_json(json_path.read_text()).to_dict() == store.get(run_id).to_dict()
    page.locator("#history-tag input, #history-tag textarea").first.fill("")
    page.locator("#history-refresh").click()
    page.wait_for_timeout(800)
    before = len(store.list())
    page.locator("#history-runs label").first.click()
    page.locator("#history-delete").click()
    page.wait_for_selector("#history-status:has-text('Deleted 1 run')")
    assert len(store.list()) == before - 1


def test_html_and_js_payloads_from_the_user_and_the_corpus_show_as_text(page, app, context, tmp_path):
    choose(page, "question-source", "Type your own")
    page.locator("#question textarea").fill(EVIL_Q)
    set_methods(page, ["sr"])
    set_param(page, "sr", "max_length", 8)
    set_param(page, "sr", "fewshot", 1)
    set_param(page, "sr", "answer_tokens", 4)
    click_run(page)
    wait_done(page)
    view = page.locator("#run-view")
    assert SCRIPT in view.locator(".dre-question").inner_text()  # the question, as text
    passage = view.locator(".dre-hit").filter(has_text="Zorblax").first
    assert IMG in passage.inner_text()
    passage.locator("summary").click()
    assert SCRIPT in passage.locator(".dre-passage").inner_text()
    shot(page, "payloads-as-text", "#run-view")
    _open_history(page)
    label = page.locator("#history-runs label").filter(has_text="zorblax").first
    assert "<script>window.__pwned" in label.inner_text()  # the history list shows it as text too
    label.click()
    page.locator("#history-open").click()
    page.wait_for_selector("#history-view .dre-run")
    with page.expect_download() as download:
        page.locator("#export-html").click()
        page.wait_for_selector("#history-status:has-text('HTML report')", timeout=60_000)
        page.locator("#export-file a").first.click(timeout=30_000)
    report = tmp_path / "evil.html"
    download.value.save_as(report)
    checks = [page]
    rpage = context.new_page()
    rpage.on("dialog", lambda d: (page.dialogs.append("report: " + d.message), d.dismiss()))
    rpage.goto(report.as_uri())
    rpage.wait_for_selector(".dre-plot[data-done='1']", timeout=30_000)
    assert SCRIPT in rpage.locator(".dre-question").inner_text()
    checks.append(rpage)
    for p in checks:
        assert p.evaluate("window.__pwned") is None
        assert p.evaluate("window.__alerts") == []
        assert p.locator(".dre-root img, .dre-root script, .dre-root iframe").count() == 0
        assert p.locator("a[href^='javascript:'], [onerror], [onclick]").count() == 0
    rpage.close()


def test_two_runs_started_together_are_both_stored_intact(page, app):
    """A browser run and two scripted runs at once: they share the decode batch, and nothing mixes."""
    from gradio_client import Client

    client = Client(app.url, verbose=False)
    pick_question(page, "seating capacity")
    set_methods(page, ["wo"])
    set_param(page, "wo", "max_length", 8)
    set_param(page, "wo", "fewshot", 1)
    results: dict[str, object] = {}

    def scripted(key: str, question: str) -> None:
        try:
            results[key] = client.predict(question, "sr", "", '{"max_length": 8, "fewshot": 1, "answer_tokens": 4}',
                                          api_name="/run")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[key] = exc

    threads = [threading.Thread(target=scripted, args=(k, q)) for k, q in
               (("a", "Who designed the Apple I?"), ("b", "Where was Mozart born?"))]
    click_run(page)
    for t in threads:
        t.start()
    wait_done(page)
    for t in threads:
        t.join(timeout=240)
    assert all(isinstance(r, dict) and r["status"] == "complete" for r in results.values()), results
    browser_run = page.locator("#run-view .dre-run").get_attribute("data-run")
    assert page.locator("#run-view .dre-question").inner_text() == DEMO_Q  # its own question, not a script's
    store = RunStore(app.db)
    for run_id, question in ((results["a"]["run_id"], "Who designed the Apple I?"),
                             (results["b"]["run_id"], "Where was Mozart born?"), (browser_run, DEMO_Q)):
        trace = store.get(run_id)
        trace.validate()
        assert trace.question == question and trace.status == "complete"
        fetched = Trace.from_dict(client.predict(run_id, api_name="/fetch_run"))
        assert fetched.to_dict() == trace.to_dict()


def test_cancel_stops_the_run_and_stores_it_as_cancelled(page, app):
    pick_question(page, "Inception born")
    set_methods(page, ["dragin"])
    set_param(page, "dragin", "max_length", 300)
    click_run(page)
    wait_tokens(page)
    page.locator("#cancel").click()
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('Cancelled')", timeout=60_000)
    run_id = page.locator("#run-view .dre-run").get_attribute("data-run")
    assert page.locator("#run-view .dre-run").get_attribute("data-status") == "cancelled"
    trace = RunStore(app.db).get(run_id)
    assert trace.status == "cancelled" and "Inception" in trace.question
    shot(page, "cancelled", "#run-view")


def test_bad_parameters_and_empty_question_give_specific_messages(page):
    status = page.locator("#run-status")
    pick_question(page, "seating capacity")
    set_methods(page, ["dragin"])
    set_param(page, "dragin", "threshold", -1)
    click_run(page)
    page.wait_for_selector("#run-status .dre-error")
    text = status.inner_text()
    assert "DraginConfig.threshold: -1.0 is out of range" in text and "Fix:" in text
    set_param(page, "dragin", "threshold", 0.3)
    set_param(page, "dragin", "top_k", 2.5)
    click_run(page)
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('not a valid int')")
    set_param(page, "dragin", "top_k", 3)
    # Settings' Embedder takes only what the server offers: a real folder of the server gets the same refusal
    # as any other text, and nothing is opened (the box shows the embedder by name, not by path)
    embedder = page.locator("#embedder textarea, #embedder input").first
    assert embedder.input_value() == "embedded" and "(set when the app starts" in page.locator("#embedder").inner_text()
    choose(page, "retriever", "dense")
    embedder.fill(str(ROOT / "explorer"))
    click_run(page)
    page.wait_for_function("document.querySelector('#run-status').innerText.includes("
                           "'is not an embedder this server offers')")
    assert str(ROOT) not in status.inner_text() and "--embedder" in status.inner_text()
    embedder.fill("embedded")
    choose(page, "retriever", "bm25")
    choose(page, "question-source", "Type your own")
    page.locator("#question textarea").fill("\u200b\u200d\u2060")  # only zero-width characters
    click_run(page)
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('all invisible')")
    page.locator("#question textarea").fill("   ")
    click_run(page)
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('the question is empty')")
    set_methods(page, [])
    page.locator("#question textarea").fill("Who?")
    click_run(page)
    page.wait_for_function("document.querySelector('#run-status').innerText.includes('no method is selected')")
    shot(page, "bad-input", "#run-status")
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and "Error" not in page.locator("#run-view").inner_text()


def test_changing_targs_gate_or_dragins_variant_moves_the_threshold_to_its_start(page):
    """τ is measured per gate: picking the variance gate moves the threshold and its help line to the variance
    preset, and picking the margin gate back moves it back; DRAGIN's variant moves its threshold likewise."""
    from explorer.ui.page import controls

    model = controls.model_name("embedded")
    threshold = next(p for p in controls.params("targ") if p.name == "threshold")
    start = {gate: controls.shown_default(threshold, "paper", model, {"gate": gate}) for gate in ("margin", "variance")}
    assert start["margin"] != start["variance"]
    box = "#param-targ-threshold input"

    def shows(value: float, sel: str = box) -> None:
        page.wait_for_function("([sel, v]) => Number(document.querySelector(sel).value) === v", arg=[sel, value],
                               timeout=15_000)

    open_settings(page, "targ")
    shows(start["margin"])
    choose(page, "param-targ-gate", "variance")
    shows(start["variance"])
    assert f"preset for {model}: {start['variance']}" in page.locator("#param-targ-threshold").inner_text()
    choose(page, "param-targ-gate", "margin")
    shows(start["margin"])

    dragin = next(p for p in controls.params("dragin") if p.name == "threshold")
    open_settings(page, "dragin")
    for variant in ("reference", "paper"):
        page.locator("#variant-dragin label").filter(has_text=variant).click()
        shows(controls.shown_default(dragin, variant, model), "#param-dragin-threshold input")


def test_killing_the_server_mid_run_leaves_the_database_sound(context, tmp_path):
    from gradio_client import Client

    server = start_app(tmp_path, name="crash")
    try:
        client = Client(server.url, verbose=False)
        done = client.predict("Where was Mozart born?", "wo", "", '{"max_length": 8, "fewshot": 1}', api_name="/run")
        assert done["status"] == "complete"
        page = context.new_page()
        open_app(page, server.url)
        wait_ready(page)
        pick_question(page, "seating capacity")
        set_methods(page, ["dragin"])
        set_param(page, "dragin", "max_length", 200)
        click_run(page)
        wait_tokens(page)  # the model is writing now
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        assert page.locator("#run-view .dre-root").get_attribute("data-busy") == "1"  # it never finished
        page.close()
    finally:
        server.stop()
    with sqlite3.connect(server.db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = RunStore(server.db)
    rows = {r["run_id"]: r for r in store.list()}
    assert len(rows) == 2 and done["run_id"] in rows
    trace = store.get(done["run_id"])
    trace.validate()
    assert trace.status == "complete" and trace.answer == done["answer"]
    # The killed run was stored when it started: it reopens as interrupted, with what it had done.
    killed = store.get(next(i for i in rows if i != done["run_id"]))
    killed.validate()
    assert killed.status == "interrupted" and killed.method == "dragin" and "seating capacity" in killed.question
    assert killed.events[-1].kind == "note" and "last checkpoint" in killed.error


@pytest.mark.slow
def test_evaluations_tab_goes_from_a_cell_to_a_question_to_its_trace(context, tmp_path):
    """A stored evaluation: pick it, click a cell of its table, click a question, and its run opens.

    The tab reads stored runs whatever model made them: the evaluation and the app run the random-weight
    ``random:tiny`` (the embedded model would be loaded twice for runs nobody reads)."""
    db = tmp_path / "evals.sqlite"
    proc = subprocess.run([sys.executable, "-m", "explorer", "eval", "--dataset", "demo", "--methods", "wo,sr",
                           "--limit", "2", "--corpus", "demo", "--set", "max_length=8", "--set", "answer_tokens=4",
                           "--model", "random:tiny", "--db", str(db), "--name", "tiny-eval", "--quiet"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    server = start_app(tmp_path, name="evals", extra_args=("--model", "random:tiny"))  # serves tmp_path/evals.sqlite
    try:
        page = context.new_page()
        open_app(page, server.url)
        page.locator("#tab-evaluations-button").click()
        page.locator("#eval-refresh").click()
        page.wait_for_function("() => document.querySelector('#eval-pick input').value.includes('tiny-eval')")
        cells = "#{} .virtual-row [role=gridcell]"
        page.locator(cells.format("eval-answers")).nth(1).click()  # the first method's score on the demo set
        page.wait_for_selector(cells.format("eval-questions"), timeout=30_000)
        cell = page.locator(cells.format("eval-questions")).nth(2)  # the first question's text
        asked = cell.inner_text().strip()
        cell.click()
        page.wait_for_function("() => document.querySelector('#eval-run-id input, #eval-run-id textarea')"
                               ".value.length > 0", timeout=30_000)
        page.wait_for_selector("#evaluations-view .dre-tokens", timeout=30_000)
        assert asked[:40] in page.locator("#evaluations-view").inner_text()
        shot(page, "evaluations-tab")
        page.close()
    finally:
        server.stop()


def test_a_question_file_loads_into_the_picker_with_its_format_detected(page, tmp_path):
    import json

    mine = tmp_path / "bamboogle.jsonl"
    mine.write_text("".join(json.dumps(r) + "\n" for r in [
        {"idx": 1, "question": "Who founded the zorblax guild?", "answer": "Ada Quill"},
        {"idx": 2, "question": "When did the zorblax guild close?", "answer": "1911"}]), encoding="utf-8")
    open_settings_panel(page)  # question sources are folded under Settings
    page.get_by_text("Load a question file").click()
    page.locator("#question-file input[type=file]").set_input_files(str(mine))
    page.wait_for_function("() => document.querySelector('#question-source input').value"
                           ".includes('File: bamboogle.jsonl (question-only, 2 questions)')", timeout=60_000)
    pick_question(page, "zorblax guild close")
    page.wait_for_selector("#gold:has-text('1911')")
    # the wrong format, chosen by hand: the message names the line, the fix and the app's own control
    choose(page, "question-format", "strategyqa")
    note = page.locator("#data-note")
    note.wait_for(state="visible", timeout=30_000)
    text = note.inner_text()
    assert "line 1 of" in text and "bamboogle.jsonl" in text and "not true or false" in text
    assert "the Format menu" in text and "--format" not in text
    choose(page, "question-format", "detect")
    page.wait_for_selector("#data-note", state="hidden", timeout=30_000)
