"""Forks in a real browser (Debian's chromium via Playwright) against the embedded model and SQLite.

A DRAGIN run is forked from its token menu (force retrieval with the user's query): the fork
streams in and opens beside its parent, the divergence is marked in both strips, and the fork
panel shows the token-level diff and what was replayed. The retrieval card's menu, the
keyboard path to the token menu, a refused fork, the family tree in History and the comparison
of a fork with its parent are driven the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.store import RunStore
from tests.browser_support import (
    CHROMIUM,
    browser_context,
    click_run,
    open_app,
    pick_question,
    set_methods,
    set_param,
    shot,
    wait_done,
    wait_ready,
    wait_tokens,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")]

MENU = ".dre-forkmenu"
DEMO_Q = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
VIEW = "#run-view"


@pytest.fixture(scope="module")
def app(ui_app):
    return ui_app


@pytest.fixture()
def page(app):
    with browser_context() as ctx:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        open_app(page, app.url)
        wait_ready(page)
        yield page
        assert errors == []


def _run_dragin(page) -> str:
    pick_question(page, "seating capacity")
    set_methods(page, ["dragin"])
    set_param(page, "dragin", "max_length", 24)
    set_param(page, "dragin", "fewshot", 2)
    set_param(page, "dragin", "answer_tokens", 8)
    set_param(page, "dragin", "threshold", 0.3)
    click_run(page)
    wait_tokens(page)
    wait_done(page)
    return page.locator(f"{VIEW} .dre-run").first.get_attribute("data-run")


def _open_token_menu(page, *, skip_fired: bool = True) -> str:
    """Open the menu on a token whose "Force retrieval here" is offered without a query; its label."""
    tokens = page.locator(f"{VIEW} .dre-run[data-view=done] .dre-span:not(.group) .tok")
    for i in range(1, min(tokens.count(), 12)):
        tokens.nth(i).click()
        page.wait_for_selector(f"{MENU} [role=menuitem]", timeout=30_000)
        force = page.locator(f"{MENU} [role=menuitem][data-kind=force_retrieval]")
        if force.is_enabled() or not skip_fired:
            return page.locator(f"{MENU} .dre-fm-title").inner_text()
        page.keyboard.press("Escape")
    raise AssertionError("no token offered a forced retrieval")


def test_a_fork_from_the_token_menu_opens_beside_its_parent_with_the_diff(page, app):
    parent_id = _run_dragin(page)
    _open_token_menu(page)
    items = page.locator(f"{MENU} [role=menuitem]")
    assert items.all_inner_texts() == ["Force retrieval here", "Change parameters from this span",
                                       "Replay from here without change"]
    page.locator(f"{MENU} [role=menuitem][data-kind=force_retrieval]").click()
    page.locator(f"{MENU} .dre-fm-query").fill("Androscoggin Bank Colisée seating capacity <b>bold</b>")
    shot(page, "fork-menu")
    page.locator(f"{MENU} .dre-fm-go").click()

    page.wait_for_selector(f"{VIEW} .dre-fork", timeout=240_000)
    wait_done(page, runs=2)
    pair = page.locator(f"{VIEW} .dre-forkpair .dre-run")
    assert pair.count() == 2
    assert pair.nth(0).get_attribute("data-run") == parent_id
    child_id = pair.nth(1).get_attribute("data-run")
    assert child_id != parent_id
    # the divergence is marked in both strips, the replayed spans in the fork's
    assert pair.nth(0).locator(".tok.forkpoint").count() == 1
    assert pair.nth(1).locator(".tok.forkpoint").count() == 1
    assert pair.nth(1).locator(".dre-span.replayed").count() >= 1
    panel = page.locator(f"{VIEW} [data-panel=fork]")
    assert "retrieval forced" in panel.inner_text()
    assert panel.locator(".dre-fork-tokens").count() == 1
    assert "tokens replayed" in panel.inner_text()
    # the user's query was searched, shown as text
    assert "<b>bold</b>" in pair.nth(1).locator("[data-panel=retrievals]").inner_text()
    assert pair.nth(1).locator("[data-panel=retrievals] b:text('bold')").count() == 0
    assert "stored" in page.locator("#run-fork-status").inner_text()
    shot(page, "fork-beside-parent", VIEW)

    stored = RunStore(app.db)
    child = stored.get(child_id)
    assert child.fork["parent"] == parent_id and child.fork["change"]["kind"] == "force_retrieval"
    assert [r["run_id"] for r in stored.family(parent_id)] == [parent_id, child_id]

    # History: the family tree of the fork, each node openable; the fork and its parent compare
    page.locator("#tab-history-button").click()
    page.wait_for_selector("#history-runs label", timeout=30_000)
    page.locator("#history-runs label").nth(1).click()  # newest first: the parent is second
    page.locator("#history-open").click()
    page.wait_for_selector("#history-view [data-panel=family] .dre-fam-node", timeout=30_000)
    nodes = page.locator("#history-view [data-panel=family] .dre-fam-node")
    assert nodes.count() == 2
    assert nodes.first.get_attribute("aria-current") == "true"
    nodes.nth(1).click()  # the fork opens beside its parent, with the diff
    page.wait_for_selector("#history-view .dre-forkpair", timeout=30_000)
    assert page.locator("#history-view .dre-forkpair .dre-run").nth(1).get_attribute("data-run") == child_id
    assert page.locator("#history-view [data-panel=fork]").count() == 1
    page.locator("#history-runs label").first.click()  # both ticked
    page.locator("#history-compare").click()
    page.wait_for_selector("#history-view [data-panel=compare]", timeout=30_000)
    assert page.locator("#history-view [data-panel=fork]").count() == 1


def test_retrieval_menu_keyboard_path_and_a_refused_fork(page, app):
    _run_dragin(page)
    # keyboard: Tab into the strip, arrows to a token, Enter opens the menu, Escape closes it
    strip = page.locator(f"{VIEW} .dre-run[data-view=done] .dre-strip").first
    strip.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"{MENU} [role=menuitem]", timeout=30_000)
    focused = page.evaluate("document.activeElement.getAttribute('role')")
    assert focused == "menuitem"
    page.keyboard.press("Escape")
    assert page.locator(MENU).count() == 0
    assert page.evaluate("document.activeElement.classList.contains('tok')")

    # a retrieval card offers suppress / edit query / edit passages; the passage editor searches the corpus
    card_button = page.locator(f"{VIEW} .dre-ret .dre-fork-btn").first
    card_button.click()
    page.wait_for_selector(f"{MENU} [role=menuitem]", timeout=30_000)
    assert page.locator(f"{MENU} [role=menuitem]").all_inner_texts() == [
        "Suppress this retrieval", "Edit the query", "Edit the passages"]
    page.locator(f"{MENU} [role=menuitem][data-kind=edit_passages]").click()
    before = page.locator(f"{MENU} .dre-fm-passages li").count()
    assert before >= 1
    page.locator(f"{MENU} .dre-fm-search").fill("Colisée Lewiston arena")
    page.locator(f"{MENU} .dre-fm-find").click()
    page.wait_for_selector(f"{MENU} .dre-fm-found .dre-fm-add", timeout=30_000)
    page.locator(f"{MENU} .dre-fm-passages li button[title=remove]").first.click()
    assert page.locator(f"{MENU} .dre-fm-passages li").count() == before - 1
    page.keyboard.press("Escape")

    # a refused fork (a parameter out of range) says why, with no traceback
    _open_token_menu(page, skip_fired=False)
    page.locator(f"{MENU} [role=menuitem][data-kind=set_params]").click()
    page.locator(f"{MENU} .dre-fm-param input[data-name=threshold]").fill("-5")
    page.locator(f"{MENU} .dre-fm-go").click()
    page.wait_for_function("document.querySelector('#run-fork-status .dre-error')", timeout=120_000)
    message = page.locator("#run-fork-status").inner_text()
    assert "threshold" in message and "Traceback" not in message


def test_the_fork_endpoint_through_gradio_client(app):
    """/fork forks a stored run by its token or retrieval and answers with the fork's summary and facts."""
    from gradio_client import Client

    client = Client(app.url, verbose=False)
    summary = client.predict(DEMO_Q, "dragin", "", '{"max_length": 24, "fewshot": 2, "answer_tokens": 8, '
                             '"threshold": 0.3}', api_name="/run")
    parent = RunStore(app.db).get(summary["run_id"])
    retrieval = next(e.id for e in parent.events if e.kind == "retrieval")
    fork = client.predict(parent.run_id, "", retrieval, "suppress_retrieval", api_name="/fork")
    assert fork["status"] == "complete" and fork["run_id"] != parent.run_id
    facts = fork["fork"]
    assert facts["parent_run_id"] == parent.run_id and facts["root_run_id"] == parent.run_id
    assert facts["at"] == {"retrieval": retrieval} and facts["change"] == {"kind": "suppress_retrieval"}
    assert facts["depth"] == 1 and facts["parent_answer"] == parent.answer
    assert fork["costs"]["replayed_tokens"] > 0
    child = RunStore(app.db).get(fork["run_id"])
    assert child.costs.retrievals < parent.costs.retrievals or any(
        e.payload.get("suppressed") for e in child.events if e.kind == "retrieval")

    # the change as JSON; a fork of the fork goes one level deeper
    span = next(e.id for e in child.events if e.kind == "generation")
    again = client.predict(child.run_id, f"{span}:0", None, '{"kind": "none"}', api_name="/fork")
    assert again["fork"]["depth"] == 2 and again["fork"]["root_run_id"] == parent.run_id

    # a point resolve refuses: its message, no traceback, and nothing stored
    before = len(RunStore(app.db).list())
    with pytest.raises(Exception) as caught:
        client.predict(parent.run_id, "", 0, "edit_query", "x", api_name="/fork")
    assert "not a retrieval event" in str(caught.value) and "Traceback" not in str(caught.value)
    assert len(RunStore(app.db).list()) == before
