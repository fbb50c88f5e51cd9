"""The page's words: every term a caption, a decision in words (presenting mode's bar) or a strip legend
uses has a plain sentence and a glossary entry, the markup is escaped and accessible, and quoted model
text is never taken for a term (browser-free); and in Debian's chromium, on the app the browser test
modules share, a word shows its sentence on hover, on Tab and on a phone's tap, inside the screen, and
its link opens its glossary entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.methods.base import get_method, method_names
from explorer.paths import ASSETS_DIR
from explorer.ui.page.controls import method_words
from explorer.ui.panels import case_story, decisions
from explorer.ui.runs import gallery
from explorer.ui.views import case_stories, terms
from explorer.ui.views.view import TraceView, ViewOptions, strip_signals
from tests.browser_support import CHROMIUM, chromium_browser, shot

SHELF = gallery.load()

#: What reads as a term in running text: a word in capitals (RIND, QFS, DRAGIN), a "-RAG" name, a Greek letter.
JARGON = re.compile(r"(?<![\w-])(?:[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)*|\w+-RAG|[α-ωΑ-Ω]′?)(?![\w-])")


def caption_and_step_texts() -> list[str]:
    """Every caption's words, every decision's title and why and every check's rule (the decision chart's
    note), over the shipped recorded runs, and the strip's legends."""
    texts: list[str] = []
    for item in SHELF.items:
        trace = SHELF.trace(item.key)
        beside = SHELF.trace(item.beside) if item.beside else None
        caption = case_stories.caption(item.key, trace, beside)
        if caption is not None:
            texts += [caption.title, caption.story, caption.verdict, *caption.facts, *(c.text for c in caption.claims)]
        for d in decisions.decisions(TraceView(trace)):
            texts += [d.title, d.why]
        texts += [str(e.payload.get("rule", "")) for e in trace.events if e.kind == "check"]  # the chart's note
    texts += [how for _, how in strip_signals().values()]
    return texts


def unexplained(text: str) -> list[str]:
    """The term-like words of ``text`` (outside quotes) that no entry of :data:`terms.TERMS` covers."""
    bare = re.sub(terms._QUOTED, lambda m: " " * len(m.group()), text)
    covered = [(start, end) for start, end, _ in terms.find_terms(bare)]
    return [m.group() for m in JARGON.finditer(bare) if not any(s <= m.start() < e for s, e in covered)]


def test_every_term_of_the_captions_and_presenting_steps_has_an_entry() -> None:
    texts = caption_and_step_texts()
    assert len(texts) > 100  # every shipped case, its caption and its steps
    missing = {word: text[:80] for text in texts for word in unexplained(text)}
    assert missing == {}, f"words without a plain sentence in explorer/ui/views/terms.py: {missing}"
    used = {t.key for text in texts for _, _, t in terms.find_terms(text)}
    assert {"rind", "amax", "qfs", "theta", "delta", "u", "span", "gold", "entropy", "rerank", "verdict",
            "method-dragin", "method-seakr", "method-flare", "method-blendfilter", "method-drrag"} <= used


def test_a_new_term_without_an_entry_is_caught() -> None:
    assert unexplained("RIND over θ at span 3, then FOO-RAG and a ζ") == ["FOO-RAG", "ζ"]
    assert unexplained("the model wrote 'QFS RIND' and \"XYZ\"") == []  # quoted text is the model's


def test_every_method_has_a_plain_sentence_shown_on_its_checkbox() -> None:
    for name in method_names():
        sentence = terms.method_sentence(name)
        assert sentence, f"method {name} has no entry in explorer/ui/views/terms.py"
        assert method_words(name) == sentence[0].lower() + sentence[1:].rstrip(".")
        shown = get_method(name).title.split(" (")[0]
        assert [t.key for _, _, t in terms.find_terms(shown)] == [f"method-{name}"], shown


def test_each_entry_has_its_glossary_anchor_in_the_help_tab() -> None:
    text = terms.help_markdown((ASSETS_DIR / "help.md").read_text(encoding="utf-8"))
    assert terms.GLOSSARY_MARK not in text
    for t in terms.TERMS.values():
        assert text.count(f'<span id="{t.anchor}"></span>**{t.name}.** {t.plain}') == 1, t.key
    assert "trigger score" in text.split('id="help-rind"')[1].split("\n")[0]


def test_marked_text_is_escaped_accessible_and_marks_each_term_once() -> None:
    html = terms.mark_terms("<b>RIND</b> & RIND over θ at 'RIND' span 2")
    assert html.startswith("&lt;b&gt;<span class=\"dre-term\" data-term=\"rind\">")
    assert html.count('data-term="rind"') == 1 and html.count('data-term="theta"') == 1
    assert "&#x27;RIND&#x27;" in html and "</span>&lt;/b&gt; &amp; RIND over" in html
    word = re.search(r'<span class="dre-term-word" tabindex="0" aria-description="([^"]+)">RIND</span>', html)
    assert word and word.group(1) == terms.TERMS["rind"].plain.replace("'", "&#x27;")
    assert '<a class="dre-term-link" href="#help-rind" data-help="help-rind">' in html
    hostile = terms.term("rind", '<img src=x onerror="alert(1)">')
    assert "<img" not in hostile and "&lt;img" in hostile


def test_captions_and_decisions_render_their_words_as_terms() -> None:
    item = SHELF.item("dragin-dragin")
    trace = SHELF.trace(item.key)
    caption = case_story.render(case_stories.caption(item.key, trace, None))
    assert 'data-term="method-dragin"' in caption and 'data-term="rind"' in caption
    steps = decisions.render(TraceView(trace), ViewOptions())
    items = re.findall(r'<li class="dre-decision".*?</li>', steps)
    assert items and any('data-term="rind"' in li for li in items)
    for li in items:  # each step explains its own words (the bar shows one step at a time)
        keys = re.findall(r'data-term="([^"]+)"', li)
        assert len(keys) == len(set(keys)), li


def in_chromium(test):
    """A browser test: slow, and skipped (saying how to install it) where Debian's chromium is missing."""
    needs = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                               reason=f"{CHROMIUM} is missing: `make browser` (apt-get install chromium)")
    return pytest.mark.browser(pytest.mark.slow(needs(test)))


#: A projector, and a phone as a student holds it (taps, not a mouse).
PROJECTOR = {"viewport": {"width": 1280, "height": 720}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}

_TIP_INSIDE = """(tip) => { const r = tip.getBoundingClientRect();
    return r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight; }"""


def _shows_its_sentence(term) -> None:
    """A word's box is shown, says the word's plain sentence and lies inside the screen."""
    tip = term.locator(".dre-term-tip")
    tip.wait_for(state="visible", timeout=5_000)
    assert terms.TERMS[term.get_attribute("data-term")].plain in tip.inner_text()
    assert tip.evaluate(_TIP_INSIDE), tip.bounding_box()


def _open_case(page, url: str) -> None:
    page.goto(url + "?case=dragin", timeout=120_000)
    page.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=120_000)
    page.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')", timeout=30_000)


@in_chromium
def test_a_word_explains_itself_on_hover_focus_and_tap_and_links_to_its_glossary_entry(ui_app) -> None:
    with chromium_browser() as browser:
        page = browser.new_context(**PROJECTOR).new_page()
        _open_case(page, ui_app.url)
        story = page.locator("#recorded-note .dre-story")
        story.locator(".dre-story-more summary").click()
        term = story.locator(".dre-term").first
        assert term.locator(".dre-term-tip").is_hidden()
        term.locator(".dre-term-word").hover()  # a mouse
        _shows_its_sentence(term)
        page.mouse.move(1, 1)
        term.locator(".dre-term-tip").wait_for(state="hidden", timeout=5_000)

        story.locator(".dre-story-more summary").focus()  # the keyboard: Tab from "more" to the first word
        for _ in range(5):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.classList.contains('dre-term-word')"):
                break
        focused = page.locator(".dre-term:focus-within")
        assert focused.count() == 1 and story.locator(".dre-term:focus-within").count() == 1
        _shows_its_sentence(focused)
        page.keyboard.press("Escape")  # dismissed, the focus stays
        focused.locator(".dre-term-tip").wait_for(state="hidden", timeout=5_000)

        # presenting mode's bar shows the step's words as words too, their box above the bar
        page.locator("#present-toggle").click()
        page.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])", timeout=10_000)
        for _ in range(12):
            if page.locator("#dre-presenter .dre-term").count():
                break
            page.keyboard.press("ArrowRight")
        in_bar = page.locator("#dre-presenter .dre-term").first
        in_bar.locator(".dre-term-word").hover()
        _shows_its_sentence(in_bar)
        page.mouse.move(1, 1)
        page.keyboard.press("Escape")
        page.wait_for_selector("body:not(.dre-presenting)", timeout=5_000)

        # the link opens the word's glossary entry in the help tab
        term.locator(".dre-term-word").hover()
        anchor = term.locator(".dre-term-link").get_attribute("data-help")
        name = term.locator(".dre-term-tip b").first.inner_text()
        term.locator(".dre-term-link").click()
        page.wait_for_function("(a) => { const r = document.getElementById(a)?.getBoundingClientRect();"
                               " return !!r && r.top >= 0 && r.top < innerHeight; }", arg=anchor, timeout=10_000)
        assert page.locator("#tab-help-button").get_attribute("aria-selected") == "true"
        assert page.locator(f"#tab-help li:has(#{anchor})").inner_text().startswith(name)

        # a phone: a tap shows a word's sentence inside its 390x844 screen, in the caption and in the bar
        phone = browser.new_context(**PHONE).new_page()
        _open_case(phone, ui_app.url)
        phone.locator("#recorded-note .dre-story-more summary").tap()
        words = phone.locator("#recorded-note .dre-term")
        assert words.count() >= 3
        for i in range(words.count()):
            words.nth(i).locator(".dre-term-word").scroll_into_view_if_needed()
            words.nth(i).locator(".dre-term-word").tap()
            _shows_its_sentence(words.nth(i))
            words.nth(i).locator(".dre-term-tip b").tap()  # a tap on the sentence closes it
            words.nth(i).locator(".dre-term-tip").wait_for(state="hidden", timeout=5_000)
        phone.locator("#present-toggle").tap()
        phone.wait_for_selector("body.dre-presenting #dre-presenter:not([hidden])", timeout=10_000)
        for _ in range(12):
            if phone.locator("#dre-presenter .dre-term").count():
                break
            phone.locator("#dre-presenter [data-step='1']").tap()
        in_bar = phone.locator("#dre-presenter .dre-term").last
        in_bar.locator(".dre-term-word").tap()
        _shows_its_sentence(in_bar)
        shot(phone, "term-tapped-phone")


@in_chromium
def test_each_method_checkbox_explains_its_method_without_toggling_and_links_to_the_glossary(ui_app) -> None:
    with chromium_browser() as browser:
        page = browser.new_context(**PROJECTOR).new_page()
        page.goto(ui_app.url, timeout=120_000)
        page.wait_for_selector("#methods label .dre-method-term .dre-term", timeout=60_000)
        page.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=120_000)
        labels = page.locator("#methods label")
        assert labels.count() == len(method_names())
        for i in range(labels.count()):
            name = labels.nth(i).locator("input").get_attribute("name")
            term = labels.nth(i).locator(".dre-term")
            assert term.count() == 1, name
            assert term.get_attribute("data-term") == f"method-{name}"
        dragin = page.locator("#methods label:has(input[name='dragin'])")
        was = dragin.locator("input").is_checked()
        term = dragin.locator(".dre-term")
        term.locator(".dre-term-word").hover()
        _shows_its_sentence(term)
        shot(page, "method-term-hover", "#run-band")
        term.locator(".dre-term-word").click()  # a click on the "?" explains, it does not toggle the box
        assert dragin.locator("input").is_checked() == was
        anchor = term.locator(".dre-term-link").get_attribute("data-help")
        term.locator(".dre-term-link").click()
        page.wait_for_function("(a) => { const r = document.getElementById(a)?.getBoundingClientRect();"
                               " return !!r && r.top >= 0 && r.top < innerHeight; }", arg=anchor, timeout=10_000)
        assert dragin.locator("input").is_checked() == was
        assert page.locator(f"#tab-help li:has(#{anchor})").inner_text().startswith("DRAGIN")

        phone = browser.new_context(**PHONE).new_page()  # a tap shows the sentence inside a phone's screen
        phone.goto(ui_app.url, timeout=120_000)
        phone.wait_for_selector("#methods label .dre-method-term .dre-term", timeout=60_000)
        # the page's opening events set the form (the ticked method) as they arrive: wait for them
        phone.wait_for_selector("#run-view .dre-run[data-view=done]", timeout=120_000)
        seakr = phone.locator("#methods label:has(input[name='seakr'])")
        seakr.scroll_into_view_if_needed()
        was = seakr.locator("input").is_checked()
        term = seakr.locator(".dre-term")
        term.locator(".dre-term-word").tap()
        _shows_its_sentence(term)
        shot(phone, "method-term-phone")
        assert seakr.locator("input").is_checked() == was
        term.locator(".dre-term-tip b").tap()  # a tap on the sentence closes it
        term.locator(".dre-term-tip").wait_for(state="hidden", timeout=5_000)
        seakr.locator("span").first.tap()  # the name itself still ticks the box
        phone.wait_for_function("() => document.querySelector(\"#methods input[name='seakr']\").checked !== "
                                + ("true" if was else "false"), timeout=10_000)
