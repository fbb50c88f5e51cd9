"""The page's side of forks, for one view block: the menus' server calls, running a fork, opening a family member.

The token and retrieval menus live in the page (``assets/explorer.js``); they ask the server
which actions :func:`explorer.forks.resolve` accepts at that point (:func:`menu_functions`, called
from the view's own script) and send the chosen fork as a JSON request through a small hidden
component whose ``submit`` event runs :meth:`RunController.stream_fork` on the model's queue slot.
The fork streams beside its parent and then opens with the diff panel. Family-tree nodes send
their run id the same way to open it (beside its parent when it is a fork).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError, public_message
from explorer.ui.page import shown_runs
from explorer.ui.runs import forking
from explorer.ui.runs.controller import RunController, status_html
from explorer.ui.runs.history import TraceCache
from explorer.ui.serving.admission import EVENT_LIMIT

log = logging.getLogger("explorer.ui")

MODEL_QUEUE = "model"
QUIET: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}


@dataclass
class Forker:
    """What a view block needs to fork runs: the app's run controller (its model and store)."""

    controller: RunController


def sender_js(prefix: str, name: str) -> str:
    """The script of a request component: the page calls ``DRE.senders["PREFIX:NAME"](object)``."""
    key = json.dumps(f"{prefix}:{name}")
    return ("window.DRE = window.DRE || {}; window.DRE.senders = window.DRE.senders || {};"
            f"window.DRE.senders[{key}] = (o) => {{ props.value = JSON.stringify(o); trigger('submit'); }};")


def view_js(prefix: str, forks: bool) -> str:
    """The view's script: draw charts, send its controls' values, and let tokens and retrieval cards open
    the fork menu (``assets/explorer.js`` does the work)."""
    bound = json.dumps({"prefix": prefix, "forks": forks})
    return (f"const bound = Object.assign({bound}, {{server: (typeof server === 'undefined') ? null : server}});"
            "const draw = () => { if (!window.DRE || !window.DRE.prepareView) { setTimeout(draw, 100); return; }"
            " window.DRE.render(element); window.DRE.prepareView(element, bound); };"
            "for (const kind of ['click', 'keydown', 'change', 'input']) {"
            " element.addEventListener(kind, (e) => window.DRE && window.DRE.viewEvent && "
            "window.DRE.viewEvent(e, element, bound)); }"
            "watch('value', draw); draw();")


def _error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, ExplorerError):
        return {"error": public_message(exc)}
    log.exception("a fork menu call failed")
    return {"error": f"internal error ({type(exc).__name__}); the server log has the details"}


def menu_functions(cache: TraceCache, forker: Forker) -> list[Callable[..., Any]]:
    """The server calls of the view's script (each takes the list of arguments the page passed)."""

    def fork_menu(args: list[Any]) -> dict[str, Any]:
        """The actions the fork point accepts: ``[run_id, {"span", "token"} | {"retrieval"}]``."""
        try:
            run_id, where = (list(args or []) + [None, None])[:2]
            if not run_id or run_id == "live":
                raise ExplorerError("this run is still being written", where="fork",
                                    fix="wait until it is stored, then open the menu again")
            return forking.menu(cache.get(str(run_id)), where if isinstance(where, dict) else {})
        except Exception as exc:  # noqa: BLE001 - the page shows one line
            return _error(exc)

    def find_passages(args: list[Any]) -> dict[str, Any]:
        """Passages of the corpus for the passage editor: ``[run_id, text]``."""
        try:
            run_id, text = (list(args or []) + [None, None])[:2]
            holder = forker.controller.runtime
            if not holder.ready:
                raise ExplorerError("the model and corpus are still loading", where="passage search",
                                    fix="try again in a moment")
            runtime = forker.controller.fork_runtime(cache.get(str(run_id)))
            return {"passages": forking.search_passages(runtime.retriever, str(text or ""))}
        except Exception as exc:  # noqa: BLE001
            return _error(exc)

    return [fork_menu, find_passages]


@dataclass
class ForkControls:
    request: Any
    opener: Any
    status: Any


def build(prefix: str) -> ForkControls:
    """The hidden request components and the line that says how a fork went."""
    hidden = "<span hidden></span>"
    request = gr.HTML("", html_template=hidden, js_on_load=sender_js(prefix, "fork"), elem_id=f"{prefix}-fork-request",
                      visible="hidden")
    opener = gr.HTML("", html_template=hidden, js_on_load=sender_js(prefix, "open"), elem_id=f"{prefix}-open-request",
                     visible="hidden")
    status = gr.HTML("", elem_id=f"{prefix}-fork-status", js_on_load=None)
    return ForkControls(request, opener, status)


def wire(controls: ForkControls, view: Any, cache: TraceCache, forker: Forker | None) -> None:
    """Fork requests stream the fork beside its parent; open requests show a family member."""
    outputs = [view.html, view.state, view.run, view.theta, controls.status]
    skip = (gr.skip(), gr.skip(), gr.skip(), gr.skip())

    def on_open(text: str, signal: str) -> tuple:
        try:
            data = json.loads(text or "{}")
            run_id = str(data.get("run_id") or "") if isinstance(data, dict) else ""
            trace = cache.get(run_id)
            parent = (trace.fork or {}).get("parent")
            shown = shown_runs.Shown([run_id])
            if parent:
                try:
                    cache.get(parent)
                    shown = shown_runs.Shown([parent, run_id], fork=True)
                except ExplorerError:
                    pass  # the parent is gone: the fork alone
            what = "Opened beside its parent." if shown.fork else "Opened."
            return (*shown_runs.after_show(cache, shown, signal), status_html(f"{what} Run {run_id[:12]}."))
        except (ExplorerError, ValueError) as exc:
            message = public_message(exc) if isinstance(exc, ExplorerError) else "the request was not understood"
            return (*skip, status_html(message, error=True))

    controls.opener.submit(on_open, [controls.opener, view.signal], outputs, queue=False, **QUIET)
    if forker is None:
        return

    def on_fork(text: str, signal: str, request: gr.Request) -> Iterator[tuple]:
        try:
            plan = forking.plan_from_request(text)
            parent = cache.get(plan.parent)
            for update in forker.controller.stream_fork(parent, plan, session=request.session_hash or "anonymous",
                                                        signal=signal):
                if not update.done:  # "" while the fork's model loads: the view stays, the status counts on
                    yield update.html or gr.skip(), gr.skip(), gr.skip(), gr.skip(), update.status
                    continue
                child = update.run_ids[-1] if update.run_ids else None
                shown = shown_runs.Shown([parent.run_id, child], fork=True) if child else \
                    shown_runs.Shown([parent.run_id])
                status = update.status if not child or "dre-error" in update.status else status_html(
                    f"Fork {child[:12]} stored; it is shown beside its parent {parent.run_id[:12]} with the diff "
                    f"({plan.describe()}).")
                yield (*shown_runs.after_show(cache, shown, signal), status)
        except ExplorerError as exc:
            yield (*skip, status_html(public_message(exc), error=True))

    controls.request.submit(on_fork, [controls.request, view.signal], outputs, concurrency_limit=EVENT_LIMIT,
                            concurrency_id=MODEL_QUEUE, **QUIET)
