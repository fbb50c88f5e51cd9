"""Probing-RAG on the page: its prober's probability per answer in the decision chart against θ, the
what-if θ' replaying those decisions, and the presenting step that reads the prober's layer, all from a
real trace of the tiny model with its shipped prober (nothing recomputed in the view)."""

from __future__ import annotations

import html
import json
import re

import pytest

from explorer import whatif
from explorer.engine.generation import Engine
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.ui.panels import decisions, signals
from explorer.ui.views.render import render_run, theta_range
from explorer.ui.views.view import TraceView, ViewOptions

QUESTION = "Where did the Lewiston Maineiacs play?"


@pytest.fixture(scope="module")
def capped(tiny_lm, demo_retriever):
    """θ = 0 fires on every answer until the cap of two searches: two fired checks, then one capped."""
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("probing_rag", QUESTION, runtime,
                         config={"threshold": 0.0, "max_retrievals": 2, "max_length": 8, "fewshot": 1})
    assert trace.status == "complete", trace.error
    return trace


def _figure(markup: str) -> dict:
    found = re.search(r'data-name="signal" style="[^"]*" data-fig="([^"]*)"', markup)
    assert found, "no decision chart in the view"
    return json.loads(html.unescape(found.group(1)))


def test_the_decision_chart_draws_each_answers_prober_probability_against_theta(capped) -> None:
    checks = capped.of_kind("check")
    probs = [c.payload["units"][0]["value"] for c in checks]
    assert len(checks) == 3 and [c.payload["fired"] for c in checks] == [0, 0, None]
    assert [c.payload["units"][0]["eligible"] for c in checks] == [True, True, False]  # the cap, recorded
    view = TraceView(capped)
    assert signals.bar_points(view) == {(c.id, 0): i for i, c in enumerate(checks)}
    markup = render_run(capped, ViewOptions(interactive=True))
    fig = _figure(markup)
    bars = fig["data"][0]
    assert bars["y"] == pytest.approx(probs)
    assert bars["marker"]["color"] == [signals.FIRED, signals.FIRED, signals.OTHER]
    lines = [s for s in fig["layout"]["shapes"] if s.get("xref") == "paper"]
    assert [s["y0"] for s in lines] == [0.0]  # the recorded θ
    assert "Decision signal: prober_p" in markup and "answers in the order checked" in markup
    # the what-if control spans every recorded probability and starts at the recorded θ
    lo, hi, _, recorded = theta_range(capped)
    assert recorded == 0.0 and lo <= min(probs) and hi >= max(probs)
    assert 'class="dre-theta"' in markup and 'data-recorded="0"' in markup


def test_moving_the_threshold_shows_which_checks_would_have_fired(capped) -> None:
    checks = capped.of_kind("check")
    probs = [c.payload["units"][0]["value"] for c in checks]
    # at the recorded θ nothing changes, the capped answer included
    assert not any(d.changed for d in whatif.replay(capped.events, 0.0))
    # over the first answer's probability the first check would keep its answer: every later check is text
    # that would not exist
    above = probs[0] + 1e-3
    replayed = whatif.replay(capped.events, above)
    assert replayed[0].would_fire is None and replayed[0].changed
    assert not any(d.reliable for d in replayed[1:])
    markup = render_run(capped, ViewOptions(whatif=above, interactive=True))
    assert f"check {checks[0].id} would give no retrieval instead of a retrieval at" in html.unescape(markup)
    fig = _figure(markup)
    dashed = [s for s in fig["layout"]["shapes"] if s.get("line", {}).get("dash") == "dash"]
    assert [s["y0"] for s in dashed] == [pytest.approx(above)]
    assert any(s["type"] == "rect" for s in fig["layout"]["shapes"])  # later checks shaded as unreliable
    # under every probability the first two fire as recorded and the capped answer stays unfired
    assert not any(d.changed for d in whatif.replay(capped.events, min(probs) - 1e-3))


def test_presenting_steps_through_the_probers_reading_of_its_layer(capped) -> None:
    checks = capped.of_kind("check")
    steps = decisions.decisions(TraceView(capped))
    readings = [d for d in steps if d.kind == "prober"]
    assert len(readings) == len(checks)
    assert "bar" not in [d.kind for d in steps]  # the reading replaces the generic fired-bar step
    layer = checks[0].payload["layer"]
    for i, (step, check) in enumerate(zip(readings, checks, strict=True)):
        p = check.payload["units"][0]["value"]
        tokens = len(capped.event(check.payload["span"]).payload["tokens"])
        assert step.bar == i and step.target == '[data-panel="signal"] .dre-plot[data-name="signal"]'
        assert f"layer {layer}" in step.title and f"after layer {layer}" in step.why
        assert f"P(needs retrieval) = {p:.3g}" in step.why and "θ = 0" in step.why
        assert f"over its {tokens} token(s)" in step.why and check.payload["prober"] in step.why, step.why
    assert "so it searched" in readings[0].why and "searches were spent" in readings[-1].why
    capped_check = steps[max(i for i, d in enumerate(steps) if d.kind == "prober") - 1]
    assert capped_check.kind == "kept" and "could fire" in capped_check.why and "had prober_p" not in capped_check.why
    assert capped_check.question is None  # nothing eligible to ask about
    # each reading follows its own check, in the order the decisions were made
    kinds = [d.kind for d in steps]
    assert [kinds[i - 1] for i, k in enumerate(kinds) if k == "prober"] == ["fired", "fired", "kept"]
    markup = render_run(capped, ViewOptions(interactive=True))
    assert markup.count('data-kind="prober"') == 3 and 'data-bar="2"' in markup
