"""Who uses the model when: a bounded number of runs at once, a line for the rest, a cap per client.

The model decodes concurrent runs as one batch (:mod:`explorer.engine.batching`), so the app lets
``capacity`` runs go at once and keeps every further caller in a first-come line instead of
refusing or timing it out. A waiting caller is told its place and an estimate, and is let in the
moment a run ends. The estimate plays the line forward: each run holds its place for the length
its caller expected (the methods' run lengths measured on this server, :mod:`explorer.ui.runs.waits`,
less what a running one has already taken), each place that frees goes to the next in line; a
caller that said nothing counts as the mean length of recent runs. It says when a part of it is
only a first estimate. One client (a browser tab or script session, never the login: a class shares one login)
may hold at most ``per_client`` places, running or waiting, so one script cannot fill the line;
the line itself holds at most ``max_waiting`` callers, however many sessions there are, which
bounds the whole server. Both refusals say what to do.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections import deque
from typing import Any

from explorer.errors import ExplorerError

#: Runs that use the model at once in the app, unless EXPLORER_CONCURRENT_RUNS says otherwise.
DEFAULT_CAPACITY = 4
#: Places (running or waiting) one client may hold, unless EXPLORER_RUNS_PER_CLIENT says otherwise.
DEFAULT_PER_CLIENT = 4
#: Callers that may wait in line at once, unless EXPLORER_MAX_WAITING says otherwise.
DEFAULT_MAX_WAITING = 256
#: How many recent run lengths the estimate averages.
HISTORY = 20
#: Model events Gradio lets in at once: every caller reaches the gate, which runs or lines them up.
EVENT_LIMIT = 320


def client_of(request: Any) -> str:
    """Who a call comes from, for the per-client cap and the line: the browser tab or script session.

    Never the login: a teacher's one ``--auth`` login is shared by a whole class, and each student's
    page (each ``gradio_client.Client``) has its own session. A plain HTTP call without a session is
    counted by its address."""
    session = getattr(request, "session_hash", None) if request is not None else None
    if session:
        return f"session:{session}"
    client = getattr(request, "client", None) if request is not None else None
    host = getattr(client, "host", None)
    return f"address:{host}" if host else "session:anonymous"


def _env_count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        count = int(value)
    except ValueError:
        raise ExplorerError(f"{name}={value!r} is not a number", where=name, fix=f"set it to e.g. {default}") from None
    if count < 1:
        raise ExplorerError(f"{name} must be at least 1, got {count}", where=name, fix=f"set it to e.g. {default}")
    return count


def default_capacity() -> int:
    return _env_count("EXPLORER_CONCURRENT_RUNS", DEFAULT_CAPACITY)


def default_per_client() -> int:
    return _env_count("EXPLORER_RUNS_PER_CLIENT", DEFAULT_PER_CLIENT)


def default_max_waiting() -> int:
    return _env_count("EXPLORER_MAX_WAITING", DEFAULT_MAX_WAITING)


class Ticket:
    """One caller's place: waiting (``position`` >= 1) until admitted (``position`` 0), then released."""

    def __init__(self, gate: RunGate, client: str, expected: float | None = None, guessed: bool = False) -> None:
        self.gate = gate
        self.client = client
        #: Seconds this caller's runs will likely hold the model (None: unknown), and whether that is a first guess.
        self.expected = expected
        self.guessed = guessed
        self.admitted = threading.Event()
        self.released = False
        self.since = time.monotonic()
        self.started: float | None = None

    @property
    def position(self) -> int:
        """1 for the next caller in line, 2 behind it...; 0 once admitted (or released)."""
        return self.gate.position(self)

    @property
    def estimate(self) -> float | None:
        """Seconds until this caller is likely let in (None while there is nothing to judge by)."""
        forecast = self.gate.forecast(self)
        return forecast[0] if forecast is not None else None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds to be let in; True once admitted."""
        return self.admitted.wait(timeout)

    def release(self) -> None:
        """The run ended (or the caller left the line): its place goes to the next caller."""
        self.gate.release(self)

    def describe(self) -> str:
        """The waiting line as a caller reads it: place, and how long, if that can be judged yet."""
        position = self.position
        if position == 0:
            return "cancelled while waiting for the model" if self.released and self.started is None else "running"
        forecast = self.gate.forecast(self)
        wait = ""
        if forecast is not None:
            wait = f", about {wait_text(forecast[0])}" + (" by a first estimate" if forecast[1]
                                                         else " at the run lengths measured here")
        ahead = self.gate.capacity
        return (f"waiting for the model: number {position} in line{wait} ({ahead} run"
                f"{'s' if ahead != 1 else ''} at a time; this page updates when it starts)")


def wait_text(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


class RunGate:
    """At most ``capacity`` admitted tickets; the rest wait first come, first served."""

    def __init__(self, capacity: int | None = None, *, per_client: int | None = None,
                 max_waiting: int | None = None) -> None:
        self.capacity = capacity or default_capacity()
        self.per_client = per_client or default_per_client()
        self.max_waiting = max_waiting or default_max_waiting()
        self._lock = threading.Lock()
        self._running: list[Ticket] = []
        self._waiting: deque[Ticket] = deque()
        self._lengths: deque[float] = deque(maxlen=HISTORY)

    def enter(self, client: str, *, expected: float | None = None, guessed: bool = False) -> Ticket:
        """A place for ``client``: admitted at once when there is room, else at the end of the line.

        ``expected``: seconds its runs will likely take (``guessed``: a first estimate, not measured)."""
        with self._lock:
            held = sum(1 for t in (*self._running, *self._waiting) if t.client == client)
            if held >= self.per_client:
                raise ExplorerError(f"this client already has {held} runs running or waiting, the most one client "
                                    "may have at once", where="run",
                                    fix="wait for one of them to finish (each call returns when its run is stored), "
                                        "then send the next; the limit is EXPLORER_RUNS_PER_CLIENT on the server")
            if len(self._waiting) >= self.max_waiting:
                raise ExplorerError(f"{len(self._waiting)} runs are already waiting for the model, the most this "
                                    "server lets wait", where="run",
                                    fix="try again in a few minutes; the limit is EXPLORER_MAX_WAITING on the server")
            ticket = Ticket(self, client, expected, guessed)
            self._waiting.append(ticket)
            self._promote()
        return ticket

    def position(self, ticket: Ticket) -> int:
        with self._lock:
            try:
                return self._waiting.index(ticket) + 1
            except ValueError:
                return 0

    def forecast(self, ticket: Ticket) -> tuple[float, bool] | None:
        """Seconds until ``ticket`` is likely let in, and whether a first estimate went into it; (0, False)
        once admitted; None while a run it waits behind has no length to judge by."""
        with self._lock:
            if ticket not in self._waiting:
                return 0.0, False
            ahead = list(self._waiting)[:self._waiting.index(ticket)]
            recent = sum(self._lengths) / len(self._lengths) if self._lengths else None
            now = time.monotonic()
            guessed = False
            frees: list[float] = []  # when each place frees, soonest first
            for other in (*self._running, *ahead):
                length = other.expected if other.expected is not None else recent
                if length is None:
                    return None
                guessed = guessed or (other.guessed and other.expected is not None)
                if other in self._running:  # what is left of it (at least a second: it is still running)
                    frees.append(max(length - (now - (other.started or now)), 1.0))
                    continue
                if other is ahead[0]:  # places no run holds are free now
                    frees.extend([0.0] * (self.capacity - len(frees)))
                    heapq.heapify(frees)
                heapq.heappush(frees, heapq.heappop(frees) + length)  # it takes the first place that frees
        return (min(frees) if len(frees) >= self.capacity else 0.0), guessed

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.released:
                return
            ticket.released = True
            if ticket in self._running:
                self._running.remove(ticket)
                if ticket.started is not None:
                    self._lengths.append(time.monotonic() - ticket.started)
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
            self._promote()

    def _promote(self) -> None:
        while self._waiting and len(self._running) < self.capacity:
            ticket = self._waiting.popleft()
            ticket.started = time.monotonic()
            self._running.append(ticket)
            ticket.admitted.set()

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
