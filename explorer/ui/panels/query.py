"""How each query was made: QFS attention over the context, or FLARE's masked sentence.

For a ``query`` event with ``candidates`` (DRAGIN's QFS) every candidate word is shown in text
order as a heat strip of the triggering position's attention; words that could not be chosen
(stopwords, the flagged words themselves) are greyed and the chosen top-n are boxed, followed by
the query they made. For a query with ``masked`` (FLARE) the sentence is shown with the
removed low-confidence words struck out. Other queries are listed with their source.
"""

from __future__ import annotations

from typing import Any

from explorer import naming
from explorer.ui.views.html import esc, fmt, heat, section, short
from explorer.ui.views.view import TraceView, ViewOptions


def _qfs(candidates: list[dict[str, Any]]) -> str:
    weights = [c.get("weight") for c in candidates if isinstance(c.get("weight"), (int, float))]
    top = max(weights) if weights and max(weights) > 0 else 1.0
    parts, segment = [], None
    for c in candidates:
        seg = c.get("segment")
        if seg != segment:
            parts.append(f'<span class="dre-seg">{esc(seg)}:</span>')
            segment = seg
        classes = ["w"]
        if not c.get("eligible", True):
            classes.append("ineligible")
        if c.get("chosen"):
            classes.append("chosen")
        if c.get("flagged"):
            classes.append("flagged")
        weight = c.get("weight") if isinstance(c.get("weight"), (int, float)) else None
        title = f"attention weight {fmt(weight)}" + ("" if c.get("eligible", True) else " · not a candidate")
        if c.get("flagged"):
            title += " · a word over the threshold (excluded)"
        colour = heat(None if weight is None else weight / top, (96, 165, 250))
        parts.append(f'<span class="{" ".join(classes)}" style="background:{colour}" '
                     f'title="{esc(title)}">{esc(c.get("text", ""))}</span>')
    return f'<div class="dre-heat">{" ".join(parts)}</div>'


def _masked(p: dict[str, Any]) -> str:
    masked = [str(m) for m in p.get("masked") or []]
    sentence = p.get("sentence")
    if sentence:
        pending = list(masked)
        words = []
        for word in str(sentence).split():
            if pending and word.strip() == pending[0].strip():
                words.append(f'<del title="removed: low probability">{esc(word)}</del>')
                pending.pop(0)
            else:
                words.append(esc(word))
        shown = " ".join(words)
    else:
        shown = "removed: " + (", ".join(f"<del>{esc(m)}</del>" for m in masked) or "nothing")
    return f'<div class="dre-masked">{shown}</div>'


def render(view: TraceView, opts: ViewOptions) -> str:
    blocks = []
    for e in view.of_kind("query"):
        p = e.payload
        trig = view.trigger_of.get(e.id)
        head = (f'<div class="dre-qhead"><b>{naming.event("query", e.id).capitalize()}</b> · {naming.step(e.step)} · '
                f'source <code>{esc(p.get("source"))}</code>')
        if trig is not None:
            head += f' · after the retrieval decision at {esc(repr(str(trig.payload.get("token", ""))))}'
        head += "</div>"
        body = ""
        if isinstance(p.get("candidates"), list) and p["candidates"]:
            chosen = sum(1 for c in p["candidates"] if c.get("chosen"))
            body += (f'<p class="dre-note">Attention of the triggering position over the context '
                     f'(darker = more attention); {chosen} boxed words were chosen.</p>' + _qfs(p["candidates"]))
            if p.get("qfs_note"):
                body += f'<p class="dre-defect">{esc(p["qfs_note"])}</p>'
        elif "masked" in p:
            body += _masked(p)
        if opts.compact and not body:
            continue
        body += f'<div class="dre-query">query: <q>{esc(short(p.get("text", ""), 400))}</q></div>'
        blocks.append(f'<div class="dre-qblock" data-query="{e.id}">{head}{body}</div>')
    if not blocks:
        return ""
    return section("Queries and how they were formed", "".join(blocks), panel="queries")
