"""Runs asked for through ``/run``: queued, run to the end whatever the caller does, found again by key.

A call takes a place in the app's line (:class:`~explorer.ui.serving.admission.RunGate`) and gets a job
that runs in its own thread: the call only watches it, reporting its place in line and an
estimate while it waits and the run id once it runs. So a caller whose connection drops, or whose
client gives up, loses nothing: the run completes and is stored. With an idempotency key the
call can be repeated: a key is bound to the run it made in the run database (table
``run_requests``) the moment the run starts, so a retried call, even after a restart of the app,
returns that run, waits for it while it is still going in this process, and never starts a
second one. A key reused for a different request is refused.

A key belongs to the caller that sent it (:func:`~explorer.ui.serving.admission.client_of`: the login, else
the client's session): another caller's same key is another key, so one caller can neither be
handed another's run nor learn, from a refusal, which keys others have used.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import ExplorerError
from explorer.trace import Costs, Trace
from explorer.ui.page.controls import RunSpec
from explorer.ui.serving.admission import Ticket, wait_text

#: Longest idempotency key accepted (a UUID is 36 characters).
MAX_KEY = 128
#: Seconds between two updates of a waiting or running call (each one keeps its connection alive).
HEARTBEAT = 5.0


def request_text(question: str, spec: RunSpec) -> str:
    """What a call asked for, as the run database keeps it beside its key (to refuse a reused key)."""
    return json.dumps({"question": question.strip(), "method": spec.method, "variant": spec.variant,
                       "settings": spec.config}, sort_keys=True, ensure_ascii=False, default=str)


def check_key(key: Any) -> str:
    """The idempotency key as given (empty: none); refuses what cannot be one."""
    if key is None:
        return ""
    if not isinstance(key, str):
        raise ExplorerError(f"expected text, got {type(key).__name__}", where="idempotency_key",
                            fix="pass a string, e.g. a UUID made once per request and reused when retrying it")
    key = key.strip()
    if len(key) > MAX_KEY or any(not ch.isprintable() for ch in key):
        raise ExplorerError(f"the idempotency key is {len(key)} characters or holds unprintable ones", where=
                            "idempotency_key", fix=f"use printable text of at most {MAX_KEY} characters, e.g. a UUID")
    return key


def scoped_key(client: str, key: str) -> str:
    """``key`` as the caller ``client`` owns it (a key holds no line break, so the last one splits them)."""
    return f"{client}\n{key}" if key else ""


@dataclass
class ApiJob:
    """One ``/run`` request: its place in line, then its run."""

    question: str
    spec: RunSpec
    key: str
    request: str
    ticket: Ticket | None = None
    run_id: str = ""
    trace: Trace | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def summary(trace: Trace) -> dict[str, Any]:
    """A stored run as ``/run`` answers (RunSummary)."""
    from explorer.errors import hide_paths

    return {"run_id": trace.run_id, "status": trace.status, "answer": trace.answer, "output": trace.output,
            "error": hide_paths(trace.error), "costs": trace.costs.to_dict(), "queue_position": 0,
            "estimate_seconds": None, "message": "stored"}


def progress(job: ApiJob) -> dict[str, Any]:
    """A run not yet stored as ``/run`` reports it while the caller waits."""
    position = job.ticket.position if job.ticket is not None else 0
    forecast = job.ticket.gate.forecast(job.ticket) if job.ticket is not None and position else None
    estimate = forecast[0] if forecast is not None else None
    if position:
        message = f"number {position} in line"
        if forecast is not None:
            message += f", about {wait_text(forecast[0])}" + (" by a first estimate" if forecast[1] else "")
    else:
        message = "running"
    return {"run_id": job.run_id, "status": "queued" if position else "running", "answer": "", "output": "",
            "error": None, "costs": Costs().to_dict(), "queue_position": position,
            "estimate_seconds": round(estimate, 1) if estimate is not None else None, "message": message}


class ApiRuns:
    """The ``/run`` requests of one app: queued through the controller's gate, kept in flight by key."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self._lock = threading.Lock()
        self._inflight: dict[str, ApiJob] = {}

    def submit(self, question: str, spec: RunSpec, *, client: str, key: str = "") -> ApiJob | Trace:
        """The job for this call, or the stored run a previous call with ``key`` made."""
        question = self.controller.check_question(question)
        request = request_text(question, spec)
        store = self.controller.store
        key = scoped_key(client, key)
        with self._lock:
            if key:
                found = self._existing(key, request)
                if found is not None:
                    return found
            job = ApiJob(question, spec, key, request)
            job.ticket = self.controller.admit(client, [spec.method])  # refused when the client or line is full
            if key:
                self._inflight[key] = job
        threading.Thread(target=self._work, args=(job, store), name="api-run", daemon=True).start()
        return job

    def _existing(self, key: str, request: str) -> ApiJob | Trace | None:
        job = self._inflight.get(key)
        bound = self.controller.store.request_run(key)
        asked = job.request if job is not None else bound[1] if bound is not None else None
        if asked is not None and asked != request:
            raise ExplorerError("this idempotency key was already used for a different request (another question, "
                                "method, variant or settings)", where="idempotency_key",
                                fix="use a new key for each new request, and the same key only to retry one")
        if job is not None:
            return job
        if bound is not None:
            try:
                return self.controller.store.get(bound[0])
            except ExplorerError:
                raise ExplorerError(f"the run this key made ({bound[0]}) has since been deleted",
                                    where="idempotency_key", fix="use a new key to run the question again") from None
        return None

    def _work(self, job: ApiJob, store: Any) -> None:
        def bind(trace: Trace, _rec: Any, _cfg: Any) -> None:
            job.run_id = trace.run_id
            if job.key:
                store.bind_request(job.key, trace.run_id, job.request)

        assert job.ticket is not None
        try:
            job.ticket.wait()
            job.trace = self.controller.run_one(job.question, job.spec, prepare=bind)
        except BaseException as exc:  # noqa: BLE001 - the watching call reports it
            job.error = exc
        finally:
            job.ticket.release()
            with self._lock:
                if self._inflight.get(job.key) is job:
                    del self._inflight[job.key]
            job.done.set()

    def updates(self, job: ApiJob | Trace) -> Iterator[dict[str, Any]]:
        """What the caller sees: its place and estimate while it waits, the run id while it runs, then the run."""
        if isinstance(job, Trace):
            yield summary(job)
            return
        last: tuple | None = None
        said = 0.0
        while not job.done.wait(0.5):
            now = progress(job)
            shown = (now["status"], now["queue_position"], now["run_id"])
            if shown != last or time.monotonic() - said >= HEARTBEAT:
                last, said = shown, time.monotonic()
                yield now
        if job.error is not None:
            raise job.error
        assert job.trace is not None
        yield summary(job.trace)
