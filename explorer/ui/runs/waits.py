"""How long a live run will take on this server, told before it starts and while it waits in line.

A SEAKR run takes minutes on a CPU where wo-RAG takes seconds, so a page that only says
"processing" leaves a visitor guessing, and a line that guesses one length for every run told a
12-second wait as "about 5 min". The rates here are measured: the wall time of the complete runs
this server stored (the store's summary rows) and of those finished since it started, per method
and model. Rates do not transfer across models (Gemma-3 270M writes at half SmolLM2's speed), so
a method is measured only from runs on the same model. Before a run of a method has finished
here, a first estimate stands in for it and the text says so, so nobody mistakes a guess for a
measurement. Forks are left out: a fork replays its parent's prefix, so its wall time is not a
whole run's.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from explorer.errors import ExplorerError
from explorer.ui.serving.admission import wait_text

log = logging.getLogger("explorer.ui")

#: How many recent run lengths per method and model an estimate averages (recent runs reflect the
#: server's present load better than old ones).
HISTORY = 20
#: How many stored runs are read to learn the rates when the server starts.
STORED_RUNS = 500

#: Seconds a run of each method takes with the embedded default model on a 2-core CPU, as a first
#: estimate before this server has measured one (the recorded case studies took about this long).
#: Sampling (SEAKR samples several continuations per step) and extra model calls (BlendFilter's
#: augmentation and filtering, ETC's extra passes) cost several times a single pass.
FIRST_GUESS_SECONDS: dict[str, float] = {
    "wo": 10.0, "sr": 15.0, "fl": 25.0, "fs": 25.0, "flare": 20.0, "dragin": 30.0, "drrag": 15.0,
    "blendfilter": 60.0, "seakr": 180.0, "etc": 90.0, "targ": 20.0, "probing_rag": 30.0,
}
#: A method missing from the table above.
DEFAULT_FIRST_GUESS = 30.0
#: The share of their one-after-another time the methods of one press take together through the batch:
#: on a CPU the shared passes save little of the work (the nine methods took 0.82 to 0.86 of it,
#: BENCHMARKS.md, "Nine methods, from the page"), so the longest method alone would promise too little.
TOGETHER_SHARE = 0.85


@dataclass(frozen=True)
class WaitEstimate:
    """Seconds a run is likely to take; how many measured runs stand behind the least measured part of it;
    and the methods whose part is only a first estimate."""

    seconds: float
    measured_runs: int
    guessed: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        return not self.guessed

    def describe(self) -> str:
        """The figure for the page, saying whether it was measured here."""
        if self.measured:
            runs = f"{self.measured_runs} run{'s' if self.measured_runs != 1 else ''}"
            return f"about {wait_text(self.seconds)} on this server (measured over its last {runs})"
        which = ", ".join(self.guessed)
        verb = "has" if len(self.guessed) == 1 else "have"
        return f"about {wait_text(self.seconds)} (a first estimate: {which} {verb} not run on this server yet)"


def usable(row: Mapping[str, Any]) -> bool:
    """Whether a stored summary row measures a whole run: complete, timed, not a fork."""
    return (row.get("status") == "complete" and (row.get("wall_time") or 0) > 0
            and not row.get("parent_run_id"))


class RunRates:
    """Measured run lengths per (method, model), fed by stored rows and by runs as they finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lengths: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=HISTORY))

    def record(self, method: str, model: str, seconds: float | None) -> None:
        """A run of ``method`` on ``model`` finished after ``seconds`` of wall time."""
        if seconds is None or seconds <= 0:
            return
        with self._lock:
            self._lengths[(method.lower(), model)].append(float(seconds))

    def learn(self, trace: Any) -> bool:
        """Learn from a run that just ended (a Trace); False when it measures no whole run."""
        row = {"status": trace.status, "wall_time": trace.costs.total_time,
               "parent_run_id": (trace.fork or {}).get("parent") if isinstance(trace.fork, dict) else None}
        if not usable(row):
            return False
        self.record(trace.method, str((trace.model or {}).get("name", "")), trace.costs.total_time)
        return True

    def load_rows(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Learn from store summary rows (newest first, as ``RunStore.list`` gives them); returns how many counted.

        Only complete runs that are not forks count: an interrupted or failed run's wall time says
        nothing about how long a whole run takes."""
        kept = [r for r in rows if usable(r)]
        for row in reversed(kept):  # oldest first, so the newest stay within HISTORY
            self.record(str(row.get("method", "")), str(row.get("model", "")), float(row["wall_time"]))
        return len(kept)

    def load_store(self, store: Any, limit: int = STORED_RUNS) -> int:
        """Learn from the newest ``limit`` complete runs of a RunStore; an unreadable store teaches nothing."""
        try:
            return self.load_rows(store.list(status="complete", limit=limit))
        except ExplorerError as exc:
            log.warning("the stored runs could not be read for wait estimates: %s", exc.message)
            return 0

    def estimate(self, method: str, model: str) -> WaitEstimate:
        """The mean measured length of ``method`` on ``model``, else the first estimate, labelled."""
        key = method.lower()
        with self._lock:
            lengths = list(self._lengths.get((key, model), ()))
        if lengths:
            return WaitEstimate(sum(lengths) / len(lengths), len(lengths))
        return WaitEstimate(FIRST_GUESS_SECONDS.get(key, DEFAULT_FIRST_GUESS), 0, (key,))

    def estimate_all(self, methods: Iterable[str], model: str, *, together: bool = False) -> WaitEstimate:
        """Several methods of one press: one after another their lengths add; ``together`` (the engine batches
        them, sharing each forward pass) they take :data:`TOGETHER_SHARE` of that, and never less than the
        longest. Measured only if every one was."""
        parts = [(m, self.estimate(m, model)) for m in dict.fromkeys(methods)]
        if not parts:
            return WaitEstimate(0.0, 0)
        measured = [p.measured_runs for _, p in parts if p.measured]
        guessed = tuple(m for m, p in parts if not p.measured)
        lengths = [p.seconds for _, p in parts]
        seconds = max(max(lengths), TOGETHER_SHARE * sum(lengths)) if together else sum(lengths)
        return WaitEstimate(seconds, min(measured) if measured else 0, guessed)
