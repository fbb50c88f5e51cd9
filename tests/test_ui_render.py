"""The run views and the report: escaping everywhere, graceful degradation, exact re-rendering."""

from __future__ import annotations

import html
import json
import re

from explorer.trace import Event, Trace
from explorer.ui.panels import compare
from explorer.ui.views import report
from explorer.ui.views.render import render_comparison, render_run, render_runs
from explorer.ui.views.view import TraceView, ViewOptions
from tests.ui_payloads import IMG, PAYLOAD, SCRIPT, Elements, hostile_trace


def _figures(text: str) -> list[dict]:
    return [json.loads(html.unescape(m)) for m in re.findall(r'data-fig="([^"]*)"', text)]


def test_every_panel_escapes_model_corpus_and_user_text():
    trace = hostile_trace()
    for opts in (ViewOptions(), ViewOptions(whatif=0.1), ViewOptions(live=True), ViewOptions(compact=True)):
        page = render_run(trace, opts)
        parsed = Elements(page)
        assert parsed.injected() == [], (opts, parsed.injected())
        assert "&lt;script&gt;" in page and "&lt;img src=x onerror=" in page  # shown as text, not dropped
    panels = set(re.findall(r'data-panel="([a-z]+)"', render_run(trace, ViewOptions())))
    assert {"strip", "signal", "queries", "retrievals", "uncertainty", "filter", "stages", "costs"} <= panels


def test_chart_labels_are_escaped_for_plotly():
    """Plotly parses a few tags in its labels, so every label must arrive escaped."""
    figures = _figures(render_run(hostile_trace(), ViewOptions(whatif=0.1)))
    assert len(figures) >= 4
    texts = json.dumps([f["data"] for f in figures] + [f["layout"].get("annotations") for f in figures])
    assert "<script" not in texts and "<img" not in texts and "<a href" not in texts
    assert "&lt;img" in texts


def test_comparison_and_report_escape_too():
    a, b = hostile_trace("a" * 16), hostile_trace("b" * 16)
    b.output = "different " + PAYLOAD
    assert Elements(render_comparison([a, b])).injected() == []
    assert "<ins>different</ins>" in compare.word_diff(a.output, b.output)
    page = report.report_html([a, b])
    parsed = Elements(page)
    scripts = [t for t, _ in parsed.tags if t == "script"]
    assert len(scripts) == 3  # Plotly, the chart script, the call that draws: nothing from the runs
    assert not any("__pwned" in body for body in parsed.script_bodies)
    assert [x for x in parsed.injected() if x != "script"] == []
    assert "<title>Comparison of 2 runs: Q &lt;script&gt;" in page


def test_report_is_self_contained_and_locks_down_scripts():
    page = report.report_html([hostile_trace()])
    links = [v for _, attrs in Elements(page).tags for k, v in attrs.items() if k in ("src", "href")]
    assert all(v.startswith("#") for v in links), links  # nothing outside the page itself
    csp = html.unescape(re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1))
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert report.PLOTLY_JS.read_text()[:200] in page  # Plotly inlined from the installed package
    import base64
    import hashlib

    bodies = Elements(page).script_bodies
    for body in bodies:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in html.unescape(csp)


def test_panels_degrade_on_missing_and_unknown_event_kinds():
    empty = Trace(question="q", method="wo", variant="paper", config={}, model={}, status="running")
    assert "No tokens yet" in render_run(empty, ViewOptions())
    odd = hostile_trace()
    odd.events.append(Event(kind="kind-from-the-future", payload={"anything": IMG}, id=len(odd.events)))
    odd.events.append(Event(kind="rerank", payload={"candidates": ["x", 3, None], "chosen": 7}, id=len(odd.events)))
    odd.events.append(Event(kind="filter", payload={"passage_ids": [], "kept": [], "raw_answer": None},
                            id=len(odd.events)))
    assert Elements(render_run(odd, ViewOptions())).injected() == []
    bare = Trace(question="q", method="not-a-method", variant="v", config={"x": 1}, model={}, status="complete")
    assert 'data-status="complete"' in render_runs([bare])


def test_strip_marks_fired_cut_joined_and_whatif_tokens():
    trace = hostile_trace()
    view = TraceView(trace)
    span = view.main_spans[0]
    assert span.cut_at == 1 and 1 in span.triggers
    assert view.main_spans[1].retrieval is not None
    page = render_run(trace, ViewOptions(whatif=0.1))
    assert len(re.findall(r'class="tok[^"]* fired', page)) == 1
    assert re.search(r'class="tok cut[^"]*" data-i="1"', page)
    assert not re.search(r'class="tok cut[^"]*" data-i="0"', page)
    anchor = view.anchor(view.retrievals[0].id)
    assert f'href="#{anchor}"' in page and f'id="{anchor}"' in page
    # at θ' = 0.1 the first unit (RIND 0.2) fires instead of the second
    assert re.search(r'class="tok whatif" data-i="0"', page)
    assert len(re.findall(r'class="tok[^"]* whatif', page)) == 1
    assert "instead of" in page


def test_method_panels_read_the_recorded_keys():
    trace = hostile_trace()
    view = TraceView(trace)
    assert view.main_spans[1].u == -5.0  # the primary estimate naming the span, not the ablation's 123
    page = render_run(trace, ViewOptions(signal="u"))
    assert "123" not in re.findall(r'data-panel="uncertainty".*?</section>', page, re.S)[0]
    assert "external&lt;img" in page  # the filter's set name, escaped
    # a step-level check (SEAKR) marks every token of the span it decided on
    from explorer import whatif
    from explorer.ui.panels.strip import whatif_marks

    steps = whatif.replay(trace.events, -7.0, signal="U(gram)")
    assert steps[0].would_fire == 0 and whatif_marks(view, steps)[view.main_spans[1].event_id] == {0}
    stages = re.findall(r'data-panel="stages".*?</section>', page, re.S)[0]
    figure = _figures(stages)[0]
    assert any("Q" in str(t) for t in figure["data"][-1]["text"])  # the q+d query is a node


def test_live_view_shows_streamed_tokens_before_the_span_ends():
    trace = Trace(question="q", method="dragin", variant="paper", config={}, model={}, status="running")
    tokens = [{"text": " Hello", "prob": 0.4, "entropy": 1.2}, {"text": " " + SCRIPT, "prob": 0.9, "entropy": 0.1}]
    page = render_runs([], live=trace, live_tokens=tokens, live_purpose="draft")
    assert page.count('class="tok') == 2 and 'data-view="live"' in page and "dre-caret" in page
    assert Elements(page).injected() == []


def test_many_short_calls_of_one_purpose_fold_into_one_line():
    from explorer.trace import TraceRecorder

    trace = Trace(question="q", method="drrag", variant="paper", config={}, model={}, status="complete")
    rec = TraceRecorder(trace)
    rec.step = 1
    for verdict in ("no", "yes", "no", "no"):
        rec.add("generation", purpose="judge", text=verdict, tokens=[{"text": verdict, "prob": 0.5}], decoding="greedy")
    rec.add("generation", purpose="answer", text="A", tokens=[{"text": "A", "prob": 0.9}], decoding="greedy")
    page = render_run(trace, ViewOptions())
    assert page.count('class="dre-span group"') == 1 and "judge · step 1 · 4 calls" in page
    assert page.count('class="dre-span"') == 1  # the answer keeps its own line
