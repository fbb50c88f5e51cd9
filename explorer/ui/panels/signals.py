"""The decision signal per unit with the threshold line, and what another threshold would do.

Reads the recorded ``check`` events: every unit's value (token, word or sentence), whether it was
eligible, the compare direction and the unit that fired. Units of successive checks are laid end
to end. With a what-if threshold θ' the chart also marks where retrieval WOULD fire, shades
everything after the first changed decision (the real text would differ from there), and a
table lists the threshold ranges that lead to each decision. Runs without checks get the
chosen per-token signal instead.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from explorer import naming, whatif
from explorer.ui.views.html import esc, figure, fmt, plot, plot_text, section
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions, strip_signals

FIRED, WHATIF, ELIGIBLE, OTHER = "#dc2626", "#f59e0b", "#2563eb", "#cbd5e1"


def _checks(view: TraceView, signal: str | None) -> list[Any]:
    return [e for e in view.of_kind("check") if signal is None or e.payload.get("signal") == signal]


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bar_points(view: TraceView) -> dict[tuple[int, int], int]:
    """(check event id, unit index) -> the point number of that unit's bar in the decision chart (the chart
    draws the units of the checks on the run's decision signal end to end, one bar per recorded value)."""
    found = whatif.signals(view.events)
    if not found:
        return {}
    out: dict[tuple[int, int], int] = {}
    for e in _checks(view, found[0]):
        for i, unit in enumerate(e.payload.get("units") or []):
            if _numeric(unit.get("value")):
                out[(e.id, i)] = len(out)
    return out


def _chart(view: TraceView, signal: str, decisions: list[whatif.Decision], theta: float | None) -> str:
    checks = _checks(view, signal)
    by_check = {d.check: d for d in decisions}
    xs, ys, colours, hover, ticks = [], [], [], [], []
    shapes, annotations, fired = [], [], []
    x = 0
    shade_from: int | None = None
    for e in checks:
        p = e.payload
        d = by_check.get(e.id)
        start = x
        if d is not None and not d.reliable and shade_from is None:
            shade_from = start
        for i, unit in enumerate(p.get("units") or []):
            value = unit.get("value")
            if not _numeric(value):  # no bar (bar_points counts the same way)
                x += 1
                continue
            eligible = bool(unit.get("eligible", True))
            colour = ELIGIBLE if eligible else OTHER
            if d is not None and d.reliable and d.would_fire == i and theta is not None:
                colour = WHATIF
            if p.get("fired") == i:
                colour = FIRED
                moved = naming.decision_kind(p) == "forced"
                fired.append(f"{'forced by a fork' if moved else 'fired'} at "
                             f"{str(unit.get('text', '')).strip()!r} ({fmt(value)})")
            xs.append(x)
            ys.append(float(value))
            colours.append(colour)
            extra = "" if eligible else " (not eligible)"
            hover.append(f"{plot_text(repr(str(unit.get('text', ''))), 80)}{extra}<br>{plot_text(signal)} = "
                         f"{fmt(value)}<br>{naming.event('check', e.id)}, {p.get('unit', 'unit')} {i}")
            ticks.append(plot_text(str(unit.get("text", "")).strip(), 14))
            x += 1
        if start:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": start - 0.5, "x1": start - 0.5,
                           "y0": 0, "y1": 1, "line": {"color": "#9ca3af", "width": 1, "dash": "dot"}})
        annotations.append({"x": start - 0.4, "y": 1.0, "xref": "x", "yref": "paper", "xanchor": "left",
                            "yanchor": "bottom", "showarrow": False, "font": {"size": 9, "color": "#6b7280"},
                            "text": naming.step(e.step)})
    recorded = checks[0].payload.get("threshold") if checks else None
    if isinstance(recorded, (int, float)):
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": recorded, "y1": recorded,
                       "line": {"color": FIRED, "width": 1.5}})
        annotations.append({"xref": "paper", "x": 1, "y": recorded, "xanchor": "right", "yanchor": "bottom",
                            "showarrow": False, "text": f"{naming.symbol(signal)} = {fmt(recorded)}",
                            "font": {"color": FIRED, "size": 10}})
    if theta is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": theta, "y1": theta,
                       "line": {"color": WHATIF, "width": 1.5, "dash": "dash"}})
        annotations.append({"xref": "paper", "x": 0, "y": theta, "xanchor": "left", "yanchor": "bottom",
                            "showarrow": False, "text": f"what-if {naming.symbol(signal)}' = {fmt(theta)}",
                            "font": {"color": "#b45309", "size": 10}})
    if shade_from is not None:
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": shade_from - 0.5, "x1": max(x, 1) - 0.5,
                       "y0": 0, "y1": 1, "fillcolor": "rgba(107,114,128,0.12)", "line": {"width": 0}})
    trace = go.Bar(x=xs, y=ys, marker={"color": colours}, hovertext=hover, hoverinfo="text")
    xaxis: dict[str, Any] = {"showticklabels": False}
    if 0 < len(xs) <= 48:
        xaxis = {"tickmode": "array", "tickvals": xs, "ticktext": ticks, "tickangle": -60, "tickfont": {"size": 9}}
    fig = figure([trace], shapes=shapes, annotations=annotations, xaxis=xaxis, bargap=0.15,
                 yaxis={"title": {"text": plot_text(signal), "font": {"size": 10}}},
                 margin={"b": 64 if len(xs) <= 48 else 24})
    unit = checks[0].payload.get("unit", "unit") if checks else "unit"
    alt = (f"Bar chart of {signal} for each {unit} the method checked, {len(xs)} bars in the order checked"
           + (f"; the threshold {naming.symbol(signal)} = {fmt(recorded)}" if isinstance(recorded, (int, float))
              else "")
           + (f"; retrieval {', '.join(fired)}" if fired else "; no bar fired")
           + (f"; highest {fmt(max(ys))}" if ys else "") + ". The decisions are listed in words below.")
    return plot(fig, height=260, name="signal", alt=alt)


def _token_chart(view: TraceView, signal: str) -> str:
    xs, ys, hover = [], [], []
    for span in view.main_spans:
        for i, token in enumerate(span.tokens):
            value = view.token_value(span, token, signal)
            xs.append(len(xs))
            ys.append(value)
            hover.append(f"{plot_text(repr(str(token.get('text', ''))), 60)}<br>{plot_text(signal)} = {fmt(value)}"
                         f"<br>{plot_text(span.purpose)} span, token {i}")
    fig = figure([go.Scatter(x=xs, y=ys, mode="lines+markers", marker={"size": 4, "color": ELIGIBLE},
                             line={"width": 1, "color": ELIGIBLE}, hovertext=hover, hoverinfo="text")],
                 xaxis={"title": {"text": "generated token", "font": {"size": 10}}},
                 yaxis={"title": {"text": plot_text(strip_signals()[signal][0]), "font": {"size": 10}}})
    known = [v for v in ys if v is not None]
    alt = (f"Line chart of {strip_signals()[signal][0]} for each of the {len(xs)} generated tokens"
           + (f", from {fmt(min(known))} to {fmt(max(known))}" if known else "") + ".")
    return plot(fig, height=200, name="signal", alt=alt)


def _interval_table(view: TraceView, signal: str) -> str:
    rows = []
    for e in _checks(view, signal)[:6]:
        units = e.payload.get("units") or []
        cells = []
        for iv in whatif.firing_intervals(units, e.payload.get("compare", ">")):
            lo = "−∞" if iv.lo == -math.inf else fmt(iv.lo)
            hi = "∞" if iv.hi == math.inf else fmt(iv.hi)
            what = ("no retrieval" if iv.fires is None
                    else f"{e.payload.get('unit', 'unit')} {iv.fires} {str(units[iv.fires].get('text', '')).strip()!r}")
            mark = " class=\"rec\"" if iv.fires == e.payload.get("fired") else ""
            cells.append(f"<li{mark}>{naming.symbol(signal)} in ({esc(lo)}, {esc(hi)}): {esc(what)}</li>")
        rows.append(f"<div><b>{naming.event('check', e.id).capitalize()}</b> ({naming.step(e.step)}, "
                    f"{esc(e.payload.get('unit', 'unit'))}s, fires when value {esc(e.payload.get('compare', '>'))} "
                    f"{naming.symbol(signal)})"
                    f"<ul>{''.join(cells)}</ul></div>")
    return "".join(rows)


def whatif_control(view: TraceView, opts: ViewOptions, signal: str,
                   whatif_range: tuple[float, float, float, float]) -> str:
    """The what-if θ' slider, beside the chart it changes: moving it replays the recorded decisions."""
    lo, hi, step, recorded = whatif_range
    value = opts.whatif if opts.whatif is not None else recorded
    key = view.key
    sym = naming.symbol(signal)
    reset = (f'<button type="button" class="dre-whatif-reset">Back to the recorded {sym}</button>'
             if opts.whatif is not None else "")
    return (f'<div class="dre-viewctl dre-whatif-ctl" data-run="{esc(view.trace.run_id)}">'
            f'<label for="dre-theta-{key}">What-if {sym}′ for {esc(signal)} (recorded {sym} = {esc(fmt(recorded))}):'
            '</label> '
            f'<input type="range" id="dre-theta-{key}" class="dre-theta" min="{lo}" max="{hi}" step="{step:.6g}" '
            f'value="{value:.6g}" data-recorded="{recorded:.6g}" '
            f'aria-describedby="dre-theta-help-{key}"> <output for="dre-theta-{key}">{esc(fmt(value))}</output> '
            f'{reset}<span class="dre-note" id="dre-theta-help-{key}">Move it to replay this run\'s recorded '
            "decisions at another threshold; nothing is generated again.</span></div>")


def render(view: TraceView, opts: ViewOptions, decisions: list[whatif.Decision], signal: str | None,
           whatif_range: tuple[float, float, float, float] | None = None) -> str:
    if signal is None:
        chosen = opts.signal if opts.signal in view.available_signals() else "prob"
        if not view.main_spans:
            return ""
        title = strip_signals()[chosen][0]
        return section(f"Signal per token: {esc(title)}", _token_chart(view, chosen), panel="signal",
                       note="This method records no threshold decision; the chart shows the strip's signal.")
    checks = _checks(view, signal)
    first = checks[0].payload
    note = (f"Decision: {mark_terms(str(first.get('rule', '')))}. "
            f"Bars: {esc(first.get('unit', 'unit'))}s in the order checked; red = fired, grey = not eligible.")
    body = _chart(view, signal, decisions, opts.whatif)
    if whatif_range is not None:
        body = whatif_control(view, opts, signal, whatif_range) + body
    if opts.whatif is not None:
        units_of = {e.id: e.payload.get("units") or [] for e in checks}
        body = (f'<p class="dre-whatif">What-if on the recorded generation: {esc(whatif.describe(decisions, units_of))}'
                "</p>" + body)
    if not opts.compact:
        body += ('<details class="dre-intervals"><summary>Which threshold gives which decision</summary>'
                 f"{_interval_table(view, signal)}</details>")
    return section(mark_terms(f"Decision signal: {signal}"), body, panel="signal", note=note)
