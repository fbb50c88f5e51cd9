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
from explorer.ui.html import esc
from explorer.ui.panels import costs, filtering, header, query, retrievals, signals, stages, strip, uncertainty
from explorer.ui.view import TraceView, ViewOptions


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


def render_run(trace: Trace, opts: ViewOptions, *, live_tokens: list[dict[str, Any]] | None = None,
               live_purpose: str = "") -> str:
    """One run as a column of panels; ``opts.live`` keeps it light while tokens stream in."""
    view = TraceView(trace, live_tokens=live_tokens, live_purpose=live_purpose)
    signal = decision_signal(trace)
    decisions = (whatif.replay(trace.events, opts.whatif, signal=signal)
                 if opts.whatif is not None and signal is not None else [])
    parts = [header.render(view, opts), strip.render(view, opts, decisions)]
    if opts.live:
        parts.append(retrievals.render(view, replace(opts, compact=True)))
    else:
        parts += [signals.render(view, opts, decisions, signal), query.render(view, opts),
                  retrievals.render(view, opts), uncertainty.render(view, opts), filtering.render(view, opts),
                  stages.render(view, opts)]
        if opts.costs:
            parts.append(costs.render([trace]))
    state = "live" if opts.live else "done"
    return (f'<article class="dre-run" id="dre-run-{view.key}" data-run="{esc(trace.run_id)}" '
            f'data-method="{esc(trace.method)}" data-status="{esc(trace.status)}" data-view="{state}">'
            f'{"".join(p for p in parts if p)}</article>')


def render_runs(traces: list[Trace], *, signal: str = "prob", whatif_at: Mapping[str, float] | None = None,
                live: Trace | None = None, live_tokens: list[dict[str, Any]] | None = None, live_purpose: str = "",
                message: str = "") -> str:
    """Runs side by side (and the one still running, if any), with their costs compared below."""
    whatif_at = whatif_at or {}
    streaming = live is not None
    alone = len(traces) == 1 and live is None
    columns = [render_run(t, ViewOptions(signal=signal, whatif=whatif_at.get(t.run_id), compact=streaming,
                                         costs=alone))
               for t in traces]
    if live is not None:
        columns.append(render_run(live, ViewOptions(signal=signal, live=True), live_tokens=live_tokens,
                                  live_purpose=live_purpose))
    if not columns:
        return page(message or '<p class="dre-empty">Pick a question and methods, then press Run.</p>')
    grid = f'<div class="dre-grid" data-runs="{len(columns)}">{"".join(columns)}</div>'
    below = costs.render(traces) if len(traces) > 1 and not streaming else ""
    status = f'<div class="dre-message">{message}</div>' if message else ""
    return page(status + grid + below, busy=streaming)


def page(body: str, *, busy: bool = False) -> str:
    """The root every view is wrapped in (the page script looks for charts below it)."""
    return f'<div class="dre-root" data-busy="{"1" if busy else "0"}">{body}</div>'


def render_comparison(traces: list[Trace], *, signal: str = "prob", whatif_at: Mapping[str, float] | None = None,
                      compact: bool = True) -> str:
    """The comparison table (answers, triggers, queries, passages, costs, diff) above the runs themselves."""
    from explorer.ui.panels import compare

    whatif_at = whatif_at or {}
    columns = "".join(render_run(t, ViewOptions(signal=signal, whatif=whatif_at.get(t.run_id), compact=compact,
                                                costs=False))
                      for t in traces)
    return page(compare.render(traces) + f'<div class="dre-grid" data-runs="{len(traces)}">{columns}</div>')
