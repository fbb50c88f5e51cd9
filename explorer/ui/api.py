"""The app's scripting API (``gradio_client``): ``/run`` a method on a question, ``/fetch_run`` a stored trace.

::

    from gradio_client import Client
    client = Client("http://127.0.0.1:7860/")
    summary = client.predict("Who lived longer, ...?", "dragin", "paper", '{"threshold": 0.3}', api_name="/run")
    trace = client.predict(summary["run_id"], api_name="/fetch_run")

``/run`` shares the model's queue slot with the browser's Run button, so scripted and
interactive runs never use the model at once. Bad input comes back as an error carrying the
config's message.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.controller import RunController
from explorer.ui.controls import RunSpec, build_specs, params


def _settings(method: str, text: str) -> dict[tuple[str, str], Any]:
    try:
        values = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ExplorerError(f"settings are not valid JSON: {exc.msg}", where="settings",
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

    def run(question: str, method: str = "dragin", variant: str = "", settings: str = "{}") -> dict[str, Any]:
        """Run one method on one question, store the run, and return its id, status, answer and costs."""
        try:
            trace = run_settings(controller, model, question, method, variant, settings)
        except ExplorerError as exc:
            raise gr.Error(exc.message, print_exception=False) from None
        return {"run_id": trace.run_id, "status": trace.status, "answer": trace.answer, "output": trace.output,
                "error": trace.error, "costs": trace.costs.to_dict()}

    def fetch_run(run_id: str) -> dict[str, Any]:
        """The full stored trace of a run, as JSON."""
        try:
            return store.get(run_id.strip()).to_dict()
        except ExplorerError as exc:
            raise gr.Error(exc.message, print_exception=False) from None

    gr.api(run, api_name="run", concurrency_limit=1, concurrency_id="model")
    gr.api(fetch_run, api_name="fetch_run")
