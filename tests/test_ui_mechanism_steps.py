"""Each paper's mechanism as a presenting step, comparisons of any number of runs with their models, exports
that keep a recorded case's caption, and captions that claim only what their traces show.

Read from the shipped recorded runs (no model runs); one test drives Debian's chromium over an offline
export for slides, which steps through a run exactly as the app does."""

from __future__ import annotations

import copy
import re
import uuid
from pathlib import Path

import pytest

from explorer import whatif
from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.ui.page import links, run_tab
from explorer.ui.panels import decisions
from explorer.ui.runs import gallery, history
from explorer.ui.views import case_stories, report
from explorer.ui.views.render import render_comparison, render_runs
from explorer.ui.views.view import TraceView

SHELF = gallery.load()


def steps(key: str) -> list[decisions.Decision]:
    return decisions.decisions(TraceView(SHELF.trace(key)))


def run_html(key: str) -> str:
    """The rendered run of ``key`` as the view shows it (its contrast beside it), cut to its own article."""
    item = SHELF.item(key)
    html = render_runs([SHELF.trace(i.key) for i in SHELF.shown_with(item)])
    start = html.index(f'data-run="{item.run_id}"')
    return html[start:html.find("</article>", start)]


def test_each_papers_mechanism_is_a_step_whose_target_is_in_the_view() -> None:
    kinds = {key: [d.kind for d in steps(key)] for key in (i.key for i in SHELF.items)}
    assert {"bar", "query"} <= set(kinds["dragin-dragin"]) and {"bar", "query"} <= set(kinds["dragin-flare"])
    assert "rerank" in kinds["seakr-seakr"]
    assert kinds["blendfilter-blendfilter"].count("filter") == 3 and "selection" in kinds["blendfilter-blendfilter"]
    assert kinds["drrag-drrag"].count("classifier") == 2 and "selection" in kinds["drrag-drrag"]
    for key in kinds:
        html = run_html(key)
        for step in steps(key):
            # every attribute the step's target names is on an element of its run (nothing is recomputed)
            for name, value in re.findall(r'\[(data-[a-z-]+)~?="([^"]*)"\]', step.target):
                assert f'{name}="{value}"' in html or re.search(rf'{name}="[^"]*\b{re.escape(value)}\b', html), \
                    (key, step.kind, step.target)
    # the words of each step are the trace's own numbers
    seakr = SHELF.trace("seakr-seakr")
    rerank = next(e for e in seakr.events if e.kind == "rerank")
    why = next(d for d in steps("seakr-seakr") if d.kind == "rerank").why
    for cand in rerank.payload["candidates"]:
        assert f"rank {cand['rank']}" in why and f"U = {cand['value']:.3g}" in why
    assert "(search rank 3), the lowest U" in why
    blend = [d.why for d in steps("blendfilter-blendfilter") if d.kind == "retrieval"]
    assert [w.split(":")[0] for w in blend] == [f"BlendFilter's {n} query set" for n in ("first", "second", "third")]
    drrag = [d.why for d in steps("drrag-drrag") if d.kind == "retrieval"]
    assert drrag[0].startswith("DR-RAG's first stage") and all(w.startswith("DR-RAG's second stage") for w in drrag[1:])
    call = next(d for d in steps("drrag-drrag") if d.kind == "classifier")
    assert "probability 0.996 against its threshold 0.33, so the pair was accepted" in call.why
    flare = next(d for d in steps("dragin-flare") if d.kind == "query")
    assert "removed the words it was unsure of ('Lewiston')" in flare.why
    qfs = next(d for d in steps("dragin-dragin") if d.kind == "query")
    assert qfs.title.startswith("Query") and "QFS took the" in qfs.why
    # the bar that fired is the chart's own point: the fired unit's place among the charted values
    bar = next(d for d in steps("seakr-seakr") if d.kind == "bar")
    assert bar.bar == 0 and "U(gram) = -1.58, over the line δ = -2" in bar.why  # SEAKR's threshold is δ
    assert "θ" not in " ".join(d.why for d in steps("seakr-seakr"))


def _copies(n: int) -> list:
    """``n`` recorded runs under new ids (the gallery's, repeated), as a user's store holds them."""
    traces = []
    for i in range(n):
        trace = copy.deepcopy(SHELF.trace(SHELF.items[i % len(SHELF.items)].key))
        trace.run_id = uuid.uuid4().hex
        traces.append(trace)
    return traces


def test_a_comparison_link_opens_nine_runs_with_their_models(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    traces = _copies(9)
    for trace in traces:
        store.save(trace)
    cache = history.TraceCache(store)
    ids = [t.run_id for t in traces]
    opened = links.open_link({"compare": ",".join(ids)}, cache, SHELF)
    assert opened.shown.ids == ids and opened.shown.compare and opened.status == "Comparing 9 runs."
    html = render_comparison(traces, interactive=True)
    assert html.count('<article class="dre-run"') == 9
    assert f'href="?compare={",".join(ids)}"' in html  # the link to this comparison names all nine
    row = re.search(r"<tr><th>model</th>(.*?)</tr>", html).group(1)
    assert row.count("<td>") == 9 and "SmolLM2-135M-Instruct" in row and "Gemma-3-270M" in row
    assert "another model" in row
    # where the figures are: the costs say the runs were made on different models
    assert "made on different models (Gemma-3-270M, SmolLM2-135M-Instruct)" in html
    same = [t for t in traces if t.model["name"] == "Gemma-3-270M"]
    assert "different models" not in render_comparison(same)
    with pytest.raises(ExplorerError, match="names 33 run"):
        links.open_link({"compare": ",".join(f"x{i}" for i in range(33))}, cache, SHELF)


def test_between_two_methods_the_view_stays_busy_so_the_page_keeps_following() -> None:
    first = SHELF.trace("dragin-dragin")
    assert 'data-busy="1"' in render_runs([first], pending=True)
    assert 'data-busy="0"' in render_runs([first])
    assert 'data-busy="1"' in render_runs([], message="waiting", pending=True)


def test_html_and_slide_exports_of_a_recorded_case_keep_its_caption() -> None:
    item = SHELF.item("drrag-drrag")
    shown = [SHELF.trace(i.key) for i in SHELF.shown_with(item)]
    above = run_tab.captions_of(SHELF, shown)
    assert above.count('class="dre-root dre-story"') == 1 and 'data-story="drrag-drrag"' in above  # its contrast
    for slides in (False, True):
        page = report.report_html(shown, slides=slides, above=above)
        assert 'data-story="drrag-drrag"' in page and 'class="dre-look"' in page
    assert run_tab.captions_of(SHELF, _copies(1)) == ""  # a stored run is not a recorded case


def test_captions_claim_only_what_every_step_of_their_traces_shows() -> None:
    flare = case_stories.caption("dragin-flare", SHELF.trace("dragin-flare"))
    under = [u for e in SHELF.trace("dragin-flare").events if e.kind == "check" and e.payload.get("fired") is not None
             for u in e.payload["units"] if u["value"] < e.payload["threshold"]]
    assert f"{len(under)} token{'s' if len(under) != 1 else ''} of that sentence" in " ".join(flare.facts)
    several = next(b for b in flare.beats if b.text.startswith("several tokens"))
    assert several.holds == (len(under) > 1)
    # the passage that states the capacity came back in a search: "misses it" does not hold
    misses = next(b for b in flare.beats if "misses" in b.text)
    assert not misses.holds and "no later search brings it back" in misses.text
    seakr = case_stories.caption("seakr-seakr", SHELF.trace("seakr-seakr"))
    assert "2 of 3 stayed over δ = -2." in " ".join(seakr.facts)
    assert not next(b for b in seakr.beats if b.text.startswith("U is under δ with each passage in")).holds
    assert "once they are in" not in seakr.verdict
    # the what-if note speaks the page's words: a check by its number, a retrieval at a token
    trace = SHELF.trace("dragin-dragin")
    replayed = whatif.replay(trace.events, 0.05, signal="rind")
    check = next(d for d in replayed if d.changed)
    note = whatif.describe(replayed, {check.check: trace.events[check.check].payload["units"]})
    assert "unit" not in note and "#" not in note and f"check {check.check} would give a retrieval at" in note


@pytest.mark.browser
def test_presenting_steps_through_each_mechanism_beside_its_content_at_every_size() -> None:
    """An export for slides opens presenting: each step highlights its target (the bar that fired shows its
    own label); on a wide screen the bar docks beside the content, on 150 %/200 % zoom and a phone it fits."""
    from tests.browser_support import CHROMIUM, browser_context

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")
    sizes = {"1280x720": (1280, 720), "150 %": (853, 480), "200 %": (640, 360), "phone": (390, 844)}
    keys = ("dragin-dragin", "dragin-flare", "seakr-seakr", "blendfilter-blendfilter", "drrag-drrag")
    found = [step for key in keys for step in steps(key)]  # one page: the runs compared, stepped in order
    with browser_context() as context:
        page = context.new_page()
        page.set_viewport_size({"width": 1280, "height": 720})
        page.set_content(report.report_html([SHELF.trace(key) for key in keys], slides=True))
        page.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])")
        page.wait_for_function("() => !document.querySelector('.dre-plot:not([data-done])')", timeout=30_000)
        for n, step in enumerate(found):
            text = page.locator("#dre-presenter p").inner_text()
            assert text.startswith(f"Decision {n + 1} of {len(found)}") and step.title in text, (n, step.title)
            current = page.locator(".dre-current")
            if step.kind in ("bar", "query", "rerank", "filter", "classifier", "selection", "retrieval"):
                assert current.count() == 1, (n, step.kind)
                box, bar = current.bounding_box(), page.locator("#dre-presenter").bounding_box()
                assert box["x"] + box["width"] <= bar["x"], (n, step.kind)  # docked beside, not over it
            if step.kind == "bar":
                assert current.get_attribute("data-shown-bar") == str(step.bar)
                assert page.locator(".dre-current .hoverlayer .hovertext").count() == 1
            page.keyboard.press("ArrowRight")
        for name, (width, height) in sizes.items():
            page.set_viewport_size({"width": width, "height": height})
            try:  # the charts follow their box's new width (a ResizeObserver), then nothing is wider
                page.wait_for_function("document.documentElement.scrollWidth <= "
                                       "document.documentElement.clientWidth", timeout=5_000)
            except Exception:  # noqa: BLE001 - measured and reported below
                pass
            fit = page.evaluate("""() => { const bar = document.querySelector('#dre-presenter');
                const p = bar.querySelector('p'); const b = bar.getBoundingClientRect();
                return {scroll: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                        share: b.height * b.width / (innerWidth * innerHeight), words: p.clientWidth,
                        inside: b.left >= 0 && b.right <= innerWidth && b.bottom <= innerHeight}; }""")
            assert fit["scroll"] <= 0 and fit["inside"], (name, fit)
            assert fit["share"] <= 0.45 and fit["words"] >= 300, (name, fit)  # a line holds several words
        page.close()
