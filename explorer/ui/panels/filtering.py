"""BlendFilter's knowledge filter: the blended queries, their passage sets, the verdicts, the union.

Each ``filter`` event (``passage_ids``, ``kept``, ``raw_answer``) is paired with the retrieval
whose passages it judged (its ``retrieval`` event id when recorded, else the one sharing most
ids with it, searching backwards), so the page
shows query → passages → the model's verdict on each, and the ``selection`` events (the union
that was answered from) below. ``kept`` may be a list of ids or of booleans aligned with
``passage_ids``; both are read.
"""

from __future__ import annotations

from typing import Any

from explorer import naming
from explorer.ui.views.html import badge, esc, section, short
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions


def kept_ids(payload: dict[str, Any]) -> set[str]:
    ids = [str(i) for i in payload.get("passage_ids") or []]
    kept = payload.get("kept") or []
    if kept and all(isinstance(k, bool) for k in kept):
        return {pid for pid, k in zip(ids, kept, strict=False) if k}
    return {str(k) for k in kept}


def _judged_retrieval(view: TraceView, e: Any) -> Any | None:
    named = e.payload.get("retrieval")
    if isinstance(named, int) and named in view.retrieval_number:
        return view.events[named]
    ids = {str(i) for i in e.payload.get("passage_ids") or []}
    best, best_overlap = None, 0
    for r in reversed([r for r in view.retrievals if r.id < e.id]):
        overlap = len(ids & {str(h.get("id")) for h in r.payload.get("hits") or []})
        if overlap > best_overlap:
            best, best_overlap = r, overlap
    return best


def _title(view: TraceView, pid: str) -> str:
    hit = view.passage(pid)
    return str(hit.get("title", "")) if hit else ""


def render(view: TraceView, opts: ViewOptions) -> str:
    filters = view.of_kind("filter")
    if not filters:
        return ""
    gold = view.gold_passages
    columns = []
    for e in filters:
        r = _judged_retrieval(view, e)
        q = view.query_of.get(r.id) if r is not None else None
        kept = kept_ids(e.payload)
        rows = []
        for pid in (str(i) for i in e.payload.get("passage_ids") or []):
            verdict = badge("kept", "ok") if pid in kept else badge("dropped", "bad")
            gold_mark = " " + badge("gold", "gold") if pid in gold else ""
            rows.append(f'<li data-passage="{esc(pid)}">{verdict} <b>{esc(_title(view, pid))}</b> '
                        f"<code>{esc(pid)}</code>{gold_mark}</li>")
        query = (f'<div class="dre-query">query ({esc(q.payload.get("source"))}): '
                 f'<q>{esc(short(q.payload.get("text", ""), 300))}</q></div>') if q is not None else ""
        raw = ("" if opts.compact else
               f'<details><summary>the filter\'s raw answer</summary><pre>{esc(e.payload.get("raw_answer"))}</pre>'
               "</details>")
        name = f" · {esc(e.payload['set'])} set" if e.payload.get("set") else ""
        judged = f" · of {naming.event('retrieval', r.id)}" if r is not None else ""
        title = naming.event("filter", e.id).capitalize()
        columns.append(f'<div class="dre-filtercol" data-filter="{e.id}"><div class="dre-qhead">{title}{name} · '
                       f'{naming.step(e.step)}{judged}</div>{query}'
                       f'<ul class="dre-verdicts">{"".join(rows)}</ul>{raw}</div>')
    body = f'<div class="dre-filtergrid">{"".join(columns)}</div>'
    for s in view.of_kind("selection"):
        ids = [str(i) for i in s.payload.get("passage_ids") or []]
        items = "".join(f"<li><b>{esc(_title(view, pid))}</b> <code>{esc(pid)}</code>"
                        f'{" " + badge("gold", "gold") if pid in gold else ""}</li>' for pid in ids)
        body += (f'<div class="dre-union" data-selection="{s.id}">'
                 f'<b>{naming.event("selection", s.id).capitalize()}</b>: '
                 f'{esc(s.payload.get("reason"))} '
                 f'({len(ids)} passages)<ul>{items}</ul></div>')
    return section(mark_terms("Knowledge filter (BlendFilter)"), body, panel="filter")
