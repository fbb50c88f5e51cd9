"""The History tab: every stored run, searchable; reopen, compare, rename, tag, delete, export.

A reopened run is rendered from its stored trace alone, by the same view as a live run. The
list is a checkbox group so one action can apply to several runs (compare, tag, delete).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError, public_message
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.page import forkblock, viewblock
from explorer.ui.runs import history
from explorer.ui.runs.controller import status_html


@dataclass
class HistoryControls:
    tab: Any
    search: Any
    method: Any
    model: Any
    tag: Any
    since: Any
    until: Any
    refresh: Any
    runs: Any
    open_btn: Any
    compare_btn: Any
    name: Any
    rename_btn: Any
    tags: Any
    tag_btn: Any
    delete_btn: Any
    json_btn: Any
    html_btn: Any
    csv_btn: Any
    file: Any
    status: Any
    view: Any

    @property
    def filters(self) -> list[Any]:
        return [self.search, self.method, self.model, self.tag, self.since, self.until]

    @property
    def list_outputs(self) -> list[Any]:
        return [self.runs, self.method, self.model, self.status]


QUIET: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}


def _layout(cache: history.TraceCache, head: str, forker: forkblock.Forker | None = None) -> HistoryControls:
    with gr.Tab("History", id="history", elem_id="tab-history") as tab:
        with gr.Row():
            search = gr.Textbox(label="Search question, answer or name", elem_id="history-search", scale=3)
            method = gr.Dropdown([history.ALL], value=history.ALL, label="Method", elem_id="history-method", scale=1)
            model = gr.Dropdown([history.ALL], value=history.ALL, label="Model", elem_id="history-model", scale=1)
            tag = gr.Textbox(label="Tag", elem_id="history-tag", scale=1)
            since = gr.Textbox(label="Since (YYYY-MM-DD)", elem_id="history-since", scale=1)
            until = gr.Textbox(label="Until", elem_id="history-until", scale=1)
            refresh = gr.Button("Search", elem_id="history-refresh", scale=0, min_width=90)
        runs = gr.CheckboxGroup([], value=[], label="Stored runs, newest first (tick one to open, several to compare)",
                                elem_id="history-runs")
        with gr.Row():
            open_btn = gr.Button("Open", variant="primary", elem_id="history-open", min_width=80)
            compare_btn = gr.Button("Compare", elem_id="history-compare", min_width=80)
            name = gr.Textbox(placeholder="new name", show_label=False, elem_id="history-name", min_width=140)
            rename_btn = gr.Button("Rename", elem_id="history-rename", min_width=80)
            tags = gr.Textbox(placeholder="tags, comma-separated", show_label=False, elem_id="history-tags",
                              min_width=140)
            tag_btn = gr.Button("Tag", elem_id="history-tag-add", min_width=60)
            delete_btn = gr.Button("Delete", variant="stop", elem_id="history-delete", min_width=80)
        with gr.Row(equal_height=True):
            with gr.Column(scale=1, min_width=200):
                json_btn = gr.Button("Export trace JSON", size="sm", elem_id="export-json")
                html_btn = gr.Button("Export HTML report", size="sm", elem_id="export-html")
                csv_btn = gr.Button("Export history CSV", size="sm", elem_id="export-csv")
            file = gr.File(label="Exported file (click to download)", interactive=False, elem_id="export-file",
                           height=110, scale=3, visible=False)  # shown with its first file
        status = gr.HTML("", elem_id="history-status", js_on_load=None)
        view = viewblock.build("history", cache, head, '<p class="dre-empty">Tick a run and press Open, or tick '
                                                       "several and press Compare.</p>", forker=forker)
    return HistoryControls(tab, search, method, model, tag, since, until, refresh, runs, open_btn, compare_btn, name,
                           rename_btn, tags, tag_btn, delete_btn, json_btn, html_btn, csv_btn, file, status, view)


def _lister(store: RunStore, recorded: list[tuple[str, Trace]] | None = None) -> Callable[..., tuple]:
    """The filtered run list (the stored runs, then the app's recorded case studies), and the method/model
    choices that exist in the store."""
    def listing(s: str, m: str, mo: str, t: str, si: str, un: str, keep: list[str] | None = None) -> tuple:
        try:
            found = history.rows(store, search=s, method=m, model=mo, tag=t, since=si, until=un)
            found += history.recorded_rows(recorded or [], search=s, method=m, model=mo, tag=t, since=si, until=un)
        except ExplorerError as exc:
            return gr.update(), gr.update(), gr.update(), status_html(public_message(exc), error=True)
        ids = {r["run_id"] for r in found}
        value = [k for k in (keep or []) if k in ids]
        note = f"{len(found)} run(s)" + (" (showing the newest 200)" if len(found) >= 200 else "")
        return (gr.update(choices=history.choices(found), value=value),
                gr.update(choices=history.distinct(store, "method")),
                gr.update(choices=history.distinct(store, "model")),
                status_html(note))

    return listing


def _wire_views(c: HistoryControls, cache: history.TraceCache) -> None:
    """Open one ticked run, or compare several, in the tab's view."""
    def show(selected: list[str], signal: str, compare: bool) -> tuple:
        try:
            ids = history.require(selected, at_least=2 if compare else 1, action="compare" if compare else "open")
        except ExplorerError as exc:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), status_html(public_message(exc), error=True)
        if not compare:
            ids = ids[:1]
        html, state, run_u, theta_u = viewblock.after_show(cache, viewblock.Shown(ids, compare=compare), signal)
        what = f"Comparing {len(ids)} runs." if compare else "Opened from the store."
        return html, state, run_u, theta_u, status_html(what)

    view = c.view
    show_outputs = [view.html, view.state, view.run, view.theta, c.status]
    c.open_btn.click(lambda sel, sig: show(sel, sig, False), [c.runs, view.signal], show_outputs, **QUIET)
    c.compare_btn.click(lambda sel, sig: show(sel, sig, True), [c.runs, view.signal], show_outputs, **QUIET)


def _apply(store: RunStore, cache: history.TraceCache, action: str, selected: list[str], text: str,
           recorded: set[str] | None = None) -> str:
    """Rename, tag or delete the ticked runs; the line that says what was done."""
    if recorded and set(selected or []) & recorded:
        done = {"rename": "renamed", "tag": "tagged"}.get(action, "deleted")
        raise ExplorerError(f"a recorded case study cannot be {done}: it ships with the app", where="history",
                            fix="untick the runs marked “recorded:”; they can be opened, compared and exported")
    if action == "rename":
        run_id = history.require(selected, action="rename")[0]
        store.rename(run_id, text or "")
        return f"Renamed run {run_id[:12]}."
    if action == "tag":
        ids = history.require(selected, action="tag")
        labels = [t.strip() for t in (text or "").split(",") if t.strip()]
        if not labels:
            raise ExplorerError("no tag given", where="tags", fix="type one or more tags, comma-separated")
        for run_id in ids:
            store.tag(run_id, *labels)
        return f"Tagged {len(ids)} run(s) with {', '.join(labels)}."
    ids = history.require(selected, action="delete")
    for run_id in ids:
        store.delete(run_id)
        cache.forget(run_id)
    return f"Deleted {len(ids)} run(s)."


def _wire_actions(c: HistoryControls, store: RunStore, cache: history.TraceCache,
                  listing: Callable[..., tuple], recorded: set[str] | None = None) -> None:
    def act(action: str, selected: list[str], text: str, *flt: str) -> tuple:
        try:
            done = _apply(store, cache, action, selected, text, recorded)
        except ExplorerError as exc:
            return gr.skip(), gr.skip(), gr.skip(), status_html(public_message(exc), error=True)
        listed = listing(*flt, keep=[] if action == "delete" else selected)
        return listed[0], listed[1], listed[2], status_html(done)

    filters, outputs = c.filters, c.list_outputs
    c.rename_btn.click(lambda sel, txt, *f: act("rename", sel, txt, *f), [c.runs, c.name, *filters], outputs, **QUIET)
    c.tag_btn.click(lambda sel, txt, *f: act("tag", sel, txt, *f), [c.runs, c.tags, *filters], outputs, **QUIET)
    c.delete_btn.click(lambda sel, *f: act("delete", sel, "", *f), [c.runs, *filters], outputs, **QUIET)


def shown(path: str) -> Any:
    """An export file, into the file box (hidden until its first file, so no empty box is on the page)."""
    return gr.update(value=path, visible=True)


def _wire_exports(c: HistoryControls, store: RunStore, cache: history.TraceCache, exports: history.Exports) -> None:
    """Trace JSON and HTML report of the ticked runs; the history CSV under the current filters."""
    def export(kind: str, selected: list[str], signal: str, *flt: str) -> tuple:
        try:
            if kind == "csv":
                s, m, mo, t, si, un = flt
                text = store.export_csv(search=s or None, method=None if m == history.ALL else m,
                                        model=None if mo == history.ALL else mo, tag=(t or "").strip() or None,
                                        since=history.parse_date(si, "since"),
                                        until=history.parse_date(un, "until", end=True))
                return shown(exports.csv(text)), status_html("History exported as CSV (the current filters).")
            ids = history.require(selected, action="export")
            traces = [cache.get(i) for i in ids]
            if kind == "json":
                return shown(exports.trace_json(traces[0])), status_html(f"Trace of run {ids[0][:12]} exported.")
            return shown(exports.report(traces, signal)), status_html(
                f"HTML report of {len(traces)} run(s) exported; it opens offline.")
        except ExplorerError as exc:
            return gr.skip(), status_html(public_message(exc), error=True)

    def exporter(kind: str) -> Callable[..., tuple]:
        return lambda sel, sig, *f: export(kind, sel, sig, *f)

    for kind, button in (("json", c.json_btn), ("html", c.html_btn), ("csv", c.csv_btn)):
        button.click(exporter(kind), [c.runs, c.view.signal, *c.filters], [c.file, c.status], **QUIET)


def build(store: RunStore, cache: history.TraceCache, exports: history.Exports, head: str, *,
          forker: forkblock.Forker | None = None, recorded: list[tuple[str, Trace]] | None = None) -> None:
    """The tab, laid out and wired: the list refreshes when the tab opens and on every filter change.

    ``forker``: runs opened here can be forked from their tokens and retrieval cards; ``recorded``:
    the app's recorded case studies (label, trace), listed after the stored runs."""
    c = _layout(cache, head, forker)
    listing = _lister(store, recorded)
    for trigger in (c.refresh.click, c.search.submit, c.tag.submit, c.since.submit, c.until.submit, c.tab.select):
        trigger(listing, c.filters, c.list_outputs, **QUIET)
    c.method.input(listing, c.filters, c.list_outputs, **QUIET)
    c.model.input(listing, c.filters, c.list_outputs, **QUIET)
    _wire_views(c, cache)
    _wire_actions(c, store, cache, listing, {t.run_id for _, t in recorded or []})
    _wire_exports(c, store, cache, exports)
