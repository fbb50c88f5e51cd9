"""Runs written while they happen, so a crash or a kill loses at most the last second of a run.

:class:`RunJournal` is a trace listener. When a run starts it writes the run's row with status
``running``; while the run goes on it appends the trace's new events and the tokens of the span
being written, at most once per ``every`` seconds, each batch in one WAL transaction; when the
run ends the full trace replaces the checkpoints. A run whose process is gone (killed, crashed,
the machine lost power) is found by the next process that opens the database and becomes
``interrupted``: its partial trace, up to the last checkpoint, opens like a cancelled run's.

Whose run it is: each checkpoint names its process (host, pid and the pid's start time, so a
recycled pid is not mistaken for the writer). Only runs of this host are judged; a run written
from another machine over a shared folder stays ``running`` until that machine finishes it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from functools import lru_cache
from typing import Any, Protocol

from explorer.trace import Event, Trace, token_dict_v2, upgrade_events

log = logging.getLogger("explorer.store")

INTERRUPTED_ERROR = ("the process running it stopped before the run ended (killed, crashed or shut down); "
                     "the trace ends at its last checkpoint")


def _start_ticks(pid: int) -> str:
    """When process ``pid`` started (Linux clock ticks since boot), or '' where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return ""


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def owner_token() -> str:
    """This process, as the owner of the runs it writes: ``host:pid:start``."""
    pid = os.getpid()
    return f"{_host()}:{pid}:{_start_ticks(pid)}"


def owner_gone(owner: str) -> bool:
    """True when ``owner`` was a process of this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != _host():
        return False
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    if pid == os.getpid():
        return started != _start_ticks(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return False
    return bool(started) and _start_ticks(pid) not in ("", started)


def header(trace: Trace) -> str:
    """The trace without its events: what the ``runs`` row holds while the run is in progress."""
    d = trace.to_dict()
    d["events"] = []
    return json.dumps(d, ensure_ascii=False)


def partial_span(pending: list[dict[str, Any]], event_id: int) -> Event:
    """The span being written when the process stopped, as a generation event of its streamed tokens."""
    purpose = str(pending[0].get("purpose", "draft")) if pending else "draft"
    tokens = [token_dict_v2({k: v for k, v in t.items() if k not in ("purpose", "step")}) for t in pending]
    step = int(pending[-1].get("step", 0)) if pending else 0
    return Event(kind="generation", id=event_id, step=step,
                 payload={"purpose": purpose, "text": "".join(str(t.get("text", "")) for t in tokens),
                          "tokens": tokens, "prompt": "", "stopped_by": "interrupted", "partial": True})


def assemble(head: str, events: list[str], pending: list[dict[str, Any]] | None, *, interrupted: bool) -> Trace:
    """A trace from its checkpoints: the header, the events written so far, the span in progress."""
    trace = Trace.from_json(head)
    version = json.loads(head).get("version")
    trace.events = [Event.from_dict(e) for e in upgrade_events(version, [json.loads(e) for e in events])]
    if interrupted:
        if pending:
            span = partial_span(pending, len(trace.events))
            trace.events.append(span)
            trace.costs.llm_calls += 1  # counted as a cancelled run counts its cut span
            trace.costs.generated_tokens += len(span.payload["tokens"])
        trace.events.append(Event(kind="note", id=len(trace.events), step=trace.events[-1].step if trace.events else 0,
                                  payload={"level": "warning", "message": INTERRUPTED_ERROR}))
        trace.status = "interrupted"
        trace.error = INTERRUPTED_ERROR
    return trace


class RunWriter(Protocol):
    """What the journal needs of a store (:class:`explorer.store.RunStore` is one); named here so that the
    store, which reads journals back, and the journal, which writes through the store, need not import
    each other."""

    def begin_run(self, trace: Trace, *, owner: str, evaluation: str | None = None, dataset: str | None = None,
                  question_id: str | None = None) -> None: ...

    def checkpoint_run(self, trace: Trace, events: list[Event], pending: list[dict[str, Any]] | None) -> None: ...

    def save(self, trace: Trace, *, evaluation: str | None = None, dataset: str | None = None,
             question_id: str | None = None) -> str: ...


class RunJournal:
    """Writes one run to the store as it happens (pass it to ``run_question(journal=...)``).

    ``every`` is the longest a checkpoint waits (seconds); a crash loses at most that much of a
    run. Writing is batched: nothing is written between two checkpoints however many events and
    tokens arrive.
    """

    def __init__(self, store: RunWriter, *, every: float = 1.0, evaluation: str | None = None,
                 dataset: str | None = None, question_id: str | None = None) -> None:
        self.store = store
        self.every = every
        self.extra = {"evaluation": evaluation, "dataset": dataset, "question_id": question_id}
        self.trace: Trace | None = None
        self._written = 0
        self._pending: list[dict[str, Any]] = []
        self._pending_dirty = False
        self._amended: set[int] = set()  # ids of already-written events changed since (TraceRecorder.amend)
        self._last = 0.0
        self.checkpoints = 0

    def begin(self, trace: Trace) -> None:
        """Store the run with status ``running`` before any work is done."""
        self.trace = trace
        self.store.begin_run(trace, owner=owner_token(), **self.extra)
        self._written = len(trace.events)
        self._last = time.monotonic()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if self.trace is None:
            return
        if kind == "token":
            self._pending.append(data)
            self._pending_dirty = True
        elif kind == "event" and data.get("kind") == "generation":
            self._pending = []  # the span is complete: its event carries the tokens
            self._pending_dirty = True
        elif kind == "amend" and data["id"] < self._written:
            self._amended.add(data["id"])
        if time.monotonic() - self._last >= self.every:
            self.flush()

    def flush(self) -> None:
        """Write what happened since the last checkpoint (one transaction)."""
        trace = self.trace
        if trace is None:
            return
        new = trace.events[self._written:]
        amended = [trace.events[i] for i in sorted(self._amended)]
        self._amended.clear()
        pending = self._pending if self._pending_dirty else None
        self.store.checkpoint_run(trace, amended + new, pending)
        self._written += len(new)
        self._pending_dirty = False
        self._last = time.monotonic()
        self.checkpoints += 1

    def finish(self, trace: Trace) -> None:
        """The run ended (complete, cancelled or error): its full trace replaces the checkpoints."""
        self.store.save(trace, **self.extra)
        self.trace = None

    def abandon(self, trace: Trace, exc: BaseException) -> None:
        """The run stopped on something unexpected: keep what it did, with the reason, instead of a stale row."""
        if isinstance(exc, KeyboardInterrupt):
            trace.status, trace.error = "interrupted", "interrupted (Ctrl-C or a stop signal)"
        else:
            trace.status, trace.error = "error", f"internal error ({type(exc).__name__}): {exc}"
        try:
            self.finish(trace)
        except Exception:  # noqa: BLE001 - the original exception is what the caller must see
            log.exception("could not store the run that stopped")
