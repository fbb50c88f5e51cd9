"""The app's scripting API (``gradio_client``): ``/run`` a method on a question, ``/fetch_run`` a stored trace,
``/fork`` a stored run at a token or a retrieval.

::

    from gradio_client import Client
    client = Client("http://127.0.0.1:7860/")
    summary = client.predict("Who lived longer, ...?", "dragin", "paper", '{"threshold": 0.3}', api_name="/run")
    trace = client.predict(summary["run_id"], api_name="/fetch_run")
    client.predict(api_name="/status")  # {"state": "ready", "message": ..., "forward_passes": N}
    fork = client.predict(summary["run_id"], "7:3", None, "force_retrieval", api_name="/fork")
    fork["fork"]["same_answer"], fork["fork"]["parent_event"]  # where it diverged, whether the answer moved

``/run`` waits its turn in the same line as the browser's Run button (a few runs at once, decoded
as one batch; the rest in line, told their place and an estimate), and takes an
``idempotency_key`` so a retried call returns the run the first call made. Bad input comes back as an error carrying the
config's message (what, where, how to fix it); messages name no file or folder of the server,
whose log keeps the full text.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import logging
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import gradio as gr

from explorer.errors import ExplorerError, NotFound, check_text, json_problem, parse_json, public_message
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.page.controls import RunSpec, build_specs, params
from explorer.ui.runs.controller import RunController
from explorer.ui.runs.jobs import ApiRuns, check_key
from explorer.ui.serving.admission import EVENT_LIMIT, client_of
from explorer.ui.serving.guard import BAD_REQUEST, NOT_FOUND, SERVER_ERROR

log = logging.getLogger("explorer.ui")
MAX_RUN_ID = 64
#: The scripting API: these endpoints and no others are public (every other event is the page's own).
ENDPOINTS = ("/run", "/status", "/fetch_run", "/fork")


class RunCosts(TypedDict):
    """What a run cost, as counted by the engine (the trace's ``costs``)."""

    retrievals: int
    llm_calls: int
    forward_passes: int
    generated_tokens: int
    discarded_tokens: int
    sampled_sequences: int
    prompt_tokens: int
    replayed_spans: int
    replayed_tokens: int
    reused_retrievals: int
    wall_time: dict[str, float]
    total_time: float


class RunSummary(TypedDict):
    """``/run``'s answer: enough to judge the run at a glance; ``/fetch_run`` gives the whole trace.

    While the call waits its turn, ``/run`` streams the same shape with ``status`` ``queued``, its
    ``queue_position`` (1 = next) and ``estimate_seconds``; while the run goes, ``running`` and its
    ``run_id``; the last answer is the stored run (``queue_position`` 0).
    """

    run_id: str
    status: str
    answer: str
    output: str
    error: str | None
    costs: RunCosts
    queue_position: int
    estimate_seconds: float | None
    message: str


class ForkFacts(TypedDict):
    """Where a fork came from and how it differs from its parent (:func:`explorer.forks.diff.diff_runs`)."""

    parent_run_id: str
    root_run_id: str
    depth: int
    at: dict[str, int]
    change: dict[str, Any]
    parent_event: int | None
    child_event: int | None
    same_answer: bool
    first_difference: int | None
    parent_answer: str


class ForkSummary(RunSummary):
    """``/fork``'s answer: the fork's RunSummary fields plus its fork facts."""

    fork: ForkFacts


class ModelStatus(TypedDict):
    """``/status``'s answer: the model, and the runs using it and waiting for it."""

    state: str
    message: str
    forward_passes: int
    running: int
    waiting: int


def typed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Resolve a function's string annotations (this module postpones them) so that gradio's API
    description shows the real return schema instead of ``Any``; a generator's is what it yields."""
    signature = inspect.signature(fn, eval_str=True)
    answer = signature.return_annotation
    if typing.get_origin(answer) in (Iterator, collections.abc.Generator):
        signature = signature.replace(return_annotation=typing.get_args(answer)[0])
    fn.__signature__ = signature  # type: ignore[attr-defined]
    return fn


def client_error(exc: ExplorerError, where: str | None = None) -> gr.Error:
    """The error a client sees (no server paths); the full message goes to the server log."""
    shown = public_message(exc, where)
    if shown != exc.message:
        log.info("API error (shown to the client as %r): %s", shown, exc.message)
    # The title tells the guard which HTTP status the synchronous routes answer with (404, else 400).
    return gr.Error(shown, title=NOT_FOUND if isinstance(exc, NotFound) else BAD_REQUEST, print_exception=False)


def guarded(where: str, fn: Callable[[], Any]) -> Any:
    """Run an endpoint's body: user errors become client errors, anything else is logged and summarised."""
    try:
        return fn()
    except ExplorerError as exc:
        raise client_error(exc, where) from None
    except Exception as exc:  # noqa: BLE001 - the client gets one line, the log the traceback
        log.exception("API call failed")
        raise gr.Error(f"internal error ({type(exc).__name__}); the server log has the details",
                       title=SERVER_ERROR, print_exception=False) from None


def _text(value: Any, where: str, example: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ExplorerError(f"expected text, got {type(value).__name__}", where=where,
                            fix=f"pass a string, e.g. {example}")
    return check_text(value, where)


def _settings(method: str, text: str) -> dict[tuple[str, str], Any]:
    text = _text(text, "settings", '\'{"threshold": 0.3}\'')
    try:
        values = parse_json(text or "{}")
    except json.JSONDecodeError as exc:
        raise ExplorerError(f"settings are not valid JSON ({json_problem(exc)})", where="settings",
                            fix='give an object such as {"threshold": 0.3}') from None
    if not isinstance(values, dict):
        raise ExplorerError("settings must be a JSON object", where="settings", fix='e.g. {"threshold": 0.3}')
    check_text(json.dumps(values, ensure_ascii=False), "settings")  # a "\\udcff" escape decodes to no character
    known = {p.name for p in params(method)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ExplorerError(f"unknown setting(s) {', '.join(unknown)} for {method}", where="settings",
                            fix=f"known: {', '.join(sorted(known))}")
    return {(method, k): v for k, v in values.items()}


def run_spec(model: str, method: str, variant: str, settings: str) -> RunSpec:
    """What ``/run`` runs: the settings JSON holds the user's values, resolved by the run like ``--set``'s."""
    return build_specs([method], {method: variant}, _settings(method, settings), model=model, explicit=True)[0]


def run_settings(controller: RunController, model: str, question: str, method: str, variant: str,
                 settings: str) -> Trace:
    """``/run``'s run made at once, without its place in line (for callers that already hold one)."""
    return controller.run_one(question, run_spec(model, method, variant, settings))


def _summary(trace: Trace) -> dict[str, Any]:
    from explorer.ui.runs.jobs import summary

    return summary(trace)


def _run_key(run_id: Any) -> str:
    key = _text(run_id, "run_id", "the run_id that /run returned").strip()
    if not key:
        raise ExplorerError("no run id given", where="run_id", fix="pass the run_id that /run returned")
    if len(key) > MAX_RUN_ID:
        raise ExplorerError(f"{len(key)} characters is too long for a run id", where="run_id",
                            fix="pass the run_id that /run returned (32 hex digits)")
    return key


def fork_plan(run_id: Any, at: Any, retrieval: Any, change: Any, query: Any, params: Any, passages: Any) -> Any:
    """What ``/fork`` forks: the point from ``at`` or ``retrieval``, the change as a kind or JSON plus typed fields."""
    from explorer.forks import ForkPlan
    from explorer.ui.runs import forking

    point = forking.point_of(at=_text(at, "at", "'7:3'").strip() if retrieval in (None, "", -1) else None,
                             retrieval=retrieval)
    return ForkPlan(parent=_run_key(run_id), point=point,
                    change=forking.change_of(_text(change, "change", "'force_retrieval'") or "none",
                                             query=_text(query, "query", "'who built the arena'") or None,
                                             params=_text(params, "params", "'threshold=0.8'"),
                                             passages=_text(passages, "passages", "'id1, id2'") or None))


def _model_status(controller: RunController) -> ModelStatus:
    """The model's state and the line for it, as ``/status`` reports them."""
    holder = controller.runtime
    return {"state": holder.state, "message": holder.status(), "forward_passes": holder.forward_passes,
            "running": controller.gate.running, "waiting": controller.gate.waiting}


def _fork_summary(parent: Trace, child: Trace, plan: Any) -> ForkSummary:
    """What ``/fork`` returns: the stored fork's summary and how it relates to its parent."""
    from explorer.forks.diff import diff_runs

    d = diff_runs(parent, child)
    family = child.fork or {}
    facts: ForkFacts = {"parent_run_id": parent.run_id, "root_run_id": str(family.get("root") or ""),
                        "depth": int(family.get("depth") or 1), "at": plan.point.to_dict(),
                        "change": plan.change.to_dict(), "parent_event": d.parent_event,
                        "child_event": d.child_event, "same_answer": d.same_answer,
                        "first_difference": d.first_difference, "parent_answer": parent.answer or ""}
    return {**_summary(child), "fork": facts}  # type: ignore[typeddict-item]


def register(controller: RunController, store: RunStore, model: str, *, cache: Any = None) -> None:
    """Add the named endpoints to the Blocks being built (``cache``: stored and recorded runs by id, for /fork)."""

    runs = ApiRuns(controller)

    def run(question: str, method: str = "dragin", variant: str = "", settings: str = "{}",
            idempotency_key: str = "", request: gr.Request = None) -> Iterator[RunSummary]:  # type: ignore[assignment]
        """Run one method on one question, store the run, and return its id, status, answer and costs.

        The call waits its turn when the model is busy, streaming its place in line and an estimate
        (status "queued"), then the run id (status "running"); the last answer is the stored run. A run
        that has started completes and is stored even if the caller goes away.

        Args:
            question: the question text
            method: a method name (wo, sr, fl, fs, flare, dragin, seakr, blendfilter, drrag, etc, targ)
            variant: paper or reference (empty: the method's default)
            settings: a JSON object of the method's settings, e.g. {"threshold": 0.3}
            idempotency_key: any text unique to this request (a UUID); a retried call with the same key returns the
                run the first call made (waiting for it if it still runs) instead of starting another
        """
        def start() -> Any:
            name = _text(method, "method", "'dragin'").strip()
            chosen = _text(variant, "variant", "'paper'").strip()
            text = _text(question, "question", "'Who wrote Hamlet?'")
            spec = run_spec(model, name, chosen, settings)
            return runs.submit(text, spec, client=client_of(request), key=check_key(idempotency_key))

        job = guarded("run", start)
        updates = runs.updates(job)
        while True:
            update = guarded("run", lambda: next(updates, None))
            if update is None:
                return
            yield update  # type: ignore[misc]

    def fetch_run(run_id: str) -> dict[str, Any]:
        """The full stored trace of a run, as JSON (its schema: docs/trace.md).

        Args:
            run_id: the run_id that /run returned (or one shown in History)
        """
        def body() -> dict[str, Any]:
            return store.get(_run_key(run_id)).to_dict()

        return guarded("run_id", body)

    def status() -> ModelStatus:
        """Whether the model is loaded, how many forward passes it has made since (0 until ready), and how many runs
        use it and wait for it."""
        return _model_status(controller)

    def fork(run_id: str, at: str = "", retrieval: int | None = None, change: str = "none", query: str = "",
             params: str = "", passages: str = "", request: gr.Request = None) -> ForkSummary:  # type: ignore[assignment]
        """Fork a stored run: replay it up to a point, continue live with one change; store and summarise the fork.

        Args:
            run_id: the run to fork (a run_id that /run returned, or one shown in History)
            at: a generated token as SPAN:TOKEN (the generation event id and the token index in it)
            retrieval: instead of at, a retrieval event id (for suppress_retrieval, edit_query, edit_passages)
            change: force_retrieval, suppress_retrieval, edit_query, edit_passages, set_params or none; or a JSON
                object {"kind": ..., "query": ..., "params": {...}, "passages": [...]}
            query: the forced or edited query (force_retrieval: empty uses the method's own query rule)
            params: set_params' values as JSON or NAME=VALUE pairs, e.g. threshold=0.8
            passages: edit_passages' passage ids in the order the model gets them, comma-separated or a JSON list
        """
        def body() -> ForkSummary:
            plan = fork_plan(run_id, at, retrieval, change, query, params, passages)
            parent = cache.get(plan.parent) if cache is not None else store.get(plan.parent)
            return _fork_summary(parent, controller.run_fork(parent, plan, client=client_of(request)), plan)

        return guarded("fork", body)

    # Every model call enters at once; the controller's gate decides who runs and tells the others their turn.
    gr.api(typed(run), api_name="run", concurrency_limit=EVENT_LIMIT, concurrency_id="model")
    gr.api(typed(fork), api_name="fork", concurrency_limit=EVENT_LIMIT, concurrency_id="model")
    gr.api(typed(status), api_name="status")
    gr.api(typed(fetch_run), api_name="fetch_run")
