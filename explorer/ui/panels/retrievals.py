"""Retrievals as a timeline: when each happened, its query, and the passages with title, score and rank.

Each card has the retrieval's colour (the same as the continuation it fed in the token strip)
and an anchor the strip links to. Gold passages of the question (``trace.gold["gold_passages"]``)
are marked, so a reader sees at once whether the right evidence came back.
"""

from __future__ import annotations

from explorer import naming
from explorer.ui.views.html import badge, esc, fmt, section, short
from explorer.ui.views.view import TraceView, ViewOptions


def _hit(hit: dict, gold: set[str], compact: bool) -> str:
    pid = str(hit.get("id", ""))
    is_gold = pid in gold
    head = (f'<span class="dre-rank">rank {esc(hit.get("rank", "?"))}</span> <b>{esc(hit.get("title", ""))}</b> '
            f'<span class="dre-score">score {esc(fmt(hit.get("score")))}</span> <code>{esc(pid)}</code>'
            + (" " + badge("gold", "gold") if is_gold else ""))
    text = esc(hit.get("text", ""))
    item = f'<li class="dre-hit{" is-gold" if is_gold else ""}" data-passage="{esc(pid)}">'
    if compact:
        return f"{item}{head}</li>"
    return f'{item}<details><summary>{head}</summary><p class="dre-passage">{text}</p></details></li>'



def _state(p: dict) -> str:
    """What a fork did to this retrieval (replayed from the parent, suppressed, passages edited)."""
    bits = []
    if p.get("replayed"):
        bits.append("replayed from the parent")
    if p.get("suppressed"):
        bits.append("suppressed by the fork: no passages given")
    if isinstance(p.get("edited"), dict):
        before = ", ".join(map(str, p["edited"].get("from") or [])) or "none"
        bits.append(f"passages edited by the fork (the parent had {before})")
    return f'<div class="dre-why dre-fork-state">{esc(" · ".join(bits))}</div>' if bits else ""


def render(view: TraceView, opts: ViewOptions) -> str:
    gold = view.gold_passages
    fork_at = opts.fork_at or view.fork_at or {}
    cards = []
    for e in view.retrievals:
        p = e.payload
        q = view.query_of.get(e.id)
        colour = view.colour(e.id)
        query = q.payload.get("text", "") if q is not None else ""
        source = q.payload.get("source", "") if q is not None else ""
        trig = view.trigger_of.get(q.id) if q is not None else None
        why = ""
        if trig is not None:
            t = trig.payload
            word, signal = esc(repr(str(t.get("token", "")))), esc(t.get("signal"))
            value, theta = esc(fmt(t.get("value"))), esc(fmt(t.get("threshold")))
            if view.decision(t.get("span")) == "forced":
                why = (f'<div class="dre-why dre-forced">retrieval forced by a fork at {word} ({signal} = {value}, '
                       f"{naming.symbol(t.get('signal'))} = {theta}: not the method's own decision)</div>")
            else:
                compare = esc((view.check_of.get(t.get("span")) or trig).payload.get("compare", ">"))
                why = (f'<div class="dre-why">retrieval fired at {word}: {signal} = {value} {compare} '
                       f"{naming.symbol(t.get('signal'))} = {theta}"
                       "</div>")
        hits = p.get("hits") or []
        found = sum(1 for h in hits if str(h.get("id")) in gold)
        gold_note = f" · {found}/{len(gold)} gold" if gold else ""
        items = "".join(_hit(h, gold, opts.compact) for h in hits) or '<li class="dre-empty">no passages</li>'
        edited = q.payload.get("edited_from") if q is not None else None
        if edited:
            source += f"; edited by the fork, the method's was {short(edited, 200)!r}"
        elif q is not None and q.payload.get("forced"):
            source += f"; the user's, the method's was {short(q.payload.get('method_query', ''), 200)!r}"
        point = fork_at.get("retrieval") == e.id
        mark = ' <span class="dre-forkmark" title="a fork diverges here">⋔ fork point</span>' if point else ""
        cards.append(
            f'<div class="dre-ret{" forkpoint" if point else ""}" id="{view.anchor(e.id)}" data-retrieval="{e.id}" '
            f'style="border-color:{colour}">'
            f'<div class="dre-ret-head" style="background:{colour}">{naming.event("retrieval", e.id).capitalize()} · '
            f'{naming.step(e.step)} · t = {fmt(e.t)} s'
            f'{esc(gold_note)}{mark}</div>{why}{_state(p)}'
            f'<div class="dre-query">query ({esc(source)}): <q>{esc(short(query, 400))}</q></div>'
            f'<ol class="dre-hits">{items}</ol></div>')
    if not cards:
        body = f'<p class="dre-empty">No retrieval {"yet" if view.trace.status == "running" else "in this run"}.</p>'
    else:
        body = f'<div class="dre-timeline">{"".join(cards)}</div>'
    return section(f"Retrievals ({len(cards)})", body, panel="retrievals")
