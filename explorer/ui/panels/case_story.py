"""A recorded case study's caption: the paper's figure, what this model did, whether that is the
paper's story, and a link to the one thing to look at in the run shown below it. Its first line
says whether the run reproduces the paper and holds the link; the rest unfolds under "more".

Everything in a caption that comes from a model, a corpus or a question goes through :func:`esc`.
The link carries the path to its target as data (``data-look``, a JSON list of ``[attribute,
value]`` steps from the run's ``<article data-run>`` down); ``assets/explorer.js`` turns it into a
selector, scrolls the element into view, opens the ``<details>`` around it and highlights it.
"""

from __future__ import annotations

import json

from explorer.ui.views.case_stories import Caption
from explorer.ui.views.html import esc, help_link
from explorer.ui.views.terms import mark_terms

#: The caption's first line: whether the run reproduces the paper, by how many of its steps hold.
REPRODUCES = {"all": "yes", "some": "partly", "no": "no", "none": "a baseline, nothing to reproduce"}


def look_link(caption: Caption) -> str:
    if caption.look is None:
        return ""
    path = json.dumps(caption.look.path(), ensure_ascii=False)
    return (f' · <b>Look at</b> <a href="#" class="dre-look" data-look="{esc(path)}" '
            f'data-look-run="{esc(caption.look.run_id)}">{esc(caption.look.label)}</a>')


def reproduced(caption: Caption) -> str:
    """``all``, ``some``, ``no`` of the paper's steps hold in this run, or ``none`` to hold (a baseline)."""
    if not caption.beats:
        return "none"
    return "all" if all(b.holds for b in caption.beats) else "some" if any(b.holds for b in caption.beats) else "no"


def render(caption: Caption | None) -> str:
    """The caption as a panel ("" when the recorded run has none).

    Folded to one line (whether it reproduces the paper, and the link to look at) with the rest
    under "more", so the run's strip below stays on the first screen."""
    if caption is None:
        return ""
    did = " ".join([*caption.facts, *(c.text for c in caption.claims if c.holds)])
    shown = reproduced(caption)
    seen: set[str] = set()  # each of the page's words is explained once, where it first appears
    title = mark_terms(caption.title, seen)
    paper = mark_terms(caption.story, seen)
    model = mark_terms(did, seen)
    verdict = mark_terms(caption.verdict, seen)
    return (f'<section class="dre-root dre-story" data-story="{esc(caption.key)}" data-reproduces="{shown}" '
            f'aria-label="Caption: {esc(caption.title)}">'
            f'<p class="dre-story-line"><b>Does it reproduce the paper?</b> '
            f'<span class="dre-story-short">{esc(REPRODUCES[shown])}</span>{look_link(caption)}'
            f'{help_link("story", "case study captions")}</p>'
            '<details class="dre-story-more"><summary>more: the paper\'s figure, what this model did</summary>'
            f'<p class="dre-story-title"><b>{title}</b></p>'
            f'<p class="dre-story-paper"><b>In the paper</b> ({esc(caption.paper)}, {esc(caption.figure)}): '
            f"{paper}</p>"
            f'<p class="dre-story-model"><b>On {esc(caption.model)}</b>: {model}</p>'
            f'<p class="dre-story-verdict"><b>Does it reproduce the paper?</b> {verdict}</p>'
            "</details></section>")
