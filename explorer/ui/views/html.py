"""Small HTML helpers every panel uses, so escaping and chart embedding happen in one place.

Text from models, corpora and users reaches the page only through :func:`esc` (element text and
attribute values alike). Charts are Plotly figures serialised to JSON into a ``data-fig``
attribute (escaped like any attribute) and drawn by ``assets/explorer.js``; no user text is ever
placed inside a script. Plotly renders its own labels as SVG text with a few pseudo-HTML tags, so
hover and tick text is escaped too (:func:`plot_text`), which Plotly then shows literally.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

#: Colours for retrievals, so a continuation and the passages it was given share one colour.
#: Each reads at 4.5:1 or more as text on white and under white text (WCAG AA).
PALETTE = ("#1d4ed8", "#b45309", "#047857", "#6d28d9", "#be185d", "#0e7490", "#4d7c0f", "#b91c1c", "#4338ca",
           "#a16207")


def esc(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def plot_text(value: Any, limit: int = 300) -> str:
    """Text for Plotly labels: escaped (Plotly parses a few tags), single-line, bounded."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False).replace("\n", "↵")


def fmt(value: Any, digits: int = 3) -> str:
    """A number for people: a few significant digits, thousands separated; '–' when missing."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"


def short(text: Any, width: int = 120) -> str:
    """One line of at most ``width`` characters (not escaped)."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def heat(intensity: float | None, rgb: tuple[int, int, int] = (234, 88, 12)) -> str:
    """Background for a value scaled to 0..1 (None: no colour)."""
    if intensity is None or math.isnan(intensity):
        return "transparent"
    a = max(0.0, min(1.0, intensity))
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.06 + 0.8 * a:.3f})"


#: The paragraph of the app's "How to read" tab that explains each panel (anchor ids in assets/help.md).
HELP_ANCHORS = {"strip": "help-strip", "signal": "help-signal", "queries": "help-queries",
                "retrievals": "help-retrievals", "uncertainty": "help-seakr", "filter": "help-blendfilter",
                "stages": "help-drrag", "costs": "help-costs", "compare": "help-compare", "fork": "help-fork",
                "family": "help-family", "story": "help-case-story", "decisions": "help-decisions"}


def help_link(panel: str, title: str = "") -> str:
    """A "?" after a panel's title that opens its paragraph in the help tab (hidden in offline reports).

    Its accessible name says which panel it explains, so the page's many "?" links are told apart."""
    anchor = HELP_ANCHORS.get(panel)
    if anchor is None:
        return ""
    name = f"How to read the panel {title}" if title else "How to read this panel"
    return (f' <a class="dre-help" href="#{anchor}" data-help="{anchor}" title="{esc(name)}" '
            f'aria-label="{esc(name)}">?</a>')


#: The box of a marked word (:func:`explorer.ui.views.terms.term`): its sentence is not part of a name.
_TERM_TIP = re.compile(r'<span class="dre-term-tip">.*?</span>', re.S)


def plain_text(markup: str) -> str:
    """Trusted markup as text (tags and marked words' boxes dropped, entities read), for an accessible name."""
    return html.unescape(re.sub(r"<[^>]+>", "", _TERM_TIP.sub("", markup))).strip()


def section(title: str, body: str, *, panel: str, note: str = "") -> str:
    """A titled panel; ``title`` and ``note`` are trusted markup written by the explorer itself."""
    note_html = f'<p class="dre-note">{note}</p>' if note else ""
    return (f'<section class="dre-panel" data-panel="{esc(panel)}"><h3>{title}{help_link(panel, plain_text(title))}'
            f'</h3>{note_html}{body}</section>')


def details(summary: str, body: str, *, open_: bool = False, cls: str = "") -> str:
    return (f'<details class="{esc(cls)}"{" open" if open_ else ""}><summary>{summary}</summary>{body}</details>')


def badge(text: str, kind: str = "") -> str:
    return f'<span class="dre-badge {esc(kind)}">{esc(text)}</span>'


def figure(data: list[Any] | None = None, **layout: Any) -> go.Figure:
    """A figure with the explorer's plain look and no template (keeps the embedded JSON small)."""
    base: dict[str, Any] = {
        "template": go.layout.Template(),
        "margin": {"l": 48, "r": 12, "t": 28, "b": 36},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#fafafa",
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 11, "color": "#1f2937"},
        "hoverlabel": {"font": {"family": "ui-monospace, monospace", "size": 11}, "align": "left"},
        "showlegend": False,
        # automargin: tick labels get the room they need (a narrow phone chart cut them off)
        "xaxis": {"gridcolor": "#e5e7eb", "zeroline": False, "automargin": True},
        "yaxis": {"gridcolor": "#e5e7eb", "zeroline": False, "automargin": True},
    }
    for key, value in layout.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return go.Figure(data=data or [], layout=base)


def plot(fig: go.Figure, *, height: int = 240, name: str = "", alt: str = "") -> str:
    """A placeholder div the page script turns into the chart (also works in the offline report).

    ``alt`` says in words what the chart shows (its text alternative, read by screen readers)."""
    fig.update_layout(height=height, autosize=True)
    payload = pio.to_json(fig, validate=False, remove_uids=True)
    label = short(alt, 400) if alt else f"Chart: {name or 'values of this run'} (hover it for the values)"
    return (f'<div class="dre-plot" role="figure" aria-label="{esc(label)}" data-name="{esc(name)}" '
            f'style="height:{int(height)}px" data-fig="{esc(payload)}"></div>')
