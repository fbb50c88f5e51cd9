"""The view of stored runs with its own controls: colour signal, what-if threshold θ', links.

Used by the Run tab (for the runs just finished), the History tab (for reopened or compared
runs) and the Evaluations tab. It renders only from stored traces. The controls live inside the
view itself, beside what they change (the colour signal above the token strip, the what-if θ'
beside the decision chart): the page sends their values through a small hidden component
(``DRE.senders["PREFIX:view"]``) and the view is drawn again. Moving θ' replays the chosen run's
recorded checks (:mod:`explorer.whatif`) and redraws at once; nothing is generated again. With a
:class:`~explorer.ui.page.forkblock.Forker`, tokens and retrieval cards open the fork menu; a fork is
shown beside its parent, and a run with forks shows its family tree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.ui.page import forkblock

# Re-exported: the tabs reach a view's runs through the block they build.
from explorer.ui.page.shown_runs import (  # noqa: F401
    Shown,
    after_show,
    family_html,
    render,
    theta_update,
    traces,
)
from explorer.ui.runs.history import TraceCache
from explorer.ui.views.render import page
from explorer.ui.views.view import strip_signals

QUIET: dict[str, Any] = {"show_progress": "hidden", "api_visibility": "private", "queue": False}


@dataclass
class ViewBlock:
    #: The strip's colour signal, the what-if run and its θ' (page state, set from the view's own controls).
    signal: Any
    run: Any
    theta: Any
    html: Any
    state: Any
    #: The hidden component the view's controls send through.
    control: Any = None
    #: The fork request, open request and status line (:mod:`~explorer.ui.page.forkblock`).
    fork: Any = None


def read_control(text: str, signal: str, run: str | None, theta: float | None,
                 shown_ids: list[str]) -> tuple[str, str | None, float | None]:
    """The view's controls after a message from the page: ``{"signal"}``, ``{"whatif": {"run", "theta"}}``
    or ``{"whatif": null}``; anything else leaves them as they were."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return signal, run, theta
    if not isinstance(data, dict):
        return signal, run, theta
    if isinstance(data.get("signal"), str) and data["signal"] in strip_signals():
        signal = data["signal"]
    if "whatif" in data:
        wanted = data["whatif"]
        if not isinstance(wanted, dict):
            return signal, None, None
        value = wanted.get("theta")
        if str(wanted.get("run")) in shown_ids and isinstance(value, (int, float)) and math.isfinite(value):
            return signal, str(wanted["run"]), float(value)
    return signal, run, theta


def build(prefix: str, cache: TraceCache, head: str, intro: str, *, shown: Shown | None = None,
          forker: forkblock.Forker | None = None, on_fork: Callable[[Any], None] | None = None) -> ViewBlock:
    """Create the view and its hidden controls in the current layout and wire their events.

    ``shown``: runs the view opens with (rendered into the page itself, so they appear with it).
    ``forker``: the app's run controller, so that runs shown here can be forked from their tokens.
    ``on_fork``: wires the caller's own listeners to the fork request before the fork's (the page
    starts a trigger's listeners in order, and the fork streams until it is done).
    """
    start = traces(cache, shown) if shown is not None else []
    first_html = render(cache, shown.to_state(), "prob", None, None) if start and shown else page(intro)
    first_state = shown.to_state() if start and shown else {"ids": [], "compare": False}
    signal, run, theta = gr.State("prob"), gr.State(None), gr.State(None)
    control = gr.HTML("", html_template="<span hidden></span>", js_on_load=forkblock.sender_js(prefix, "view"),
                      elem_id=f"{prefix}-view-control", visible="hidden")
    fork_controls = forkblock.build(prefix)
    html = gr.HTML(first_html, head=head, js_on_load=forkblock.view_js(prefix, forker is not None),
                   elem_id=f"{prefix}-view", container=False,
                   server_functions=forkblock.menu_functions(cache, forker) if forker is not None else None)
    state = gr.State(first_state)

    def on_control(text: str, st: Any, sig: str, r: str | None, th: float | None) -> tuple[str, Any, Any, str]:
        sig, r, th = read_control(text, sig, r, th, Shown.of(st).ids)
        return sig, r, th, render(cache, st, sig, r, th)

    control.submit(on_control, [control, state, signal, run, theta], [signal, run, theta, html],
                   trigger_mode="always_last", **QUIET)
    block = ViewBlock(signal=signal, run=run, theta=theta, html=html, state=state, control=control,
                      fork=fork_controls)
    if on_fork is not None:
        on_fork(fork_controls)
    forkblock.wire(fork_controls, block, cache, forker)
    return block
