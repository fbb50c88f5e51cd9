"""The app's scripting API (``gradio_client``): ``/run`` a method on a question, ``/fetch_run`` a stored trace.

::

    from gradio_client import Client
    client = Client("http://127.0.0.1:7860/")
    summary = client.predict("Who lived longer, ...?", "dragin", "paper", '{"threshold": 0.3}', api_name="/run")
    trace = client.predict(summary["run_id"], api_name="/fetch_run")
    client.predict(api_name="/status")  # {"state": "ready", "message": ..., "forward_passes": N}

``/run`` shares the model's queue slot with the browser's Run button, so scripted and
interactive runs never use the model at once. Bad input comes back as an error carrying the
config's message (what, where, how to fix it); messages name no file or folder of the server,
whose log keeps the full text.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from typing import Any, TypedDict

import gradio as gr

from explorer.errors import ExplorerError, hide_paths, json_problem, public_message
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.controller import RunController
from explorer.ui.controls import RunSpec, build_specs, params

log = logging.getLogger("explorer.ui")
MAX_RUN_ID = 64
#: The scripting API: these endpoints and no others are public (every other event is the page's own).
ENDPOINTS = ("/run", "/status", "/fetch_run")


class RunCosts(TypedDict):
    """What a run cost, as counted by the engine (the trace's ``costs``)."""

    retrievals: int
    llm_calls: int
    forward_passes: int
    generated_tokens: int
    discarded_tokens: int
    sampled_sequences: int
    prompt_tokens: int
    wall_time: dict[str, float]
    total_time: float


class RunSummary(TypedDict):
    """``/run``'s answer: enough to judge the run at a glance; ``/fetch_run`` gives the whole trace."""

    run_id: str
    status: str
    answer: str
    output: str
    error: str | None
    costs: RunCosts


class ModelStatus(TypedDict):
    """``/status``'s answer."""

    state: str
    message: str
    forward_passes: int


def typed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Resolve a function's string annotations (this module postpones them) so that gradio's API
    description shows the real return schema instead of ``Any``."""
    fn.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return fn


def client_error(exc: ExplorerError, where: str | None = None) -> gr.Error:
    """The error a client sees (no server paths); the full message goes to the server log."""
    shown = public_message(exc, where)
    if shown != exc.message:
        log.info("API error (shown to the client as %r): %s", shown, exc.message)
    return gr.Error(shown, print_exception=False)


def guarded(where: str, fn: Callable[[], Any]) -> Any:
    """Run an endpoint's body: user errors become client errors, anything else is logged and summarised."""
    try:
        return fn()
    except ExplorerError as exc:
        raise client_error(exc, where) from None
    except Exception as exc:  # noqa: BLE001 - the client gets one line, the log the traceback
        log.exception("API call failed")
        raise gr.Error(f"internal error ({type(exc).__name__}); the server log has the details",
                       print_exception=False) from None


def _text(value: Any, where: str, example: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ExplorerError(f"expected text, got {type(value).__name__}", where=where,
                            fix=f"pass a string, e.g. {example}")
    return value


def _settings(method: str, text: str) -> dict[tuple[str, str], Any]:
    text = _text(text, "settings", '\'{"threshold": 0.3}\'')
    try:
        values = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ExplorerError(f"settings are not valid JSON ({json_problem(exc)})", where="settings",
                            fix='give an object such as {"threshold": 0.3}') from None
    if not isinstance(values, dict):
        raise ExplorerError("settings must be a JSON object", where="settings", fix='e.g. {"threshold": 0.3}')
    known = {p.name for p in params(method)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ExplorerError(f"unknown setting(s) {', '.join(unknown)} for {method}", where="settings",
                            fix=f"known: {', '.join(sorted(known))}")
    return {(method, k): v for k, v in values.items()}


def run_settings(controller: RunController, model: str, question: str, method: str, variant: str,
                 settings: str) -> Trace:
    """What ``/run`` does: the settings JSON holds the user's values, resolved by the run like ``--set``'s."""
    spec: RunSpec = build_specs([method], {method: variant}, _settings(method, settings), model=model,
                                explicit=True)[0]
    return controller.run_one(question, spec)


def register(controller: RunController, store: RunStore, model: str) -> None:
    """Add the named endpoints to the Blocks being built."""

    def run(question: str, method: str = "dragin", variant: str = "", settings: str = "{}") -> RunSummary:
        """Run one method on one question, store the run, and return its id, status, answer and costs.

        Args:
            question: the question text
            method: a method name (wo, sr, fl, fs, flare, dragin, seakr, blendfilter, drrag)
            variant: paper or reference (empty: the method's default)
            settings: a JSON object of the method's settings, e.g. {"threshold": 0.3}
        """
        def body() -> RunSummary:
            name = _text(method, "method", "'dragin'").strip()
            chosen = _text(variant, "variant", "'paper'").strip()
            trace = run_settings(controller, model, _text(question, "question", "'Who wrote Hamlet?'"), name, chosen,
                                 settings)
            costs: RunCosts = trace.costs.to_dict()  # type: ignore[assignment]
            return {"run_id": trace.run_id, "status": trace.status, "answer": trace.answer, "output": trace.output,
                    "error": hide_paths(trace.error), "costs": costs}

        return guarded("run", body)

    def fetch_run(run_id: str) -> dict[str, Any]:
        """The full stored trace of a run, as JSON (its schema: docs/trace.md).

        Args:
            run_id: the run_id that /run returned (or one shown in History)
        """
        def body() -> dict[str, Any]:
            key = _text(run_id, "run_id", "the run_id that /run returned").strip()
            if not key:
                raise ExplorerError("no run id given", where="run_id", fix="pass the run_id that /run returned")
            if len(key) > MAX_RUN_ID:
                raise ExplorerError(f"{len(key)} characters is too long for a run id", where="run_id",
                                    fix="pass the run_id that /run returned (32 hex digits)")
            return store.get(key).to_dict()

        return guarded("run_id", body)

    def status() -> ModelStatus:
        """Whether the model is loaded, and how many forward passes it has made since (0 until ready)."""
        holder = controller.runtime
        return {"state": holder.state, "message": holder.status(), "forward_passes": holder.forward_passes}

    gr.api(typed(run), api_name="run", concurrency_limit=1, concurrency_id="model")
    gr.api(typed(status), api_name="status")
    gr.api(typed(fetch_run), api_name="fetch_run")
