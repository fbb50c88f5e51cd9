"""The page's words and addresses, browser-free: one numbering everywhere, forced and suppressed decisions
named as such, legends of what a run holds, links, recorded runs in History, exports for slides,
accessible names and headings, and no placeholder tables."""

from __future__ import annotations

import re

import gradio as gr
import pytest

from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.summary import render_text
from explorer.trace import TokenSignal, Trace, TraceRecorder
from explorer.ui.page import links
from explorer.ui.page.evaluations import build_evaluations_tab
from explorer.ui.panels import decisions
from explorer.ui.runs import forking, gallery, history
from explorer.ui.views import report
from explorer.ui.views.render import render_run
from explorer.ui.views.view import TraceView, ViewOptions
from tests.ui_payloads import Elements, hostile_trace

WORDS = [" The", " arena", " is", " in", " Lewiston", "."]


def small_run(run_id: str = "small0000000000a", *, fired: int | None = 4, override: dict | None = None) -> Trace:
    """A DRAGIN-like run: a draft whose check fires at ' Lewiston' (or not), a retrieval, the rest, the answer."""
    trace = Trace(question="Where is the arena?", method="dragin", variant="paper", config={"threshold": 0.3},
                  model={"name": "m"}, corpus={"name": "demo"}, run_id=run_id, gold={"answers": ["Lewiston"]})
    rec = TraceRecorder(trace)
    tokens = [TokenSignal(id=i, text=t, prob=0.5, entropy=1.0, top=[], amax=0.2, rind=0.1 * i, content=True).to_dict()
              for i, t in enumerate(WORDS)]
    gen = rec.add("generation", purpose="draft", text="".join(WORDS), tokens=tokens, prompt="", decoding="greedy")
    check = {"span": gen.id, "signal": "rind", "threshold": 0.3, "compare": ">", "fired": fired, "unit": "token",
             "rule": "first content token over θ",
             "units": [{"text": t["text"], "value": t["signals"]["rind"], "eligible": True} for t in tokens]}
    rec.add("check", **check, **({"fork_override": override} if override else {}))
    if fired is not None:
        rec.add("trigger", span=gen.id, token_index=fired, signal="rind", value=0.1 * fired, threshold=0.3,
                token=WORDS[fired])
        rec.add("truncation", span=gen.id, token_index=fired, kept_text="".join(WORDS[:fired]),
                discarded_text="".join(WORDS[fired:]), reason="cut before the token that fired")
        query = rec.add("query", text="arena Lewiston", source="qfs")
        ret = rec.add("retrieval", query=query.id, hits=[{"id": "d1", "title": "Colisée", "text": "An arena.",
                                                          "score": 2.0, "rank": 1}], k=1)
        rec.step = 1
        more = [TokenSignal(id=9, text=" Lewiston", prob=0.9, entropy=0.2, top=[], amax=0.1, rind=0.02).to_dict()]
        gen2 = rec.add("generation", purpose="draft", text=" Lewiston", tokens=more, prompt="", decoding="greedy")
        rec.add("continuation", span=gen2.id, retrieval=ret.id)
    rec.add("answer", text="So the answer is Lewiston", answer="Lewiston")
    trace.answer, trace.output, trace.status = "Lewiston", "The arena is in Lewiston", "complete"
    return trace


def test_one_numbering_in_the_strip_the_panels_the_fork_menu_and_the_command_line() -> None:
    trace = small_run()
    page = render_run(trace, ViewOptions(interactive=True))
    # events: 0 the draft, 1 its check, 2 the trigger, 3 the cut, 4 the query, 5 the retrieval, 6 the rest
    assert "span 0 · draft · step 0" in page and "token 4 of span 0: &#x27; Lewiston&#x27;" in page
    assert "given the passages of retrieval 5" in page and "Retrieval 5 · step 0" in page
    assert "Query 4</b> · step 0" in page
    assert "retrieval fired at &#x27; Lewiston&#x27;: rind = 0.4 &gt; θ = 0.3" in page
    assert forking.menu(trace, {"span": 0, "token": 4})["title"] == "Fork at token 4 of span 0"
    assert forking.menu(trace, {"retrieval": 5})["title"] == "Fork at retrieval 5"
    text = render_text(trace)
    assert "span 0 generated" in text and "retrieval fired at token 4 of span 0" in text
    assert "retrieval 5: 1 passage(s)" in text and "cut span 0 from token 4 on" in text
    shown = re.sub(r"<[^>]+>", " ", page) + text  # what a reader sees, without the markup's colours
    for jargon in ("Q4", "check #", "R1 ", "#1", "[0]", "step 1:"):
        assert jargon not in shown, jargon
    steps = decisions.decisions(TraceView(trace))
    assert [d.kind for d in steps] == ["fired", "bar", "retrieval", "answer"]
    assert steps[0].target == '[data-span~="0"] .tok[data-i="4"]' and "cut away" in steps[0].why
    # the chart's bar that fired: the fifth bar (point 4) of the decision chart, over θ as two others (0.3 + ε, 0.5)
    assert steps[1].bar == 4 and "rind = 0.4, over the line θ = 0.3" in steps[1].why
    assert "2 other token(s) of this check were over it too" in steps[1].why


def test_forced_and_suppressed_retrievals_are_named_so_and_legends_show_what_the_run_holds() -> None:
    forced = small_run(override={"method_fired": None, "fired": 4, "change": "force_retrieval"})
    page = render_run(forced, ViewOptions())
    assert "retrieval forced by a fork at &#x27; Lewiston&#x27;" in page and "retrieval fired at" not in page
    assert "⚑ retrieval forced by a fork" in page and "⚑ retrieval fired" not in page  # the legend
    assert decisions.decisions(TraceView(forced))[0].title.startswith("Retrieval forced by a fork")
    assert "retrieval forced by a fork at token 4 of span 0" in render_text(forced)
    suppressed = small_run(fired=None, override={"method_fired": 4, "fired": None, "change": "suppress_retrieval"})
    first = decisions.decisions(TraceView(suppressed))[0]
    assert first.kind == "suppressed" and "would have retrieved at 'Lewiston'" in first.why
    legend = re.search(r'<span class="dre-key">(.*?)</span></div>', render_run(suppressed, ViewOptions())).group(1)
    assert "fired" not in legend and "cut away" not in legend  # nothing fired, nothing was cut
    kept = decisions.decisions(TraceView(small_run(fired=None)))[0]
    assert kept.kind == "kept" and "the highest was 0.5 at '.'" in kept.why and "RIND: unsureness" in kept.why


def test_links_open_runs_forks_comparisons_and_recorded_cases(tmp_db) -> None:
    store = RunStore(tmp_db)
    parent, child = small_run("parent000000000a"), small_run("child0000000000a")
    child.fork = {"parent": parent.run_id, "at": {"span": 0, "token": 2}, "change": {"kind": "none"}, "depth": 1}
    store.save(parent)
    store.save(child)
    shelf = gallery.load()
    cache = history.TraceCache(store)
    for trace in shelf.traces.values():
        cache.pin(trace)
    assert links.open_link({}, cache, shelf) is None
    fork = links.open_link({"run": child.run_id}, cache, shelf)
    assert fork.shown.ids == [parent.run_id, child.run_id] and fork.shown.fork and fork.item is None
    both = links.open_link({"compare": f"{parent.run_id}, {child.run_id}"}, cache, shelf)
    assert both.shown.compare and both.shown.ids == [parent.run_id, child.run_id]
    if shelf.items:
        case = links.open_link({"case": "seakr"}, cache, shelf)
        assert case.item is not None and case.item.method == "seakr" and case.shown.ids == [case.item.run_id]
        recorded = links.open_link({"run": shelf.items[0].run_id}, cache, shelf)
        assert recorded.item == shelf.items[0]  # a recorded run by its id is marked as recorded
    for bad, message in (({"run": "nope"}, "nope"), ({"compare": parent.run_id}, "names 1 run"),
                         ({"run": "x'><script>"}, "is not a run id"), ({"case": "imaginary"}, "no recorded case")):
        with pytest.raises(ExplorerError, match=message):
            links.open_link(bad, cache, shelf)
    # the page quotes a bad link's text as it was written: slashes, quotes and markup are not cut as paths
    for bad in ({"run": "</b>/etc/passwd"}, {"compare": f"{parent.run_id},C:\\x\\y"}, {"case": "Dragin/../x"}):
        with pytest.raises(ExplorerError) as refused:
            links.open_link(bad, cache, shelf)
        text = links.link_problem(refused.value)
        given = next(iter(bad.values())).split(",")[-1]
        assert text.startswith("This link opens nothing: ") and f"“{given}”" in text, text
    assert "“a\\u0000b”" in links.link_problem(pytest.raises(ExplorerError, links.open_link, {"run": "a\0b"}, cache,
                                                                shelf).value)


def test_recorded_runs_are_listed_in_history_under_its_filters() -> None:
    recorded = [("DRAGIN case · dragin", small_run("rec0000000000001")),
                ("SEAKR case · seakr", small_run("rec0000000000002"))]
    recorded[1][1].method = "seakr"
    assert [r["run_id"] for r in history.recorded_rows(recorded)] == ["rec0000000000001", "rec0000000000002"]
    assert [r["method"] for r in history.recorded_rows(recorded, method="seakr")] == ["seakr"]
    assert len(history.recorded_rows(recorded, search="seakr case")) == 1
    assert history.recorded_rows(recorded, tag="keep") == []
    assert history.recorded_rows(recorded, until="2000-01-01") == []
    assert history.label(history.recorded_rows(recorded)[0]).count("“recorded: DRAGIN case · dragin”") == 1


def test_the_export_for_slides_is_one_offline_file_that_starts_presenting() -> None:
    page = report.report_html([hostile_trace()], slides=True)
    parsed = Elements(page)
    assert [x for x in parsed.injected() if x != "script"] == []
    assert any("window.DRE.present(true)" in body for body in parsed.script_bodies)
    assert '<body class="dre-slides">' in page and "Esc stops presenting" in page
    links_out = [v for _, attrs in parsed.tags for k, v in attrs.items() if k in ("src", "href")]
    assert all(v.startswith("#") for v in links_out), links_out  # no app links, nothing from outside
    assert "window.DRE.present" not in report.report_html([hostile_trace()])


def test_the_interactive_view_escapes_its_controls_and_names_things_apart() -> None:
    trace = hostile_trace()
    page = render_run(trace, ViewOptions(interactive=True))
    assert Elements(page).injected() == []
    assert 'class="dre-whatif-ctl"' in page.replace("dre-viewctl ", "") and 'type="range"' in page
    assert f'href="?run={trace.run_id}"' in page
    names = re.findall(r'class="dre-help"[^>]*aria-label="([^"]+)"', page)
    assert len(names) >= 5 and len(set(names)) == len(names)
    assert page.count("<h2 ") == 1 and page.count("<h3>") >= 5 and "<h4>" in page and "<h5>" not in page
    plots = re.findall(r'<div class="dre-plot" role="figure" aria-label="([^"]+)"', page)
    assert len(plots) == page.count('class="dre-plot"') and all(len(p) > 20 for p in plots)
    assert 'aria-hidden="true">✂</span><span class="dre-sr">' in page  # the cut, in words for screen readers


def test_the_evaluations_tab_shows_no_placeholder_tables(tmp_db) -> None:
    store = RunStore(tmp_db)
    with gr.Blocks():
        tab = build_evaluations_tab(store)
    assert not (tab.answers.visible or tab.costs.visible or tab.recall.visible or tab.questions.visible)
    _, header, answers, *_ = tab.reload(None)
    assert "No evaluations stored yet" in header and answers["visible"] is False
