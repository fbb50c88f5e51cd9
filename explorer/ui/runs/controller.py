"""Running questions for the web app: a worker thread per request, streamed updates, Cancel, storage.

The methods run in a worker thread with TraceRecorder listeners that put every token and event
on a queue; the Gradio handler is a generator that drains the queue and yields a fresh view a
few times a second, so tokens and retrievals appear while the model works. Several methods of
one press run at once when the engine batches concurrent runs (the app turns that on when it
admits more than one run at a time), sharing each forward pass, and one after another otherwise.
Cancel sets the threading.Event the engine checks between tokens, so a run
stops within a token and its partial trace is stored with status ``cancelled``.

Each run is written to the store when it starts, checkpointed while it runs (so a killed server
leaves it ``interrupted``, not lost) and written whole when it ends; it is then shown FROM the
store, so what a user sees when a run ends is exactly what reopening it later shows.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import ExplorerError, check_question, hide_paths, public_message
from explorer.forks import ForkPlan
from explorer.journal import RunJournal
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Event, Trace
from explorer.ui.page.controls import Refusal, RunSpec
from explorer.ui.runs.waits import RunRates, WaitEstimate
from explorer.ui.serving.admission import RunGate, Ticket
from explorer.ui.views.html import esc
from explorer.ui.views.render import render_runs

log = logging.getLogger("explorer.ui")

#: Seconds between two streamed views (a finished span or a retrieval is shown at once).
REFRESH = 0.2


def given_name(spec: str) -> str:
    """A model or corpus as visitors may see it: its name, or a path's last part (``/srv/x.jsonl`` -> ``x.jsonl``)."""
    spec = str(spec).strip()
    return spec.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or spec


class RuntimeHolder:
    """Loads the model and corpus once, in the background or on first use, and says how far it got.

    ``warm`` (optional) runs once on the loaded runtime before it is offered, so the first Run
    does not pay for what loads lazily (first forward pass, tokenizer and spaCy tables). The
    holder counts the model's forward passes from then on (:attr:`forward_passes`), so a caller
    can tell whether anything was generated: a hook on the model counts the passes run from Python,
    and the batch's decode step the ones it ran as one compiled or captured graph (the hook does
    nothing inside those, or every step would recompile on the changing count).
    """

    def __init__(self, factory: Callable[[], Runtime], describe: str,
                 warm: Callable[[Runtime], None] | None = None) -> None:
        self._factory = factory
        # Shown to every visitor (the status line, /status): never a folder of the server.
        self.describe = hide_paths(describe) or describe
        self._warm = warm
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._error: str | None = None
        self._failure: ExplorerError | None = None
        self._thread: threading.Thread | None = None
        self.state = "not loaded"
        self.step = ""
        self._since = 0.0
        self._python_passes = 0

    def start(self) -> None:
        """Begin loading in a daemon thread (the app's start-up), returning at once."""
        with self._lock:
            if self._thread is None and self._runtime is None:
                self._thread = threading.Thread(target=self._load, name="runtime-loader", daemon=True)
                self._thread.start()

    def note(self, message: str) -> None:
        """Progress of the loading (the loaders' own messages), shown in the model status line."""
        self.step = str(message).strip()

    def _count(self, *_: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        self._python_passes += 1

    @property
    def forward_passes(self) -> int:
        """The model's forward passes since it loaded (see the class docstring)."""
        engine = getattr(self._runtime, "engine", None)
        step = getattr(getattr(engine, "batcher", None), "step", None)
        return self._python_passes + int(getattr(step, "graph_steps", 0))

    def _load(self) -> None:
        self.state, self._since = "loading", time.monotonic()
        self.note("loading the model")
        try:
            runtime = self._factory()
            model = getattr(runtime.engine, "model", None)
            if self._warm is not None:
                self.state = "warming up"
                self.note("warming up")
                self._warm(runtime)
            if hasattr(model, "register_forward_pre_hook"):
                model.register_forward_pre_hook(self._count)
        except ExplorerError as exc:
            self._failure, self._error, self.state = exc, public_message(exc), "failed"
            log.warning("loading the model failed: %s", exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - reported to the user, logged in full
            log.exception("loading the model failed")
            self._failure = ExplorerError(f"loading failed ({type(exc).__name__}: {exc})", where=self.describe,
                                          fix="check --model and --corpus (the server log has the details), then "
                                              "restart the app")
            self._error, self.state = public_message(self._failure), "failed"
            return
        self._runtime, self.state = runtime, "ready"
        log.info("model and corpus ready after %.1f s", time.monotonic() - self._since)

    @property
    def ready(self) -> bool:
        return self._runtime is not None

    def status(self) -> str:
        if self._runtime is not None:
            return f"Model and corpus ready ({self.describe})."
        if self._error:
            return f"Model not available: {self._error}"
        if self.state == "not loaded":
            return f"The model loads on the first run ({self.describe})."
        elapsed = time.monotonic() - self._since
        step = f": {hide_paths(self.step)}" if self.step else ""
        return (f"Loading {self.describe} … {elapsed:.0f} s{step}. Recorded runs open meanwhile; Run waits for "
                "the model.")

    def get(self) -> Runtime:
        """The runtime, loading it here if nobody started it; raises ExplorerError if it cannot load."""
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._runtime is None:
            # The loader's own error already says what, where and how to fix it: raise it as it is.
            raise self._failure or ExplorerError("the model could not be loaded", where=self.describe,
                                                 fix="check --model and --corpus, then restart the app")
        return self._runtime


@dataclass
class Update:
    """What one step of a streamed run shows."""

    #: The view ("": unchanged since the last update).
    html: str
    status: str
    run_ids: list[str] = field(default_factory=list)
    done: bool = False


@dataclass
class _Live:
    spec: RunSpec
    events: list[Event] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    purpose: str = ""
    streamed: bool = False

    def amend(self, event_id: int, fields: dict[str, Any]) -> None:
        """Apply a recorder amendment to the streamed copy of an event."""
        for event in self.events:
            if event.id == event_id:
                event.payload.update(fields)


@dataclass
class _Shown:
    """Stored runs a stream shows beside the live one, fork points to mark in them, and methods not run."""

    runs: list[Trace]
    marks: dict[str, dict[str, Any]]
    #: (method, message) of ticked methods refused before the run, and of those that failed while running.
    refused: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Loading:
    """A fork's model being loaded before the fork can start: which model, the loader's last step, since when."""

    model: str
    step: str = ""
    since: float = field(default_factory=time.monotonic)

    def then(self, step: str) -> _Loading:
        return _Loading(self.model, step, self.since)

    def update(self, shown: _Shown, signal: str, *, first: bool) -> Update:
        """A line that says the model is loading, for how long so far; the view (the parent as it is) only in
        the ``first`` (``html`` "" after it: the view stays as it is while the seconds count up)."""
        step = f": {hide_paths(self.step)}" if self.step else ""
        text = (f"Loading {self.model}, the model this run was made with, for the fork … "
                f"{time.monotonic() - self.since:.0f} s{step}. The fork starts when it is loaded (later forks on it "
                "start at once).")
        html = render_runs(shown.runs, signal=signal, fork_marks=shown.marks, pending=True) if first else ""
        return Update(html, status_html(text))


def status_html(text: str, *, error: bool = False) -> str:
    cls = "dre-error" if error else "dre-note"
    return f'<div class="dre-root dre-status"><div class="{cls}">{esc(text)}</div></div>'


class RunController:
    """Streams runs for one app; keeps one cancel flag per browser session."""

    def __init__(self, store: RunStore, runtime: RuntimeHolder,
                 retarget: Callable[[Runtime, str, str | None], Runtime] | None = None,
                 gate: RunGate | None = None,
                 reopen: Callable[[Runtime, dict[str, Any], Callable[[str], None]], Runtime] | None = None,
                 model: str = "") -> None:
        self.store = store
        self.runtime = runtime
        #: The app's model by the name its runs will carry, until the loaded model says it itself.
        self.model = model
        #: Measured run lengths per method and model: the wait told before a run and in line.
        self.rates = RunRates()
        self._rates_loaded = False
        #: Who uses the model when: runs at once, the line behind them, the cap per client.
        self.gate = gate or RunGate()
        # (loaded runtime, retriever kind, embedder) -> the same engine over another retriever of the corpus
        self.retarget = retarget
        # (loaded runtime, a recorded run's model facts) -> a runtime on that model, where the app can open it
        self.reopen = reopen
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    # -- waits ------------------------------------------------------------------------------------------
    def model_name(self) -> str:
        """The name the app's runs carry (the loaded model's own once it is loaded)."""
        if self.runtime.ready:
            name = str(self.runtime.get().engine.fingerprint().get("name", ""))
            if name:
                self.model = name
        return self.model

    def wait_estimate(self, methods: list[str], model: str | None = None) -> WaitEstimate:
        """How long ``methods`` will likely take here, one after another (on ``model``, else the app's):
        measured from stored complete runs and runs finished since the app started."""
        if not self._rates_loaded:
            self._rates_loaded = True
            self.rates.load_store(self.store)
        # the methods of one press run at once when the loaded engine batches concurrent runs (see _work)
        together = self.runtime.ready and getattr(self.runtime.get().engine, "batcher", None) is not None
        return self.rates.estimate_all(methods, model or self.model_name(), together=together)

    def admit(self, client: str, methods: list[str], model: str | None = None) -> Ticket:
        """A place in line for ``client``'s run of ``methods``, carrying how long it will likely hold the model."""
        estimate = self.wait_estimate(methods, model)
        return self.gate.enter(client, expected=estimate.seconds, guessed=not estimate.measured)

    def _learn(self, trace: Trace) -> None:
        """A run that ended teaches the rates (a complete, whole run only)."""
        self.wait_estimate([])  # the stored runs first, so they stay older than this one
        self.rates.learn(trace)

    def cancel(self, session: str) -> bool:
        with self._lock:
            flag = self._cancels.get(session)
        if flag is None:
            return False
        flag.set()
        return True

    def check_question(self, question: str) -> str:
        """What can be refused before the model is needed: an empty question, a store that cannot take the run."""
        question = check_question(question, "question", "type a question or pick one")
        if self.store.readonly:
            raise ExplorerError("the run database is read-only, so runs cannot be stored; stored runs can still be "
                                "opened", where="run database",
                                fix="restart the app with a writable --db to run questions")
        return question

    def run_one(self, question: str, spec: RunSpec, gold: dict[str, Any] | None = None,
                prepare: Callable[[Trace, Any, Any], None] | None = None) -> Trace:
        """Run and store one method without streaming (the scripting API); stored from its start.

        The caller holds a place of the gate (:mod:`explorer.ui.runs.jobs` queues ``/run`` calls);
        ``prepare`` sees the trace once it is stored as running (``/run`` binds its key there).
        """
        question = self.check_question(question)
        trace = run_question(spec.method, question, self.runtime.get(), variant=spec.variant, config=spec.config,
                             gold=gold, journal=RunJournal(self.store), prepare=prepare)
        self._learn(trace)
        return trace

    def stream(self, question: str, specs: list[RunSpec], *, gold: dict[str, Any] | None, session: str,
               signal: str = "prob", retriever: str | None = None, embedder: str | None = None,
               refused: list[Refusal] | None = None) -> Iterator[Update]:
        """Run ``specs`` on ``question`` (together through the batch, or in turn), yielding views as they progress.

        ``refused``: ticked methods whose settings were refused before the run; each is shown as a
        card with its message beside the runs, which go ahead. A method that fails while running
        is stored with status ``error`` and the next one runs.
        """
        question = self.check_question(question)
        if not specs:
            raise ExplorerError("; ".join(f"{r.method}: {r.message}" for r in refused or []) or "nothing to run",
                                where="method settings", fix="correct the values named, then press Run again")
        ticket = self.admit(f"session:{session}", [spec.method for spec in specs])
        cancel = self._claim(session)
        inbox: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        worker = threading.Thread(target=self._work, args=(question, specs, gold or {}, cancel, inbox,
                                                           (retriever, embedder), ticket),
                                  name="run-worker", daemon=True)
        drain = self._drain(question, specs, inbox, cancel, signal, refused=list(refused or []))
        yield from self._run_worker(worker, session, cancel, drain, ticket)

    def _claim(self, session: str) -> threading.Event:
        """A new cancel flag for ``session``; the run it had going is cancelled."""
        cancel = threading.Event()
        with self._lock:
            old = self._cancels.get(session)
            if old is not None:
                old.set()
            self._cancels[session] = cancel
        return cancel

    def _run_worker(self, worker: threading.Thread, session: str, cancel: threading.Event,
                    drain: Iterator[Update], ticket: Ticket) -> Iterator[Update]:
        try:
            yield from self._wait_turn(ticket, cancel)
            if cancel.is_set():
                ticket.release()  # its place goes to the next caller at once
                with self._lock:
                    replaced = self._cancels.get(session) is not cancel
                if not replaced:  # cancelled by its page (a newer run of the page draws its own view)
                    line = ticket.describe() + "; nothing ran, nothing was stored."
                    line = line[:1].upper() + line[1:]
                    yield Update(render_runs([], message=esc(line)), status_html(line))
                return
            if not self.runtime.ready:
                yield Update(render_runs([], message=esc(self.runtime.status()), pending=True),
                             status_html(self.runtime.status()))
            worker.start()
            yield from drain
        finally:
            if not worker.is_alive():
                ticket.release()  # never started, or already ended (a running worker releases its own)
            # A closed stream (the browser went away) must not leave the model running for nobody;
            # after a normal end the worker has already finished and this changes nothing.
            cancel.set()
            with self._lock:
                if self._cancels.get(session) is cancel:
                    del self._cancels[session]

    def _wait_turn(self, ticket: Ticket, cancel: threading.Event) -> Iterator[Update]:
        """While the page waits in line: its place and an estimate, refreshed as the line moves."""
        shown = ""
        while not ticket.admitted.is_set() and not cancel.is_set():
            text = ticket.describe()
            if text != shown:
                shown = text
                line = text[:1].upper() + text[1:] + "."
                yield Update(render_runs([], message=esc(line), pending=True), status_html(line))
            ticket.wait(REFRESH * 5)

    # -- forks ----------------------------------------------------------------------------------------
    def fork_runtime(self, parent: Trace, progress: Callable[[str], None] | None = None) -> Runtime:
        """The loaded runtime, joined to the retriever the parent searched with when it is another of the corpus.

        A run recorded on another model the app can open itself (the other embedded model: the case
        studies are recorded on whichever tells the story better) is forked on that model, opened
        once and kept beside the app's; any other model is left to the fork's own check, which names it.
        ``progress`` hears of that model's loading, when it has to load (its first message says it begins)."""
        runtime = self.runtime.get()
        if self.reopen is not None:
            runtime = self.reopen(runtime, dict(parent.model or {}), progress or (lambda _message: None))
        recorded = (parent.corpus or {}).get("retriever_config") if isinstance(parent.corpus, dict) else None
        if isinstance(recorded, dict) and recorded.get("kind") and self.retarget is not None:
            runtime = self.retarget(runtime, str(recorded["kind"]), recorded.get("embedder") or None)
        return runtime

    def _fork_check(self, parent: Trace, plan: ForkPlan) -> None:
        from explorer.ui.runs.forking import check

        if self.store.readonly:
            raise ExplorerError("the run database is read-only, so a fork cannot be stored", where="run database",
                                fix="restart the app with a writable --db to fork runs")
        check(parent, plan)

    def run_fork(self, parent: Trace, plan: ForkPlan, client: str = "api") -> Trace:
        """Fork ``parent`` without streaming (the scripting API), in its turn; the fork is stored from its start."""
        from explorer.forks import fork_run

        self._fork_check(parent, plan)
        ticket = self.admit(client, [parent.method], str((parent.model or {}).get("name", "")))
        try:
            ticket.wait()
            return fork_run(parent, plan, self.fork_runtime(parent), journal=RunJournal(self.store))
        finally:
            ticket.release()

    def stream_fork(self, parent: Trace, plan: ForkPlan, *, session: str, signal: str = "prob") -> Iterator[Update]:
        """Fork ``parent`` as ``plan`` says, streaming the fork beside its parent (divergence marked in both)."""
        self._fork_check(parent, plan)
        ticket = self.admit(f"session:{session}", [parent.method], str((parent.model or {}).get("name", "")))
        cancel = self._claim(session)
        inbox: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        spec = RunSpec(parent.method, parent.variant, dict(parent.config))
        worker = threading.Thread(target=self._work_fork, args=(parent, plan, cancel, inbox, ticket),
                                  name="fork-worker", daemon=True)
        drain = self._drain(parent.question, [spec], inbox, cancel, signal, beside=[parent],
                            marks={parent.run_id: plan.point.to_dict()})
        yield from self._run_worker(worker, session, cancel, drain, ticket)

    def _work_fork(self, parent: Trace, plan: ForkPlan, cancel: threading.Event, inbox: queue.Queue,
                   ticket: Ticket) -> None:
        from explorer.forks import fork_run

        def listener(kind: str, data: dict[str, Any]) -> None:
            inbox.put((kind, 0, data))

        with _reported(inbox, "a fork", ticket):
            runtime = self.fork_runtime(parent, lambda message: inbox.put(("loading", 0, message)))
            inbox.put(("start", 0, None))
            trace = fork_run(parent, plan, runtime, listeners=[listener], cancel=cancel, journal=RunJournal(self.store))
            inbox.put(("done", 0, trace.run_id))

    # -- the worker ---------------------------------------------------------------------------------
    def _work(self, question: str, specs: list[RunSpec], gold: dict[str, Any], cancel: threading.Event,
              inbox: queue.Queue, choice: tuple[str | None, str | None] = (None, None),
              ticket: Ticket | None = None) -> None:
        with _reported(inbox, "a run", ticket):
            runtime = self.runtime.get()
            kind, embedder = choice
            if kind and self.retarget is not None:
                runtime = self.retarget(runtime, kind, embedder or None)
            # Runs of one press share the model's decode steps when the engine batches concurrent
            # runs (each keeps the trace it would have alone); otherwise they go one after another.
            if len(specs) > 1 and getattr(runtime.engine, "batcher", None) is not None:
                workers = [threading.Thread(target=self._work_one,
                                            args=(question, index, spec, runtime, gold, cancel, inbox),
                                            name=f"run-{spec.method}", daemon=True)
                           for index, spec in enumerate(specs)]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
                return
            for index, spec in enumerate(specs):
                if cancel.is_set():
                    break
                self._work_one(question, index, spec, runtime, gold, cancel, inbox)

    def _work_one(self, question: str, index: int, spec: RunSpec, runtime: Runtime, gold: dict[str, Any],
                  cancel: threading.Event, inbox: queue.Queue) -> None:
        """Run and store one ticked method, its events tagged with its place in the press."""
        if cancel.is_set():
            return
        inbox.put(("start", index, None))

        def listener(kind: str, data: dict[str, Any]) -> None:
            inbox.put((kind, index, data))

        # One method's failure is its own card; the other methods still run.
        with _reported(inbox, f"{spec.method}/{spec.variant}", kind="failed", index=index, end=False):
            trace = run_question(spec.method, question, runtime, variant=spec.variant, config=spec.config,
                                 gold=gold, listeners=[listener], cancel=cancel, journal=RunJournal(self.store))
            self._learn(trace)  # here, not where it is shown: a page that went away still teaches it
            inbox.put(("done", index, trace.run_id))

    # -- the streaming side ---------------------------------------------------------------------------
    def _drain(self, question: str, specs: list[RunSpec], inbox: queue.Queue, cancel: threading.Event,
               signal: str, *, beside: list[Trace] | None = None,
               marks: dict[str, dict[str, Any]] | None = None,
               refused: list[Refusal] | None = None) -> Iterator[Update]:
        """Views of the runs as they progress; ``beside``: stored runs shown before them (a fork's parent)."""
        shown = _Shown(list(beside or []), dict(marks or {}), [(r.method, r.message) for r in refused or []])
        done: dict[int, Trace] = {}
        lives: dict[int, _Live] = {}
        rendered: dict[str, str] = {}  # the stored runs' columns, drawn once for this stream
        loading: _Loading | None = None
        first = False
        error: str | None = None
        last = 0.0
        dirty = False
        while True:
            try:
                kind, index, data = inbox.get(timeout=REFRESH)
            except queue.Empty:
                kind, index, data = "tick", -1, None
            urgent = False
            live = lives.get(index)
            if kind == "start":
                lives[index], loading = _Live(specs[index]), None
                urgent = True
            elif kind == "loading":  # the first message names the model, the loader's own follow
                first = loading is None
                loading = _Loading(str(data)) if loading is None else loading.then(str(data))
                urgent = True
            elif kind == "token" and live is not None:
                urgent = not live.streamed  # a run's first token is shown at once, not at the next refresh
                live.streamed = True
                live.tokens.append(data)
                live.purpose = str(data.get("purpose", ""))
                dirty = True
            elif kind == "event" and live is not None:
                event = Event.from_dict(data)
                live.events.append(event)
                if event.kind == "generation":
                    live.tokens = []
                urgent = event.kind in ("generation", "retrieval", "trigger")
                dirty = True
            elif kind == "amend" and live is not None:
                live.amend(data["id"], data["fields"])
                dirty = True
            elif kind == "done":
                done[index] = self.store.get(data)
                lives.pop(index, None)
                urgent = True
            elif kind == "failed":
                shown.failed.append((specs[index].method, str(data)))
                lives.pop(index, None)
                urgent = True
            elif kind == "error":
                error = data
            elif kind == "end":
                break
            now = time.monotonic()
            if loading is not None and (urgent or now - last >= 1.0):  # its seconds count up while it loads
                last = now
                yield loading.update(shown, signal, first=first)
                first = False
            elif (urgent or dirty) and (urgent or now - last >= REFRESH):
                last, dirty = now, False
                yield self._live_update(question, _in_order(done), lives, specs, signal, shown, rendered)
        yield self._final_update(_in_order(done), specs, cancel, error, signal, shown)

    def _live_update(self, question: str, finished: list[Trace], lives: dict[int, _Live], specs: list[RunSpec],
                     signal: str, shown: _Shown | None = None, rendered: dict[str, str] | None = None) -> Update:
        """The finished runs in the order they were ticked, and the first running one streaming below them."""
        live = lives[min(lives)] if lives else None
        trace = None
        if live is not None:
            trace = Trace(question=question, method=live.spec.method, variant=live.spec.variant,
                          config=live.spec.config, model={}, events=list(live.events), run_id="live",
                          status="running")
        if len(lives) > 1:
            names = ", ".join(f"{lv.spec.method}/{lv.spec.variant}" for _, lv in sorted(lives.items()))
            status = f"Running {len(lives)} of {len(specs)} at once, sharing the model's steps: {names} …"
        elif live is not None:
            status = f"Running {len(finished) + 1} of {len(specs)}: {live.spec.method}/{live.spec.variant} …"
        else:
            status = "Running …"
        shown = shown or _Shown([], {})
        html = render_runs([*shown.runs, *finished], signal=signal, live=trace,
                           live_tokens=list(live.tokens) if live else None, live_purpose=live.purpose if live else "",
                           fork_marks=shown.marks, refused=shown.refused + shown.failed,
                           pending=len(finished) + len(shown.failed) < len(specs), rendered=rendered)
        return Update(html, status_html(status), [t.run_id for t in finished])

    def _final_update(self, finished: list[Trace], specs: list[RunSpec], cancel: threading.Event, error: str | None,
                      signal: str, shown: _Shown | None = None) -> Update:
        ids = [t.run_id for t in finished]
        not_run = (shown.refused + shown.failed) if shown is not None else []
        if error:
            status = status_html(error, error=True)
        elif not_run:
            stored = f"{len(finished)} run(s) stored; " if finished else ""
            status = status_html(stored + "; ".join(f"{m} not run: {why}" for m, why in not_run), error=True)
        elif any(t.status == "cancelled" for t in finished) or (cancel.is_set() and len(finished) < len(specs)):
            status = status_html(f"Cancelled. {len(finished)} run(s) stored (the interrupted one with status "
                                 "'cancelled').")
        else:
            problems = [t for t in finished if t.status in ("error", "interrupted")]
            if problems:
                status = status_html("; ".join(f"{t.method}: {hide_paths(t.error)}" for t in problems), error=True)
            else:
                status = status_html(f"Done: {len(finished)} run(s) stored.")
        html = render_runs(finished, signal=signal, refused=not_run, interactive=True,
                           message="" if finished or not_run else esc(error or "Nothing ran."))
        return Update(html, status, ids, done=True)


def _in_order(done: dict[int, Trace]) -> list[Trace]:
    """Finished runs in the order their methods were ticked, whichever finished first."""
    return [done[index] for index in sorted(done)]


@contextmanager
def _reported(inbox: queue.Queue, what: str, ticket: Ticket | None = None, *, kind: str = "error", index: int = -1,
              end: bool = True) -> Iterator[None]:
    """A worker's failure as one line for the page (the log keeps the traceback), and the end message.

    ``kind="failed"`` with the method's ``index`` reports one method's failure (its card), ``end``
    says whether the whole worker is over; when it is, the worker's place at the gate goes to the
    next caller at once."""
    try:
        yield
    except ExplorerError as exc:
        log.info("%s failed: %s", what, exc.message)
        inbox.put((kind, index, public_message(exc)))
    except Exception as exc:  # noqa: BLE001 - the user gets one line, the log gets the traceback
        log.exception("%s failed", what)
        inbox.put((kind, index, hide_paths(f"internal error ({type(exc).__name__}): {exc}")))
    finally:
        if end:
            if ticket is not None:
                ticket.release()
            inbox.put(("end", -1, None))
