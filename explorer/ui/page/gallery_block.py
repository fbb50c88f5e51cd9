"""The Run tab's recorded runs: one line of links to the papers' case studies, opened at once, no model call.

Each recorded trace (:mod:`explorer.ui.runs.gallery`) is pinned in the view's trace cache under its
run id, so opening one goes through exactly the path a stored run takes
(:func:`~explorer.ui.page.viewblock.after_show`): what a recorded run shows is what a live run of
the same trace shows. Every case is a real link (``?case=NAME``; a case with several methods
also links their comparison), so it can be opened in a new tab or put in a lesson plan; on the
page a click opens it in place. A line above the view marks a recorded run as such, followed by
the case's caption (:mod:`explorer.ui.panels.case_story`: what the paper showed, what this model
did, where to look), folded to one line so the run's strip stays on the first screen; an item with
a contrast (DR-RAG's one-shot retrieval run) opens with it beside it. **Run it live** puts its
question, method, variant and settings into the controls, and the caller chains the Run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.ui.page import links
from explorer.ui.panels import case_story
from explorer.ui.runs import gallery
from explorer.ui.runs.history import TraceCache
from explorer.ui.views import case_stories
from explorer.ui.views.html import esc
from explorer.ui.views.terms import mark_terms


@dataclass
class GalleryBlock:
    cases: Any
    row: Any
    note: Any
    live: Any
    key: Any


def case_story_html(item: gallery.Item | None, shelf: gallery.Gallery) -> str:
    """The case study's caption, told from its trace (and the trace shown beside it); "" when it has none."""
    trace = shelf.trace(item.key) if item is not None else None
    if item is None or trace is None:
        return ""
    beside = shelf.trace(item.beside) if item.beside else None
    return case_story.render(case_stories.caption(item.key, trace, beside))


def recorded_note(item: gallery.Item, shelf: gallery.Gallery) -> str:
    """The line that says a view shows a recorded run, not one made now, followed by the case's caption."""
    trace = shelf.trace(item.key)
    model = str((trace.model or {}).get("name", "")) if trace else ""
    when = (trace.created_at or "")[:10] if trace else ""
    beside = shelf.item(item.beside) if item.beside else None
    also = (f", beside the {links.method_title(beside.method)} run it is contrasted with" if beside is not None
            else "")
    return (f'<div class="dre-root dre-recorded" data-recorded="{esc(item.key)}"><b>Recorded run</b> · '
            f"{mark_terms(item.label + also)} · recorded with {esc(model or 'the embedded model')} on {esc(when)}, "
            "shown from its trace (no model call now).</div>" + case_story_html(item, shelf))


def _case_link(title: str, label: str, key: str) -> str:
    return (f'<a href="?case={esc(key)}" data-case="{esc(key)}" '
            f'aria-label="{esc(label)}: its run on the {esc(title)} case study">{esc(label)}</a>')


def cases_html(shelf: gallery.Gallery) -> str:
    """The case studies as links: each method's recorded run, and the case's runs compared."""
    if not shelf.items:
        return (f'<p class="dre-root dre-note" id="cases-none">Recorded case studies: none '
                f"({esc(shelf.problem)}).</p>")
    groups = []
    for title, items, compare in links.case_links(shelf):
        runs = " ".join(_case_link(title, label, key) for label, key in items)
        both = (f' <a href="{esc(compare)}" data-compare="{esc(compare[len("?compare="):])}" '
                f'aria-label="compare: the {esc(title)} case study\'s runs side by side">compare</a>' if compare
                else "")
        groups.append(f'<li><span class="dre-case-title">{esc(title)}</span> {runs}{both}</li>')
    return ('<nav class="dre-root dre-cases" aria-label="Recorded case studies">'
            '<span class="dre-cases-head" title="recorded runs of the papers\' case studies: they open at once, '
            'with no model call">Case studies:</span>'
            f'<ul>{"".join(groups)}</ul></nav>')


def build(shelf: gallery.Gallery, cache: TraceCache) -> GalleryBlock:
    """The case-study links and the recorded-run line with its caption; pins the traces into ``cache``."""
    for trace in shelf.traces.values():
        cache.pin(trace)
    first = shelf.first
    cases = gr.HTML(cases_html(shelf), elem_id="gallery", js_on_load=None)
    with gr.Row(elem_id="recorded-row", visible=first is not None, equal_height=False) as row:
        note = gr.HTML(recorded_note(first, shelf) if first else "", elem_id="recorded-note", js_on_load=None,
                       scale=5)
        live = gr.Button("Run it live", variant="secondary", elem_id="run-live", scale=0, min_width=120,
                         size="sm")
    key = gr.State(first.key if first else "")
    return GalleryBlock(cases=cases, row=row, note=note, live=live, key=key)
