"""The captions of the shipped case studies: told from their traces, escaped, linked to an element
that exists in the rendered run, and no shipped trace naming the recording machine's paths.

Read from the shipped traces only (no model runs)."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from explorer.engine.embedded import embedded_display_name
from explorer.eval.scores import answer_verdict, score_trace
from explorer.paths import PROJECT_ROOT
from explorer.trace import Trace
from explorer.ui.page import links
from explorer.ui.panels import case_story
from explorer.ui.runs import gallery
from explorer.ui.views import case_stories
from explorer.ui.views.render import render_runs

SHELF = gallery.load()
KEYS = [item.key for item in SHELF.items]


def told(key: str) -> case_stories.Caption:
    item = SHELF.item(key)
    beside = SHELF.trace(item.beside) if item.beside else None
    found = case_stories.caption(key, SHELF.trace(key), beside)
    assert found is not None, f"{key} has no caption"
    return found


class _Finder(HTMLParser):
    """Whether an element lies on a path of [attribute, value] steps, each step somewhere below the last
    (the CSS descendant selector the page script builds from a caption's ``data-look``)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, path: list[list[str]]) -> None:
        super().__init__(convert_charrefs=True)
        self.path, self.stack, self.found = path, [], 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        matched = self.stack[-1] if self.stack else 0
        name, value = self.path[matched]
        if dict(attrs).get(name) == value:
            matched += 1
            if matched == len(self.path):
                self.found += 1
                matched -= 1  # an element below it could match the last step again
        if tag not in self.VOID:
            self.stack.append(matched)

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.stack:
            self.stack.pop()


def found_in(html: str, path: list[list[str]]) -> int:
    finder = _Finder(path)
    finder.feed(html)
    return finder.found


def test_every_shipped_case_has_a_caption_whose_facts_agree_with_its_trace() -> None:
    assert set(KEYS) == set(case_stories.STORIES), "a recorded item without a caption, or a caption without an item"
    for key in KEYS:
        trace, caption, item = SHELF.trace(key), told(key), SHELF.item(key)
        model = str(trace.model["name"])
        # recorded on the model the gallery says, and the caption says which
        assert model == item.model == embedded_display_name(gallery.model_of(item.case, item.method)), key
        assert model in caption.title and caption.model == model
        text = " ".join(caption.facts)
        # the answer and its verdict, as the evaluation would score the run
        verdict, scores = answer_verdict(trace), score_trace(trace)
        assert f"“{trace.answer}”" in text, key
        right = verdict.matches
        assert (", is right" in text) == right and (", is wrong" in text) == (not right and verdict.kind == "bad"), key
        assert right == (scores["em"] == 1.0 or verdict.label == "contains gold"), key
        # the token that fired, where there is one, is the one the caption names
        trigger = next(iter(trace.of_kind("trigger")), None)
        if trigger is not None and trace.method in ("dragin", "flare"):
            token = str(trigger.payload.get("token")).strip()
            assert f"token “{token}”" in text
            assert caption.look.chain[-1] == ("data-i", str(trigger.payload["token_index"]))
        # every gold passage it names as retrieved came back in that run
        titles = {str(h.get("title")) for e in trace.of_kind("retrieval") for h in e.payload.get("hits") or []}
        for title in re.findall(r"“([^”]+)” \(retrieval \d+, rank \d+\)", text):
            assert title in titles, (key, title)
        # prose that is not a plain fact holds for this recording
        assert all(claim.holds for claim in caption.claims), [c.text for c in caption.claims if not c.holds]
        assert caption.look is not None and caption.verdict, key
    # the cases the gallery was recorded to show, said plainly in the verdict
    assert told("dragin-dragin").verdict.startswith("Partly") and "RIND fires inside" in told("dragin-dragin").verdict
    assert "No passage it retrieved mentions Jodorowsky." in told("seakr-seakr").facts
    assert told("drrag-sr").beats and told("drrag-drrag").facts[-1].startswith("Beside it, one search")


def test_each_caption_links_to_an_element_of_the_rendered_run() -> None:
    for key in KEYS:
        caption, item = told(key), SHELF.item(key)
        html = case_story.render(caption)
        link = re.search(r'<a href="#" class="dre-look" data-look="([^"]+)" data-look-run="([^"]+)">', html)
        assert link is not None, key
        path = json.loads(link.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        assert path[0] == ["data-run", item.run_id] == ["data-run", link.group(2)]
        # the view the gallery opens for the item (with its contrast beside it, if any)
        shown = [SHELF.trace(i.key) for i in SHELF.shown_with(item)]
        view = render_runs(shown)
        assert found_in(view, path) == 1, (key, path)
        assert found_in(view, [["data-run", "another-run"], *path[1:]]) == 0
    drrag = SHELF.item("drrag-drrag")
    assert [i.key for i in SHELF.shown_with(drrag)] == ["drrag-sr", "drrag-drrag"]
    assert links.shown_for(drrag, SHELF).ids == [SHELF.item("drrag-sr").run_id, drrag.run_id]


def test_the_probing_rag_caption_tells_each_reading_of_its_prober_beside_dragins_decision() -> None:
    from explorer.methods.probing_rag.prober import SHIPPED
    from explorer.ui.views.html import fmt

    trace, item = SHELF.trace("dragin-probing_rag"), SHELF.item("dragin-probing_rag")
    dragin = SHELF.trace("dragin-dragin")
    assert item.beside == "dragin-dragin" and item.model == dragin.model["name"]  # the same model as DRAGIN's run
    caption = told("dragin-probing_rag")
    checks = [e for e in trace.of_kind("check") if e.payload["signal"] == "prober_p"]
    assert checks and all((SHIPPED / e.payload["prober"] / "manifest.json").is_file() for e in checks)
    readings = [f for f in caption.facts if f.startswith("The prober read layer")]
    assert len(readings) == len(checks)  # one sentence per reading, in order, with the trace's own numbers
    for fact, check in zip(readings, checks, strict=True):
        p, value = check.payload, check.payload["units"][0]["value"]
        assert f"layer {p['layer']} " in fact and f"P(needs retrieval) = {fmt(value)}" in fact
        assert f"θ = {fmt(p['threshold'])}" in fact and (", over θ" in fact) == (value > p["threshold"])
        assert ("searched with" in fact) == (p["fired"] is not None)
    counts = f"Probing-RAG searched {trace.costs.retrievals} time"
    assert any(f.startswith(counts) and f"DRAGIN {dragin.costs.retrievals} time" in f for f in caption.facts)
    differ = next(b for b in caption.beats if b.text.startswith("its decisions differ from DRAGIN's"))
    assert differ.holds == (trace.costs.retrievals != dragin.costs.retrievals)
    assert caption.look.chain[1] == ("data-span", str(checks[0].payload["span"]))


def test_the_caption_escapes_model_and_corpus_text() -> None:
    trace = copy.deepcopy(SHELF.trace("dragin-dragin"))
    evil = '<img src=x onerror="alert(1)">'
    trace.answer = evil
    for event in trace.of_kind("retrieval"):
        for hit in event.payload["hits"]:
            hit["title"] = f"{hit['title']} {evil}"
    trace.events[next(e.id for e in trace.of_kind("trigger"))].payload["token"] = '"><script>x</script>'
    html = case_story.render(case_stories.caption("dragin-dragin", trace))
    assert "<img" not in html and "<script>" not in html and "onerror=\"" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert html.count('class="dre-look"') == 1 and html.startswith('<section class="dre-root dre-story"')
    assert case_story.render(None) == "" and case_stories.caption("no-such-case", trace) is None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


ABSOLUTE = re.compile(r"(?:^|[\s\"'(=])/(?:[\w.-]+/)+[\w.-]+|\b[A-Za-z]:\\")


@pytest.mark.parametrize("name", sorted(p.name for p in gallery.GALLERY_DIR.glob("*.json")))
def test_no_shipped_trace_names_an_absolute_path(name: str) -> None:
    raw = (gallery.GALLERY_DIR / name).read_text(encoding="utf-8")
    assert str(PROJECT_ROOT) not in raw and "/work/" not in raw and "/home/" not in raw
    offending = [s for s in _strings(json.loads(raw)) if ABSOLUTE.search(s)]
    assert not offending, offending[:3]
    if name != gallery.INDEX:
        trace = Trace.from_json(raw)
        assert trace.corpus["source"] == "corpora/demo/passages.jsonl" and trace.model["source"] in ("embedded",
                                                                                                      "gemma3-270m")


@pytest.mark.browser
def test_a_caption_link_scrolls_to_and_highlights_its_target_in_chromium() -> None:
    """The page script follows a caption's link: the target is opened, scrolled into view, highlighted and
    focused; a link to a run that is not on the page is marked instead of failing."""
    from pathlib import Path

    from tests.browser_support import CHROMIUM, browser_context

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")
    assets = PROJECT_ROOT / "assets"
    style = (assets / "explorer.css").read_text(encoding="utf-8")
    script = (assets / "explorer.js").read_text(encoding="utf-8")
    with browser_context() as context:
        for key in ("dragin-dragin", "blendfilter-blendfilter", "drrag-drrag", "dragin-probing_rag"):
            page = context.new_page()  # a fresh document: the script binds its listener once per page
            item = SHELF.item(key)
            view = render_runs([SHELF.trace(i.key) for i in SHELF.shown_with(item)])
            page.set_content(f"<html><head><style>{style}</style></head><body>{case_story.render(told(key))}"
                             f'<div style="height:1500px"></div>{view}<script>{script}</script></body></html>')
            page.locator("a.dre-look").click()
            target = page.locator(".dre-look-target")
            assert target.count() == 1, key
            page.wait_for_function("() => { const r = document.querySelector('.dre-look-target')"
                                   ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }",
                                   timeout=5_000)
            assert page.evaluate("document.activeElement.classList.contains('dre-look-target')")
            assert page.evaluate("[...document.querySelectorAll('.dre-look-target')].every(el => "
                                 "(!el.closest('details') || el.closest('details').open) && "
                                 "[...el.querySelectorAll(':scope > details')].every(d => d.open))")
            if key == "dragin-dragin":  # the target is the token that fired: the highlight wins over its red outline
                assert "fired" in target.get_attribute("class")
                for motion in ("no-preference", "reduce"):
                    page.emulate_media(reduced_motion=motion)
                    look = target.evaluate("el => { const s = getComputedStyle(el); return [s.outlineColor, "
                                           "s.outlineWidth, s.outlineStyle, s.backgroundColor, s.animationName]; }")
                    assert look[:4] == ["rgb(180, 83, 9)", "3px", "solid", "rgb(254, 240, 138)"], (motion, look)
                    assert (look[4] == "none") == (motion == "reduce"), look
            page.close()
        page = context.new_page()
        page.set_content(f"<html><body>{case_story.render(told('seakr-seakr'))}<script>{script}</script></body></html>")
        page.locator("a.dre-look").click()
        assert "dre-look-missing" in page.locator("a.dre-look").get_attribute("class")
        assert page.locator(".dre-look-target").count() == 0
