"""DR-RAG's two stages as a small graph: q → stage-1 passages → q+d queries → stage-2 candidates.

Nodes are queries and passages; an edge joins a query to the passages it retrieved, and a
passage to a query made from it (a ``query`` event naming its source passage under
``anchor``, ``passage_id``, ``passage``, ``from_passage``, ``parent`` or ``doc_id``). ``classifier`` events
(``pair``, ``probability``, ``accepted``) become dashed edges between the pair, green when
accepted; passages of ``selection`` events are ringed. Columns are the graph's depth, so the
two stages read left to right. Shown only for runs that have classifier calls or derived queries.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from explorer.ui.views.html import badge, esc, figure, fmt, plot, plot_text, section
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions

PARENT_KEYS = ("anchor", "passage_id", "passage", "from_passage", "parent", "doc_id")


def parent_passage(payload: dict[str, Any]) -> str | None:
    for key in PARENT_KEYS:
        value = payload.get(key)
        if isinstance(value, dict) and value.get("id") is not None:
            return str(value["id"])
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    return None


def _pair_ids(pair: Any) -> list[str]:
    items = pair if isinstance(pair, (list, tuple)) else [pair]
    out = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("id")
        if item is not None:
            out.append(str(item))
    return out


def _graph(view: TraceView) -> tuple[dict[str, tuple[int, str, str]], list[tuple[str, str]]]:
    """Nodes {key: (depth, label, hover)} and edges (from, to)."""
    nodes: dict[str, tuple[int, str, str]] = {}
    edges: list[tuple[str, str]] = []
    for q in view.of_kind("query"):
        parent = parent_passage(q.payload)
        depth = nodes[f"p:{parent}"][0] + 1 if parent and f"p:{parent}" in nodes else (2 if parent else 0)
        nodes[f"q:{q.id}"] = (depth, f"Q{q.id}", f"query ({plot_text(q.payload.get('source'))}): "
                                                 f"{plot_text(q.payload.get('text'), 160)}")
        if parent:
            nodes.setdefault(f"p:{parent}", (max(depth - 1, 1), parent, plot_text(parent)))
            edges.append((f"p:{parent}", f"q:{q.id}"))
        for r in view.retrievals:
            if r.payload.get("query") != q.id:
                continue
            for hit in r.payload.get("hits") or []:
                key = f"p:{hit.get('id')}"
                if key not in nodes:
                    hover = (f"rank {hit.get('rank')}: {plot_text(hit.get('title'))} [{plot_text(hit.get('id'))}] "
                             f"score {fmt(hit.get('score'))}")
                    nodes[key] = (depth + 1, str(hit.get("title", "")), hover)
                edges.append((f"q:{q.id}", key))
    return nodes, edges


def _figure(view: TraceView) -> str:
    nodes, edges = _graph(view)
    depths: dict[int, list[str]] = {}
    for key, (depth, _, _) in nodes.items():
        depths.setdefault(depth, []).append(key)
    pos = {}
    for depth, keys in depths.items():
        for i, key in enumerate(keys):
            pos[key] = (depth, -(i - (len(keys) - 1) / 2))
    selected = {f"p:{pid}" for s in view.of_kind("selection") for pid in s.payload.get("passage_ids") or []}
    gold = {f"p:{g}" for g in view.gold_passages}
    data: list[Any] = []
    ex, ey = [], []
    for a, b in edges:
        if a in pos and b in pos:
            ex += [pos[a][0], pos[b][0], None]
            ey += [pos[a][1], pos[b][1], None]
    data.append(go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#cbd5e1", "width": 1}, hoverinfo="skip"))
    for c in view.of_kind("classifier"):
        ids = [f"p:{i}" for i in _pair_ids(c.payload.get("pair"))]
        ids = [i for i in ids if i in pos]
        if len(ids) < 2:
            continue
        a, b = ids[0], ids[1]
        colour = "#059669" if c.payload.get("accepted") else "#dc2626"
        data.append(go.Scatter(x=[pos[a][0], (pos[a][0] + pos[b][0]) / 2, pos[b][0]],
                               y=[pos[a][1], (pos[a][1] + pos[b][1]) / 2 + 0.15, pos[b][1]], mode="lines",
                               line={"color": colour, "width": 1.5, "dash": "dot", "shape": "spline"},
                               hovertext=f"classifier p = {fmt(c.payload.get('probability'))}", hoverinfo="text"))
    keys = list(pos)
    data.append(go.Scatter(
        x=[pos[k][0] for k in keys], y=[pos[k][1] for k in keys], mode="markers+text",
        text=[plot_text(nodes[k][1], 22) for k in keys], textposition="top center", textfont={"size": 9},
        hovertext=[nodes[k][2] for k in keys], hoverinfo="text",
        marker={"size": [14 if k.startswith("q:") else 11 for k in keys],
                "symbol": ["diamond" if k.startswith("q:") else "circle" for k in keys],
                "color": ["#2563eb" if k.startswith("q:") else ("#f59e0b" if k in gold else "#94a3b8") for k in keys],
                "line": {"width": [3 if k in selected else 0 for k in keys], "color": "#059669"}}))
    height = 120 + 46 * max((len(v) for v in depths.values()), default=1)
    fig = figure(data, xaxis={"visible": False}, yaxis={"visible": False}, margin={"l": 10, "r": 10, "t": 10, "b": 10})
    queries = sum(1 for k in keys if k.startswith("q:"))
    alt = (f"Graph of the two retrieval stages: {queries} queries and {len(keys) - queries} passages, "
           f"{len(view.of_kind('classifier'))} classifier calls; {len(selected)} passages selected, "
           f"{len(gold & set(keys))} gold passages among those found.")
    return plot(fig, height=min(height, 560), name="stages", alt=alt)


def render(view: TraceView, opts: ViewOptions) -> str:
    calls = view.of_kind("classifier")
    derived = [q for q in view.of_kind("query") if parent_passage(q.payload)]
    if not calls and not derived:
        return ""
    body = ('<p class="dre-note">Left to right: queries (blue diamonds), the passages they found (gold passages '
            "orange), queries made from a passage, and what those found; dotted edges are classifier calls "
            "(green accepted, red rejected); ringed passages were selected.</p>" + _figure(view))
    if calls and not opts.compact:
        rows = "".join(f'<tr data-classifier="{c.id}"><td>'
                       f"{' + '.join(esc(i) for i in _pair_ids(c.payload.get('pair')))}</td>"
                       f"<td>{esc(fmt(c.payload.get('probability')))}</td>"
                       f"<td>{badge('accepted', 'ok') if c.payload.get('accepted') else badge('rejected', 'bad')}"
                       "</td></tr>"
                       for c in calls)
        body += ('<details><summary>Classifier calls</summary><table class="dre-table"><tr><th>pair</th>'
                 f"<th>probability</th><th></th></tr>{rows}</table></details>")
    for s in view.of_kind("selection"):
        body += (f'<div class="dre-union" data-selection="{s.id}"><b>selection</b>: {esc(s.payload.get("reason"))}: '
                 f'{", ".join(f"<code>{esc(i)}</code>" for i in s.payload.get("passage_ids") or [])}</div>')
    return section(mark_terms("Two-stage retrieval (DR-RAG)"), body, panel="stages")
