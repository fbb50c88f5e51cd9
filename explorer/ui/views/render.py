"""Composing the panels into the view of one run, of several runs side by side, and of a live run.

The same functions serve the app (live, finished and reopened runs) and the offline report, so
a run looks the same wherever it is opened. Everything is rendered from traces only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from explorer import whatif
from explorer.trace import Trace
from explorer.ui.panels import (
    costs,
    decisions,
    filtering,
    header,
    query,
    retrievals,
    signals,
    stages,
    strip,
    uncertainty,
)
from explorer.ui.views.html import esc
from explorer.ui.views.view import TraceView, ViewOptions


def decision_signal(trace: Trace) -> str | None:
    """The signal a run's threshold decisions were made on (its first check's), or None."""
    found = whatif.signals(trace.events)
    return found[0] if found else None


def recorded_threshold(trace: Trace) -> float | None:
    for e in trace.events:
        # A NaN or infinite threshold (stored before such values were refused) has no place on a slider.
        if e.kind == "check" and isinstance(e.payload.get("threshold"), (int, float)) \
                and math.isfinite(e.payload["threshold"]):
            return float(e.payload["threshold"])
    return None


def theta_range(trace: Trace) -> tuple[float, float, float, float] | None:
    """(lowest, highest, step, recorded θ) of the what-if control: spanning every recorded value; None
    for a run without threshold decisions."""
    signal = decision_signal(trace)
    if signal is None:
        return None
    values = [float(u["value"]) for e in trace.events if e.kind == "check" and e.payload.get("signal") == signal
              for u in e.payload.get("units") or []
              if isinstance(u.get("value"), (int, float)) and math.isfinite(u["value"])]
    theta = recorded_threshold(trace) or 0.0
    lo = min([0.0, theta, *values])
    hi = max([theta * 2 if theta > 0 else 1.0, *values]) * 1.05
    step = max((hi - lo) / 400, 1e-4)
    return round(lo, 6), round(hi, 6), step, theta


def run_link(*run_ids: str) -> str:
    """The page's address of runs: one run (a fork opens beside its parent), or several compared."""
    if len(run_ids) == 1:
        return f"?run={run_ids[0]}"
    return "?compare=" + ",".join(run_ids)


def render_run(trace: Trace, opts: ViewOptions, *, live_tokens: list[dict[str, Any]] | None = None,
               live_purpose: str = "") -> str:
    """One run as a column of panels; ``opts.live`` keeps it light while tokens stream in."""
    view = TraceView(trace, live_tokens=live_tokens, live_purpose=live_purpose)
    signal = decision_signal(trace)
    replayed = (whatif.replay(trace.events, opts.whatif, signal=signal)
                if opts.whatif is not None and signal is not None else [])
    parts = [header.render(view, opts), strip.render(view, opts, replayed)]
    whatif_range = theta_range(trace) if opts.interactive and not opts.live else None
    if opts.live:
        parts.append(retrievals.render(view, replace(opts, compact=True)))
    else:
        parts += [signals.render(view, opts, replayed, signal, whatif_range), decisions.render(view, opts),
                  query.render(view, opts),
                  retrievals.render(view, opts), uncertainty.render(view, opts), filtering.render(view, opts),
                  stages.render(view, opts)]
        if opts.costs:
            parts.append(costs.render([trace]))
    state = "live" if opts.live else "done"
    return (f'<article class="dre-run" id="dre-run-{view.key}" data-run="{esc(trace.run_id)}" '
            f'data-method="{esc(trace.method)}" data-status="{esc(trace.status)}" data-view="{state}">'
            f'{"".join(p for p in parts if p)}</article>')


def refused_card(method: str, message: str) -> str:
    """A ticked method that did not run: its name and the message saying what to change."""
    try:
        from explorer.methods.base import get_method

        title = get_method(method).title
    except Exception:  # noqa: BLE001 - a method this build does not know: its name as given
        title = method
    return (f'<article class="dre-run dre-refused" data-method="{esc(method)}" data-status="not-run" '
            f'data-view="done"><header class="dre-runhead"><h3 class="dre-title">{esc(title)} '
            f'<span class="dre-badge bad">not run</span></h3></header>'
            f'<div class="dre-error" role="alert">{esc(message)}</div></article>')


def render_runs(traces: list[Trace], *, signal: str = "prob", whatif_at: Mapping[str, float] | None = None,
                live: Trace | None = None, live_tokens: list[dict[str, Any]] | None = None, live_purpose: str = "",
                message: str = "", fork_marks: Mapping[str, dict[str, Any]] | None = None, below: str = "",
                refused: list[tuple[str, str]] | None = None, interactive: bool = False,
                pending: bool = False, rendered: dict[str, str] | None = None) -> str:
    """Runs side by side (and the one still running, if any), with their costs compared below.

    ``fork_marks``: run id -> a point to mark as a fork's divergence (a parent beside its fork);
    ``below``: trusted markup after the runs (the family tree); ``refused``: (method, message) of
    ticked methods that did not run, each shown as a card beside the runs; ``pending``: more
    ticked methods are still to run (between two methods no run is live, yet the page keeps
    following the stream); ``rendered``: a memo of the stored runs' columns for one stream, so the
    finished runs are drawn once, not again at every refresh while the others run (a stored trace
    never changes; the live one is never kept)."""
    whatif_at = whatif_at or {}
    fork_marks = fork_marks or {}
    streaming = live is not None or pending
    alone = len(traces) == 1 and live is None

    def column(t: Trace) -> str:
        options = ViewOptions(signal=signal, whatif=whatif_at.get(t.run_id), compact=streaming, costs=alone,
                              fork_at=fork_marks.get(t.run_id), interactive=interactive and not streaming)
        if rendered is None:
            return render_run(t, options)
        key = f"{t.run_id}|{options!r}"
        if key not in rendered:
            rendered[key] = render_run(t, options)
        return rendered[key]

    columns = [column(t) for t in traces]
    if live is not None:
        columns.append(render_run(live, ViewOptions(signal=signal, live=True), live_tokens=live_tokens,
                                  live_purpose=live_purpose))
    columns += [refused_card(method, why) for method, why in refused or []]
    if not columns:
        return page(message or '<p class="dre-empty">Pick a question and methods, then press Run.</p>', busy=streaming)
    grid = f'<div class="dre-grid" data-runs="{len(columns)}">{"".join(columns)}</div>'
    compared = costs.render(traces) if len(traces) > 1 and not streaming else ""
    status = f'<div class="dre-message">{message}</div>' if message else ""
    top = link_line(traces, "these runs side by side") if interactive and len(traces) > 1 and not streaming else ""
    return page(status + top + grid + compared + below, busy=streaming)


def link_line(traces: list[Trace], what: str) -> str:
    """A line with the page's address of what is shown (the app only; an export has no app to open)."""
    href = run_link(*(t.run_id for t in traces))
    return (f'<p class="dre-linkline"><a class="dre-link" href="{esc(href)}">Link to {esc(what)}</a> '
            "(opens this view directly; add <code>&amp;present=1</code> to present it)</p>")


def page(body: str, *, busy: bool = False) -> str:
    """The root every view is wrapped in (the page script looks for charts below it)."""
    return f'<div class="dre-root" data-busy="{"1" if busy else "0"}">{body}</div>'


def render_comparison(traces: list[Trace], *, signal: str = "prob", whatif_at: Mapping[str, float] | None = None,
                      compact: bool = True, interactive: bool = False) -> str:
    """The comparison table (answers, triggers, queries, passages, costs, diff) above the runs themselves.

    When one of two runs is a fork of the other, the fork's panel (its token-level diff and what
    it replayed) comes first and the divergence is marked in both strips."""
    from explorer.ui.panels import compare
    from explorer.ui.panels import fork as fork_panel

    whatif_at = whatif_at or {}
    pair = fork_pair(traces)
    marks = {pair[0].run_id: (pair[1].fork or {}).get("at")} if pair else {}
    columns = "".join(render_run(t, ViewOptions(signal=signal, whatif=whatif_at.get(t.run_id), compact=compact,
                                                costs=False, fork_at=marks.get(t.run_id), interactive=interactive))
                      for t in traces)
    top = fork_panel.render(*pair) if pair else ""
    link = link_line(traces, "this comparison") if interactive else ""
    grid = f'<div class="dre-grid" data-runs="{len(traces)}">{columns}</div>'
    return page(link + top + compare.render(traces) + grid)


def fork_pair(traces: list[Trace]) -> tuple[Trace, Trace] | None:
    """(parent, fork) when the two runs are a fork and its parent, in either order; else None."""
    from explorer.ui.panels.fork import is_fork_of

    if len(traces) != 2:
        return None
    a, b = traces
    if is_fork_of(b, a):
        return a, b
    if is_fork_of(a, b):
        return b, a
    return None


def render_fork(parent: Trace, child: Trace, *, signal: str = "prob",
                whatif_at: Mapping[str, float] | None = None, family: str = "", interactive: bool = False) -> str:
    """A fork opened beside its parent: the fork panel (diffs, replayed costs), then the two runs, the
    divergence marked in both strips; ``family`` (the family tree's markup) goes last."""
    from explorer.ui.panels import fork as fork_panel

    whatif_at = whatif_at or {}
    at = (child.fork or {}).get("at")
    columns = [render_run(parent, ViewOptions(signal=signal, whatif=whatif_at.get(parent.run_id), compact=True,
                                              costs=False, fork_at=at, interactive=interactive)),
               render_run(child, ViewOptions(signal=signal, whatif=whatif_at.get(child.run_id), compact=True,
                                             costs=False, interactive=interactive))]
    grid = f'<div class="dre-grid dre-forkpair" data-runs="2">{"".join(columns)}</div>'
    link = link_line([parent, child], "the fork beside its parent") if interactive else ""
    return page(link + fork_panel.render(parent, child) + grid + costs.render([parent, child]) + family)
