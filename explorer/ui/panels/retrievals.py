"""Retrievals as a timeline: when each happened, its query, and the passages with title, score and rank.

Each card has the retrieval's colour (the same as the continuation it fed in the token strip)
and an anchor the strip links to. Gold passages of the question (``trace.gold["gold_passages"]``)
are marked, so a reader sees at once whether the right evidence came back.
"""

from __future__ import annotations

from explorer.ui.html import badge, esc, fmt, section, short
from explorer.ui.view import TraceView, ViewOptions


def _hit(hit: dict, gold: set[str], compact: bool) -> str:
    pid = str(hit.get("id", ""))
    is_gold = pid in gold
    head = (f'<span class="dre-rank">#{esc(hit.get("rank", "?"))}</span> <b>{esc(hit.get("title", ""))}</b> '
            f'<span class="dre-score">score {esc(fmt(hit.get("score")))}</span> <code>{esc(pid)}</code>'
            + (" " + badge("gold", "gold") if is_gold else ""))
    text = esc(hit.get("text", ""))
    if compact:
        return f'<li class="dre-hit{" is-gold" if is_gold else ""}">{head}</li>'
    return (f'<li class="dre-hit{" is-gold" if is_gold else ""}"><details><summary>{head}</summary>'
            f'<p class="dre-passage">{text}</p></details></li>')


def render(view: TraceView, opts: ViewOptions) -> str:
    gold = view.gold_passages
    cards = []
    for e in view.retrievals:
        p = e.payload
        q = view.query_of.get(e.id)
        colour = view.colour(e.id)
        number = view.retrieval_number[e.id]
        query = q.payload.get("text", "") if q is not None else ""
        source = q.payload.get("source", "") if q is not None else ""
        trig = view.trigger_of.get(q.id) if q is not None else None
        why = ""
        if trig is not None:
            t = trig.payload
            why = (f'<div class="dre-why">fired by {esc(repr(str(t.get("token", ""))))}: {esc(t.get("signal"))} = '
                   f'{esc(fmt(t.get("value")))} vs θ = {esc(fmt(t.get("threshold")))}</div>')
        hits = p.get("hits") or []
        found = sum(1 for h in hits if str(h.get("id")) in gold)
        gold_note = f" · {found}/{len(gold)} gold" if gold else ""
        items = "".join(_hit(h, gold, opts.compact) for h in hits) or '<li class="dre-empty">no passages</li>'
        cards.append(
            f'<div class="dre-ret" id="{view.anchor(e.id)}" style="border-color:{colour}">'
            f'<div class="dre-ret-head" style="background:{colour}">R{number} · step {e.step} · t = {fmt(e.t)} s'
            f'{esc(gold_note)}</div>{why}'
            f'<div class="dre-query">query ({esc(source)}): <q>{esc(short(query, 400))}</q></div>'
            f'<ol class="dre-hits">{items}</ol></div>')
    if not cards:
        body = f'<p class="dre-empty">No retrieval {"yet" if view.trace.status == "running" else "in this run"}.</p>'
    else:
        body = f'<div class="dre-timeline">{"".join(cards)}</div>'
    return section(f"Retrievals ({len(cards)})", body, panel="retrievals")
