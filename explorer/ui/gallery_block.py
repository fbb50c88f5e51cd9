"""The Run tab's recorded runs: a table of the papers' case studies that open at once, no model call.

Each recorded trace (:mod:`explorer.ui.gallery`) is pinned in the view's trace cache under its
run id, so opening one goes through exactly the path a stored run takes
(:func:`~explorer.ui.viewblock.after_show`): what a recorded run shows is what a live run of
the same trace shows. A line above the view marks it as recorded, and the case's caption
(:mod:`explorer.ui.panels.case_story`) says what the paper showed, what this model did and where
to look; an item with a contrast (DR-RAG's one-shot retrieval run) opens with it beside it.
**Run it live** puts its question, method, variant and settings into the controls, and the caller
chains the Run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.ui import case_stories, gallery, viewblock
from explorer.ui.history import TraceCache
from explorer.ui.html import esc
from explorer.ui.panels import case_story

HEADERS = ["Case study", "Method", "Model", "Question", "Answer", "Retrievals"]


@dataclass
class GalleryBlock:
    table: Any
    row: Any
    note: Any
    live: Any
    key: Any
    #: The case's caption (its own HTML block, so a layout can place it where it likes).
    story: Any


def recorded_note(item: gallery.Item, shelf: gallery.Gallery) -> str:
    """The line that says a view shows a recorded run, not one made now."""
    trace = shelf.trace(item.key)
    model = str((trace.model or {}).get("name", "")) if trace else ""
    when = (trace.created_at or "")[:10] if trace else ""
    return (f'<div class="dre-root dre-recorded" data-recorded="{esc(item.key)}"><b>Recorded run</b> · '
            f"{esc(item.label)} · recorded with {esc(model or 'the embedded model')} on {esc(when)}, shown from "
            "its trace (no model call now).</div>")


def story_html(item: gallery.Item | None, shelf: gallery.Gallery) -> str:
    """The caption of a recorded item, told from its trace (and the trace shown beside it)."""
    trace = shelf.trace(item.key) if item is not None else None
    if item is None or trace is None:
        return ""
    beside = shelf.trace(item.beside) if item.beside else None
    return case_story.render(case_stories.caption(item.key, trace, beside))


def samples(shelf: gallery.Gallery) -> list[list[Any]]:
    out = []
    for item in shelf.items:
        question = item.question if len(item.question) <= 70 else item.question[:69] + "…"
        out.append([gallery.CASE_TITLES.get(item.case, item.case), item.method, item.model or "–", question,
                    item.answer or "–", item.retrievals])
    return out


def build(shelf: gallery.Gallery, cache: TraceCache) -> GalleryBlock:
    """The table of recorded runs and the recorded-run line; pins the traces into ``cache``."""
    for trace in shelf.traces.values():
        cache.pin(trace)
    first = shelf.first
    label = ("Recorded runs: the papers' case studies, each recorded with the embedded model that tells its story "
             "better; click one to open it at once (no model call)")
    if shelf.problem:
        label = f"Recorded runs: none ({shelf.problem})"
    table = gr.Dataset(components=[gr.Textbox(visible=False) for _ in HEADERS], headers=HEADERS,
                       samples=samples(shelf) or None, type="index", label=label, elem_id="gallery",
                       samples_per_page=len(shelf.items) or 1, layout="table")
    with gr.Column(elem_id="recorded-case", visible=first is not None) as row:
        with gr.Row(elem_id="recorded-row"):
            note = gr.HTML(recorded_note(first, shelf) if first else "", elem_id="recorded-note", js_on_load=None,
                           scale=5)
            live = gr.Button("Run it live", variant="secondary", elem_id="run-live", scale=1, min_width=120)
        story = gr.HTML(story_html(first, shelf), elem_id="case-story", js_on_load=None)
    key = gr.State(first.key if first else "")
    return GalleryBlock(table=table, row=row, note=note, live=live, key=key, story=story)


def shown_for(item: gallery.Item, shelf: gallery.Gallery) -> viewblock.Shown:
    """The runs a view opens for a recorded item: its contrast beside it when it has one."""
    return viewblock.Shown([i.run_id for i in shelf.shown_with(item)])


def opener(shelf: gallery.Gallery, cache: TraceCache):
    """Handler for a click on the table: (index, signal) -> view html, state, what-if, θ', note, row, key,
    status, caption."""
    from explorer.ui.controller import status_html

    def open_item(index: int | None, signal: str) -> tuple[Any, ...]:
        if index is None or not 0 <= int(index) < len(shelf.items):
            return (gr.skip(),) * 7 + (status_html("Pick a recorded run in the table."), gr.skip())
        item = shelf.items[int(index)]
        html, state, run_u, theta_u = viewblock.after_show(cache, shown_for(item, shelf), signal)
        beside = shelf.item(item.beside) if item.beside else None
        also = f", beside the {beside.method} run it is contrasted with" if beside is not None else ""
        return (html, state, run_u, theta_u, recorded_note(item, shelf), gr.update(visible=True), item.key,
                status_html(f"Opened the recorded {item.method} run on the {item.label.split(' · ')[0]}{also}; "
                            "“Run it live” runs it again now."), story_html(item, shelf))

    return open_item
