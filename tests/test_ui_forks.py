"""The app's side of forks without a browser: the menus' checks, the fork panel, the family tree,
streaming a fork through the run controller, and the requests the page and /fork send.

Runs are real (a tiny random model on the demo corpus, a real SQLite store); hostile text is
put into the traces' answers, tokens and queries to check every piece of it is escaped.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

from explorer.errors import ExplorerError
from explorer.forks import ForkChange, ForkPlan, ForkPoint, fork_run
from explorer.forks.diff import diff_runs
from explorer.journal import RunJournal
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.panels import fork as fork_panel
from explorer.ui.runs import forking
from explorer.ui.views.render import render_comparison, render_fork, render_runs
from tests.ui_payloads import IMG, PAYLOAD, SCRIPT, Elements

QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
CONFIG = {"max_length": 24, "answer_tokens": 6, "threshold": 0.0}


@pytest.fixture(scope="module")
def runtime(tiny_lm, demo_retriever) -> Runtime:
    from explorer.engine.generation import Engine

    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


@pytest.fixture(scope="module")
def family(runtime, tmp_path_factory) -> tuple[RunStore, Trace, Trace, Trace]:
    """A DRAGIN run, a fork of it (a forced retrieval with a hostile query) and a fork of that fork, stored."""
    store = RunStore(tmp_path_factory.mktemp("forks") / "runs.sqlite")
    parent = run_question("dragin", QUESTION, runtime, config=CONFIG, journal=RunJournal(store))
    token = _free_token(parent)
    child = fork_run(parent, ForkPlan(parent.run_id, ForkPoint(span=token[0], token=token[1]),
                                      ForkChange("force_retrieval", query="arena " + PAYLOAD)), runtime,
                     journal=RunJournal(store))
    retrieval = next(e.id for e in child.events if e.kind == "retrieval" and not e.payload.get("replayed"))
    grandchild = fork_run(child, ForkPlan(child.run_id, ForkPoint(retrieval=retrieval),
                                          ForkChange("suppress_retrieval")), runtime, journal=RunJournal(store))
    return store, store.get(parent.run_id), store.get(child.run_id), store.get(grandchild.run_id)


def _marked(page: str) -> int:
    """How many tokens are marked as a fork's divergence."""
    return len(re.findall(r'class="tok[^"]*\bforkpoint', page))


def _free_token(trace: Trace) -> tuple[int, int]:
    """A (span, token) where the method did not fire, so a retrieval can be forced there without a query."""
    for action_span in (e for e in trace.events if e.kind == "check"):
        span = int(action_span.payload["span"])
        n = len(trace.events[span].payload["tokens"])
        for token in range(n):
            actions = {a.kind: a for a in forking.token_actions(trace, span, token)}
            if actions["force_retrieval"].ok and not actions["force_retrieval"].required:
                return span, token
    raise AssertionError("no token to force a retrieval at")


# -- menus -----------------------------------------------------------------------------------------------
def test_token_menu_offers_what_resolve_accepts_and_says_why_not(family):
    _, parent, _, _ = family
    span, token = _free_token(parent)
    actions = forking.token_actions(parent, span, token)
    assert [a.label for a in actions] == ["Force retrieval here", "Change parameters from this span",
                                          "Replay from here without change"]
    assert all(a.ok for a in actions)
    params = {p["name"]: p["value"] for p in actions[1].params}
    assert params["threshold"] == parent.config["threshold"]
    assert all(isinstance(v, (int, float)) for v in params.values())

    # where retrieval already fired, forcing it needs the user's own query (resolve's message says so)
    trigger = next(e for e in parent.events if e.kind == "trigger")
    fired = {a.kind: a for a in forking.token_actions(parent, trigger.payload["span"], trigger.payload["token_index"])}
    assert fired["force_retrieval"].ok and fired["force_retrieval"].required
    assert "already fired" in fired["force_retrieval"].message

    # not a generation event: every action refused with resolve's message (what to choose instead)
    query_event = next(e.id for e in parent.events if e.kind == "query")
    refused = forking.token_actions(parent, query_event, 0)
    assert not any(a.ok for a in refused)
    assert all("is not a generation event" in a.message and "Fix:" in a.message for a in refused[::2])


def test_retrieval_menu_starts_from_the_query_and_passages_it_had(family):
    _, parent, _, _ = family
    event = next(e for e in parent.events if e.kind == "retrieval")
    actions = {a.kind: a for a in forking.retrieval_actions(parent, event.id)}
    assert list(actions) == ["suppress_retrieval", "edit_query", "edit_passages"]
    assert all(a.ok for a in actions.values())
    assert actions["edit_query"].query == parent.events[event.payload["query"]].payload["text"]
    assert [p["id"] for p in actions["edit_passages"].passages] == [h["id"] for h in event.payload["hits"]]
    menu = forking.menu(parent, {"retrieval": 0})
    assert not any(a["ok"] for a in menu["actions"])
    assert "not a retrieval event" in menu["actions"][0]["message"]
    with pytest.raises(ExplorerError, match="not a token or a retrieval"):
        forking.menu(parent, {"span": "x"})


def test_a_running_run_cannot_be_forked(family):
    _, parent, _, _ = family
    running = dataclasses.replace(parent, status="running")
    assert not any(a.ok for a in forking.token_actions(running, *_free_token(parent)))
    with pytest.raises(ExplorerError, match="only a finished or stopped run"):
        forking.check(running, ForkPlan(parent.run_id, ForkPoint(span=_free_token(parent)[0]), ForkChange("none")))


# -- requests --------------------------------------------------------------------------------------------
def test_requests_become_plans_and_malformed_ones_say_what_to_fix():
    plan = forking.plan_from_request('{"run_id": "abc", "at": {"span": 3, "token": 2}, '
                                     '"change": {"kind": "set_params", "params": {"threshold": "0.8"}}}')
    assert plan.point == ForkPoint(span=3, token=2) and plan.change.params == {"threshold": 0.8}
    plan = forking.plan_from_request({"run_id": "abc", "at": {"retrieval": 5},
                                      "change": {"kind": "edit_passages", "passages": ["b", "a"]}})
    assert plan.point == ForkPoint(retrieval=5) and plan.change.passages == ("b", "a")
    assert forking.change_of("set_params", params="threshold=0.5, max_length=40").params == \
        {"threshold": 0.5, "max_length": 40}
    assert forking.change_of('{"kind": "edit_query"}', query=" who built it ").query == "who built it"
    assert forking.change_of("edit_passages", passages="p1,\np2").passages == ("p1", "p2")
    assert forking.point_of(at="7:3") == ForkPoint(span=7, token=3)
    assert forking.point_of(at="", retrieval=9) == ForkPoint(retrieval=9)
    for bad, where in (("{", "fork"), ('{"at": {}}', "fork")):
        with pytest.raises(ExplorerError) as caught:
            forking.plan_from_request(bad)
        assert caught.value.where == where and caught.value.fix
    for call, match in ((lambda: forking.parse_params("threshold"), "is not NAME=VALUE"),
                        (lambda: forking.parse_params("{1"), "not valid JSON"),
                        (lambda: forking.change_of("explode"), "unknown fork change"),
                        (lambda: forking.point_of(at="seven"), "is not SPAN:TOKEN"),
                        (lambda: forking.point_of(retrieval="R2"), "is not a retrieval event id"),
                        (lambda: forking.parse_passages("[1,"), "not valid JSON")):
        with pytest.raises(ExplorerError, match=match):
            call()


def test_passage_search_finds_by_words_and_by_id(demo_retriever):
    found = forking.search_passages(demo_retriever, "Lewiston Maineiacs arena")
    assert 1 <= len(found) <= forking.SEARCH_K and all(p["id"] and "text" in p for p in found)
    by_id = forking.search_passages(demo_retriever, found[-1]["id"])
    assert by_id[0]["id"] == found[-1]["id"]
    assert forking.search_passages(demo_retriever, "   ") == []


# -- the fork panel ----------------------------------------------------------------------------------------
def test_fork_beside_its_parent_marks_the_divergence_in_both_strips_and_escapes_everything(family):
    _, parent, child, _ = family
    page = render_fork(parent, child)
    assert Elements(page).injected() == []
    assert page.count('class="dre-run"') == 2
    assert _marked(page) == 2  # the same token marked in the parent and in the fork
    assert 'dre-span replayed' in page
    assert 'data-panel="fork"' in page and "retrieval forced with the query" in page
    assert "&lt;script&gt;" in page  # the hostile query shown as text
    d = diff_runs(parent, child)
    panel = fork_panel.render(parent, child, d)
    assert ("<ins" in panel) == any(op.tag in ("insert", "replace") for op in d.tokens)
    assert f"replayed (not generated)</td><td>{child.costs.replayed_tokens}" in panel


def test_diff_panel_escapes_hostile_answers_and_tokens(family):
    _, parent, child, _ = family
    evil_parent = dataclasses.replace(parent, answer="the arena " + PAYLOAD)
    evil_child = dataclasses.replace(copy.deepcopy(child), answer="a stadium " + SCRIPT)
    for e in evil_child.events:
        if e.kind == "generation" and not e.payload.get("replayed"):
            e.payload["tokens"] = [dict(t, text=IMG) for t in e.payload["tokens"]]
            break
    panel = fork_panel.render(evil_parent, evil_child)
    assert Elements(panel).injected() == []
    assert "&lt;img src=x onerror=" in panel and "&lt;script&gt;" in panel
    assert "answer changed" in panel
    same = fork_panel.render(parent, dataclasses.replace(child, answer=parent.answer))
    assert "same answer" in same


def test_a_fork_and_its_parent_compare_with_the_fork_panel(family):
    _, parent, child, grandchild = family
    for pair in ([parent, child], [child, parent]):
        page = render_comparison(pair)
        assert 'data-panel="fork"' in page and 'data-panel="compare"' in page
        assert _marked(page) == 2
        assert Elements(page).injected() == []
    assert 'data-panel="fork"' not in render_comparison([parent, grandchild])  # not parent and fork


# -- the family tree -------------------------------------------------------------------------------------
def test_family_tree_nests_forks_of_forks_and_every_node_opens(family):
    store, parent, child, grandchild = family
    rows = store.family(grandchild.run_id)
    assert [r["run_id"] for r in rows] == [parent.run_id, child.run_id, grandchild.run_id]
    tree = fork_panel.render_family(rows, current=child.run_id)
    assert tree.count('class="dre-fam-node') == 3
    assert tree.index(parent.run_id) < tree.index(child.run_id) < tree.index(grandchild.run_id)
    # nesting: the grandchild's list sits inside the child's item
    assert tree.count('<ul class="dre-family">') == 3
    assert f'data-open-run="{child.run_id}" aria-current=true' in tree
    assert "retrieval suppressed" in tree and "the first run" in tree
    assert fork_panel.render_family(store.family(parent.run_id)[:1]) == ""  # a run alone has no tree


def test_family_tree_escapes_stored_text_and_shows_orphans():
    rows = [{"run_id": "a" * 32, "parent_run_id": None, "method": "dragin" + IMG, "variant": "paper",
             "status": "complete", "answer": PAYLOAD, "at": None, "change": None},
            {"run_id": "b" * 32, "parent_run_id": "gone" + SCRIPT, "method": "dragin", "variant": "paper",
             "status": "complete", "answer": SCRIPT, "at": {"span": 1, "token": 0},
             "change": {"kind": "edit_query", "query": IMG}}]
    tree = fork_panel.render_family(rows)
    assert Elements(tree).injected() == []
    assert "&lt;img src=x" in tree and "its parent is not stored here" in tree


# -- streaming through the controller ------------------------------------------------------------------------
def test_the_controller_streams_a_fork_beside_its_parent_and_stores_it(family, runtime):
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    store, parent, _, _ = family
    holder = RuntimeHolder(lambda: runtime, describe="tiny model")
    controller = RunController(store, holder)
    bad = ForkPlan(parent.run_id, ForkPoint(span=10_000, token=0), ForkChange("none"))
    with pytest.raises(ExplorerError, match="is not a generation event"):
        list(controller.stream_fork(parent, bad, session="s"))
    assert not holder.ready  # refused before any model work: the model was never asked for

    span, token = _free_token(parent)
    plan = ForkPlan(parent.run_id, ForkPoint(span=span, token=token), ForkChange("none"))
    updates = list(controller.stream_fork(parent, plan, session="s"))
    streamed = [u for u in updates if not u.done]
    assert streamed and all(f'data-run="{parent.run_id}"' in u.html for u in streamed[1:])  # the parent beside
    assert any(_marked(u.html) for u in streamed[1:])
    final = updates[-1]
    assert final.done and len(final.run_ids) == 1
    child = store.get(final.run_ids[0])
    assert child.fork["parent"] == parent.run_id and child.fork["change"] == {"kind": "none"}
    assert diff_runs(parent, child).same_answer  # nothing changed: the same run again


def test_render_runs_marks_a_parent_shown_beside_its_running_fork(family):
    _, parent, child, _ = family
    html = render_runs([parent], fork_marks={parent.run_id: child.fork["at"]})
    assert _marked(html) == 1


def test_the_fork_panels_link_to_their_help_paragraphs(family):
    from explorer.paths import ASSETS_DIR
    from explorer.ui.views.html import HELP_ANCHORS

    store, parent, child, _ = family
    help_text = (ASSETS_DIR / "help.md").read_text(encoding="utf-8")
    for panel, html in (("fork", fork_panel.render(parent, child)),
                        ("family", fork_panel.render_family(store.family(parent.run_id)))):
        anchor = HELP_ANCHORS[panel]
        assert f'id="{anchor}"' in help_text
        assert f'data-help="{anchor}"' in html


def test_a_fork_on_another_model_is_refused_with_the_reason_not_a_traceback(family, runtime):
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    store, parent, _, _ = family
    other = dataclasses.replace(copy.deepcopy(parent), model={**parent.model, "name": "another-model"})
    controller = RunController(store, RuntimeHolder(lambda: runtime, describe="tiny model"))
    before = len(store.list())
    plan = ForkPlan(other.run_id, ForkPoint(span=_free_token(parent)[0]), ForkChange("none"))
    final = list(controller.stream_fork(other, plan, session="s"))[-1]
    assert final.done and final.run_ids == []
    assert "dre-error" in final.status and "another model" in final.status and "Traceback" not in final.status
    assert len(store.list()) == before  # nothing stored
