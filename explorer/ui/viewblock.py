"""The view of stored runs with its own controls: colour signal, what-if run and threshold θ'.

Used by the Run tab (for the runs just finished) and the History tab (for reopened or compared
runs). It renders only from stored traces. Moving θ' replays the chosen run's recorded checks
(:mod:`explorer.whatif`) and redraws at once; nothing is generated again. With a
:class:`~explorer.ui.forkblock.Forker`, tokens and retrieval cards open the fork menu; a fork
is shown beside its parent, and a run with forks shows its family tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError
from explorer.trace import Trace
from explorer.ui import forkblock
from explorer.ui.history import TraceCache
from explorer.ui.panels.costs import run_labels
from explorer.ui.panels.fork import render_family
from explorer.ui.render import decision_signal, page, recorded_threshold, render_comparison, render_fork, render_runs
from explorer.ui.view import strip_signals


@dataclass
class Shown:
    """Which stored runs a view shows, and whether as a comparison."""

    ids: list[str]
    compare: bool = False
    #: ``ids`` are a parent and its fork, shown with the fork's diff.
    fork: bool = False

    def to_state(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "compare": self.compare, "fork": self.fork}

    @classmethod
    def of(cls, state: Any) -> Shown:
        if isinstance(state, dict):
            return cls(ids=list(state.get("ids") or []), compare=bool(state.get("compare")),
                       fork=bool(state.get("fork")))
        return cls(ids=[])


@dataclass
class ViewBlock:
    signal: Any
    run: Any
    theta: Any
    reset: Any
    html: Any
    state: Any


def traces(cache: TraceCache, shown: Shown) -> list[Trace]:
    out = []
    for run_id in shown.ids:
        try:
            out.append(cache.get(run_id))
        except Exception:  # deleted meanwhile: show the rest
            continue
    return out


def render(cache: TraceCache, state: Any, signal: str, run: str | None, theta: float | None) -> str:
    shown = Shown.of(state)
    found = traces(cache, shown)
    if not found:
        return render_runs([])
    whatif_at = {run: float(theta)} if run and theta is not None else {}
    if shown.compare and len(found) > 1:
        return render_comparison(found, signal=signal, whatif_at=whatif_at)
    if shown.fork and len(found) == 2:
        return render_fork(found[0], found[1], signal=signal, whatif_at=whatif_at,
                           family=family_html(cache, found[1].run_id))
    family = family_html(cache, found[0].run_id) if len(found) == 1 else ""
    return render_runs(found, signal=signal, whatif_at=whatif_at, below=family)


def family_html(cache: TraceCache, run_id: str) -> str:
    """The family tree of a stored run when it has forks or is one ('' for a run alone or not stored)."""
    try:
        return render_family(cache.store.family(run_id), current=run_id)
    except ExplorerError:
        return ""


def whatif_choices(found: list[Trace]) -> list[tuple[str, str]]:
    labels = run_labels(found)
    return [(f"{label} ({decision_signal(t)})", t.run_id) for label, t in zip(labels, found, strict=True)
            if decision_signal(t) is not None]


def theta_update(cache: TraceCache, run: str | None) -> Any:
    """The θ' slider for a run: spanning its recorded values, starting at its recorded threshold."""
    if not run:
        return gr.update(visible=False, value=None)
    trace = cache.get(run)
    signal = decision_signal(trace)
    values = [float(u["value"]) for e in trace.events if e.kind == "check" and e.payload.get("signal") == signal
              for u in e.payload.get("units") or []
              if isinstance(u.get("value"), (int, float)) and math.isfinite(u["value"])]
    theta = recorded_threshold(trace) or 0.0
    lo = min([0.0, theta, *values])
    hi = max([theta * 2 if theta > 0 else 1.0, *values]) * 1.05
    step = max((hi - lo) / 400, 1e-4)
    return gr.update(visible=True, minimum=round(lo, 6), maximum=round(hi, 6), step=step, value=theta,
                     label=f"what-if θ' ({signal}; recorded θ = {theta:g})")


def after_show(cache: TraceCache, shown: Shown, signal: str) -> tuple[Any, Any, Any, Any]:
    """Updates for (html, state, what-if run, θ') when a view starts showing other runs."""
    found = traces(cache, shown)
    html = render(cache, shown.to_state(), signal, None, None)
    choices = whatif_choices(found)
    return html, shown.to_state(), gr.update(choices=choices, value=None, interactive=bool(choices)), \
        gr.update(visible=False, value=None)


def build(prefix: str, cache: TraceCache, head: str, intro: str, *, shown: Shown | None = None,
          forker: forkblock.Forker | None = None) -> ViewBlock:
    """Create the controls and the HTML view in the current layout and wire their events.

    ``shown``: runs the view opens with (rendered into the page itself, so they appear with it).
    ``forker``: the app's run controller, so that runs shown here can be forked from their tokens.
    """
    start = traces(cache, shown) if shown is not None else []
    first_html = render(cache, shown.to_state(), "prob", None, None) if start and shown else page(intro)
    first_state = shown.to_state() if start and shown else {"ids": [], "compare": False}
    first_choices = whatif_choices(start)
    with gr.Row(equal_height=True):
        signal = gr.Dropdown([(label, key) for key, (label, _) in strip_signals().items()], value="prob",
                             label="Colour tokens by", elem_id=f"{prefix}-signal", scale=1, min_width=160)
        run = gr.Dropdown(first_choices, value=None, label="What-if on run", elem_id=f"{prefix}-whatif-run",
                          scale=2, interactive=bool(first_choices),
                          info="replays its recorded decisions at another threshold")
        theta = gr.Slider(0, 1, value=None, label="what-if θ'", visible=False, elem_id=f"{prefix}-theta", scale=3)
        reset = gr.Button("Clear what-if", size="sm", elem_id=f"{prefix}-whatif-clear", scale=0, min_width=110)
    fork_controls = forkblock.build(prefix)
    html = gr.HTML(first_html, head=head, js_on_load=forkblock.view_js(prefix, forker is not None),
                   elem_id=f"{prefix}-view", container=False,
                   server_functions=forkblock.menu_functions(cache, forker) if forker is not None else None)
    state = gr.State(first_state)

    def redraw(st: Any, sig: str, r: str | None, th: float | None) -> str:
        return render(cache, st, sig, r, th)

    def pick(st: Any, sig: str, r: str | None) -> tuple[Any, str]:
        update = theta_update(cache, r)
        th = None if not r else recorded_threshold(cache.get(r))
        return update, render(cache, st, sig, r, th)

    def clear(st: Any, sig: str) -> tuple[Any, Any, str]:
        return gr.update(value=None), gr.update(visible=False, value=None), render(cache, st, sig, None, None)

    quiet: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private", "queue": False}
    signal.change(redraw, [state, signal, run, theta], html, **quiet)
    run.input(pick, [state, signal, run], [theta, html], **quiet)
    theta.change(redraw, [state, signal, run, theta], html, trigger_mode="always_last", **quiet)
    reset.click(clear, [state, signal], [run, theta, html], **quiet)
    block = ViewBlock(signal=signal, run=run, theta=theta, reset=reset, html=html, state=state)
    forkblock.wire(fork_controls, block, cache, forker)
    return block
