"""SEAKR's self-aware uncertainty: U per step against δ, per-passage U beside the search rank,
the eigenvalue spectrum of the Gram matrix, and the sampled continuations.

Built from ``uncertainty`` events (``estimator``, ``value``; optionally ``samples``,
``eigenvalues``, ``threshold``/``delta``, ``context``, ``primary``) and ``rerank`` events
(``candidates``, ``chosen``). When a run records several estimators per context (the ablations),
the charts follow the ``primary`` one. Keys beyond the required ones are read when present and skipped when not, so runs
of other uncertainty estimators (perplexity, energy) show what they recorded.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from explorer import naming
from explorer.ui.views.html import esc, figure, fmt, plot, plot_text, section
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions

U_KEYS = ("uncertainty", "u", "U", "value")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _delta(view: TraceView, payload: dict[str, Any]) -> float | None:
    for source in (payload, view.trace.config):
        for key in ("threshold", "delta"):
            if _num(source.get(key)) is not None:
                return float(source[key])
    return None


def _label(payload: dict[str, Any]) -> str:
    for key in ("purpose", "role", "context", "stage", "of"):
        if isinstance(payload.get(key), str):
            return payload[key]
    return str(payload.get("estimator", ""))


def _u_chart(view: TraceView, events: list[Any]) -> str:
    delta = next((d for e in events if (d := _delta(view, e.payload)) is not None), None)
    xs, ys, colours, hover = [], [], [], []
    for n, e in enumerate(events):
        value = _num(e.payload.get("value"))
        if value is None:
            continue
        xs.append(n)
        ys.append(value)
        over = delta is not None and value > delta
        colours.append("#dc2626" if over else "#059669")
        versus = "" if delta is None else f" ({'>' if over else '≤'} δ = {fmt(delta)})"
        hover.append(f"{naming.event('uncertainty', e.id)}, {naming.step(e.step)} · "
                     f"{plot_text(_label(e.payload), 60)}<br>"
                     f"{plot_text(e.payload.get('estimator'))} U = {fmt(value)}{versus}")
    shapes = []
    if delta is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": delta, "y1": delta,
                       "line": {"color": "#dc2626", "dash": "dash", "width": 1.5}})
    ticks = [plot_text(f"{_label(events[n].payload)} ·{events[n].step}", 24) for n in xs]
    fig = figure([go.Scatter(x=xs, y=ys, mode="lines+markers", marker={"color": colours, "size": 8},
                             line={"color": "#94a3b8", "width": 1}, hovertext=hover, hoverinfo="text")],
                 shapes=shapes, xaxis={"tickmode": "array", "tickvals": xs, "ticktext": ticks, "tickangle": -30,
                                       "tickfont": {"size": 9}},
                 margin={"b": 60},
                 yaxis={"title": {"text": "U", "font": {"size": 10}}})
    note = f"red: U > δ = {fmt(delta)} (uncertain: retrieve)" if delta is not None else "no δ recorded"
    over = sum(1 for v in ys if delta is not None and v > delta)
    against = (f" against δ = {fmt(delta)}: {over} above it (retrieve), {len(xs) - over} at or below"
               if delta is not None else "")
    alt = f"Line chart of SEAKR's uncertainty U at each of {len(xs)} steps{against}."
    return f'<p class="dre-note">{esc(note)}</p>' + plot(fig, height=220, name="uncertainty", alt=alt)


def _chosen_ids(chosen: Any, candidates: list[dict[str, Any]]) -> set[str]:
    items = chosen if isinstance(chosen, list) else [chosen]
    out = set()
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(candidates):
            out.add(str(candidates[item].get("id", item)))
        elif isinstance(item, dict):
            out.add(str(item.get("id")))
        elif item is not None:
            out.add(str(item))
    return out


def _rerank(e: Any) -> str:
    cands = [c if isinstance(c, dict) else {"id": c} for c in e.payload.get("candidates") or []]
    chosen = _chosen_ids(e.payload.get("chosen"), cands)
    labels, values, colours, hover = [], [], [], []
    for n, c in enumerate(cands):
        u = next((_num(c.get(k)) for k in U_KEYS if _num(c.get(k)) is not None), None)
        rank = c.get("rank", n + 1)
        labels.append(plot_text(f"rank {rank}: {c.get('title') or c.get('id')}", 28))
        values.append(u)
        colours.append("#059669" if str(c.get("id")) in chosen else "#94a3b8")
        hover.append(f"search rank {plot_text(rank)} · score {fmt(c.get('score'))}<br>{plot_text(c.get('title'), 80)} "
                     f"[{plot_text(c.get('id'))}]<br>U = {fmt(u)}")
    fig = figure([go.Bar(x=labels, y=values, marker={"color": colours}, hovertext=hover, hoverinfo="text")],
                 yaxis={"title": {"text": "U with this passage", "font": {"size": 10}}}, margin={"b": 60})
    kept = ", ".join(sorted(chosen)) or "none"
    return (f'<div class="dre-rerank" data-rerank="{e.id}"><div class="dre-qhead">'
            f'{naming.event("rerank", e.id).capitalize()} · {naming.step(e.step)}: kept <code>{esc(kept)}</code> '
            "(lowest U), bars in search-engine rank order</div>"
            + plot(fig, height=200, name="rerank", alt=f"Bar chart of U with each of {len(cands)} candidate passages, "
                   f"in search rank order; kept {kept} (the lowest U).") + "</div>")


def _spectra(events: list[Any]) -> str:
    traces = []
    for e in events[:8]:
        eig = [v for v in (e.payload.get("eigenvalues") or []) if _num(v) is not None]
        if not eig:
            continue
        eig = sorted((float(v) for v in eig), reverse=True)
        traces.append(go.Scatter(x=list(range(1, len(eig) + 1)), y=eig, mode="lines+markers", marker={"size": 4},
                                 name=naming.event("uncertainty", e.id),
                                 hovertext=[f"{naming.event('uncertainty', e.id)} λ{i + 1} = {fmt(v)}"
                                            for i, v in enumerate(eig)],
                                 hoverinfo="text"))
    if not traces:
        return ""
    fig = figure(traces, showlegend=True, yaxis={"type": "log", "title": {"text": "eigenvalue", "font": {"size": 10}}},
                 xaxis={"title": {"text": "index (largest first)", "font": {"size": 10}}})
    alt = f"Line chart, log scale, of the eigenvalues of {len(traces)} estimates, largest first."
    return "<h4>Eigenvalues of the Gram matrix of the samples' hidden states</h4>" + plot(fig, height=220, alt=alt,
                                                                                         name="eigenvalues")


def _samples(events: list[Any]) -> str:
    blocks = []
    for e in events:
        samples = e.payload.get("samples")
        if not isinstance(samples, list) or not samples:
            continue
        items = "".join(f"<li>{esc(s.get('text', s) if isinstance(s, dict) else s)}</li>" for s in samples)
        blocks.append(f"<details><summary>{naming.event('uncertainty', e.id).capitalize()}, {naming.step(e.step)}: "
                      f"{len(samples)} samples, U = "
                      f"{esc(fmt(e.payload.get('value')))}</summary><ol class=\"dre-samples\">{items}</ol></details>")
    return "".join(blocks)


def primary(events: list[Any]) -> list[Any]:
    """The estimates the method decided on (runs that also record ablation estimators mark them)."""
    marked = [e for e in events if e.payload.get("primary") is True]
    return marked if marked else [e for e in events if "primary" not in e.payload]


def render(view: TraceView, opts: ViewOptions) -> str:
    events = primary(view.of_kind("uncertainty"))
    reranks = view.of_kind("rerank")
    if not events and not reranks:
        return ""
    body = _u_chart(view, events) if events else ""
    body += "".join(_rerank(e) for e in reranks)
    if not opts.compact:
        body += _spectra(events) + _samples(events)
    return section(mark_terms("Uncertainty (SEAKR)"), body, panel="uncertainty")
