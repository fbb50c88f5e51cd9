"""Executing an evaluation's runs: one task is one method on one question, wherever it runs.

The evaluation driver (:mod:`explorer.eval.runner`) plans the tasks and alone writes the store;
an executor turns tasks into traces. :class:`InProcess` runs them one after another in this
process; :class:`explorer.eval.cluster.RayPool` runs them on Ray workers. Both call
:func:`execute`, which seeds every run from its own key, so a task gives the same trace whichever
process, worker or order runs it.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from explorer.eval.question import Question
from explorer.eval.runtime_spec import RuntimeSpec
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.trace import Trace


@dataclass(frozen=True)
class Task:
    """One run to make: its place in the plan, the question, the arm and the run's own seed."""

    index: int
    dataset: str
    question: Question
    method: str
    variant: str
    given: dict[str, Any]
    config: dict[str, Any]  # the resolved config, recorded by a run that crashed before it began
    seed: int


def seed_everything(value: int) -> None:
    import numpy as np
    import torch

    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def execute(runtime: Runtime, task: Task, cancel: threading.Event | None = None) -> Trace:
    """Run one task; an unexpected exception becomes a failed run's trace instead of ending the evaluation."""
    seed_everything(task.seed)
    try:
        # The given values as a dict, so run_question applies the model's preset and notes it.
        return run_question(task.method, task.question.question, runtime, variant=task.variant,
                            config=dict(task.given), gold=task.question.gold(), cancel=cancel)
    except Exception as exc:  # a crash in one method on one question must not lose the evaluation
        model = runtime.engine.fingerprint() if hasattr(runtime.engine, "fingerprint") else {}
        return error_trace(task, model, dict(runtime.corpus), f"{type(exc).__name__}: {exc}")


def error_trace(task: Task, model: dict[str, Any], corpus: dict[str, Any], message: str) -> Trace:
    """The record of a run that failed outside the method's own error handling."""
    return Trace(question=task.question.question, method=task.method, variant=task.variant,
                 config=dict(task.config), model=dict(model), corpus=dict(corpus), gold=task.question.gold(),
                 status="error", error=message)


def timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Executor(Protocol):
    """What the driver needs from whatever runs its tasks."""

    @property
    def loaded(self) -> bool:
        """Whether the model is already loaded (asking its name then costs nothing)."""

    def model_name(self) -> str:
        """The name of the model the runs use (configs resolve against its presets); loads what it must."""

    def runs(self, tasks: list[Task]) -> Iterator[tuple[Task, Trace]]:
        """Each task with its trace, as they finish (any order)."""

    def record(self) -> dict[str, Any]:
        """How the runs were produced: workers, devices, timings (stored with the evaluation)."""

    def close(self) -> None:
        """Release workers; safe to call more than once and after a failure."""


@dataclass
class InProcess:
    """Runs tasks in this process, on a runtime opened once (or the one given).

    ``batch`` > 1 runs that many tasks at once, each in its own thread, with the engine's batcher
    on (:mod:`explorer.engine.batching`): their decode steps share forward passes, and each run's
    trace is the one it would have alone. Runs come back as they finish.
    """

    spec: RuntimeSpec
    runtime: Runtime | None = None
    progress: Callable[[str], None] | None = None
    batch: int = 1
    run_seconds: float = field(default=0.0, init=False)

    @property
    def loaded(self) -> bool:
        return self.runtime is not None

    def _runtime(self) -> Runtime:
        if self.runtime is None:
            self.runtime = self.spec.open(progress=self.progress)
        return self.runtime

    def model_name(self) -> str:
        return str(self._runtime().engine.fingerprint().get("name", ""))

    def runs(self, tasks: list[Task]) -> Iterator[tuple[Task, Trace]]:
        runtime = self._runtime()
        started = time.perf_counter()
        try:
            if self.batch <= 1:
                for task in tasks:
                    yield task, execute(runtime, task)
            else:
                yield from self._batched(runtime, tasks)
        finally:
            self.run_seconds = time.perf_counter() - started

    def _batched(self, runtime: Runtime, tasks: list[Task]) -> Iterator[tuple[Task, Trace]]:
        """``batch`` tasks in flight at a time, in plan order; an interrupt cancels the ones running."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        from explorer.engine.batching import enable

        enable(runtime.engine)
        stop = threading.Event()
        queue = iter(tasks)
        with ThreadPoolExecutor(max_workers=self.batch, thread_name_prefix="eval-run") as pool:
            running = {}
            try:
                for task in itertools.islice(queue, self.batch):
                    running[pool.submit(execute, runtime, task, stop)] = task
                while running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        task = running.pop(future)
                        following = next(queue, None)
                        if following is not None:
                            running[pool.submit(execute, runtime, following, stop)] = following
                        yield task, future.result()
            finally:
                stop.set()  # an interrupted evaluation: the runs still going end within a token

    def record(self) -> dict[str, Any]:
        fingerprint = self._runtime().engine.fingerprint() if self.runtime is not None else {}
        device = str(fingerprint.get("device") or self.spec.device)
        return {"mode": "process", "workers": 1, "pid": os.getpid(), "nodes": [socket.gethostname()],
                "devices": [local_device(device)], "threads": _threads(), "run_seconds": round(self.run_seconds, 3),
                "batch": self.batch}

    def close(self) -> None:
        return None


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def local_device(device: str) -> dict[str, Any]:
    """The device this process runs on, as the evaluation records it: node, kind, index and name."""
    import torch

    node = socket.gethostname()
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        return {"node": node, "kind": "cuda", "index": index, "name": torch.cuda.get_device_name(index)}
    return {"node": node, "kind": device.split(":")[0], "index": None, "name": device.split(":")[0]}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def produced_by(executions: list[dict[str, Any]]) -> str:
    """One line saying which processes, workers and devices made an evaluation's runs, and how many each."""
    parts = []
    for entry in executions:
        if not entry.get("runs"):
            continue
        devices = [d for d in entry.get("devices") or [] if isinstance(d, dict)]
        names: dict[str, int] = {}
        for d in devices:
            names[str(d.get("name"))] = names.get(str(d.get("name")), 0) + 1
        kinds = ", ".join(f"{n} × {name}" if n > 1 else name for name, n in names.items()) or "cpu"
        if any(d.get("kind") == "cpu" for d in devices) and entry.get("threads"):
            per = " per worker" if entry.get("mode") == "ray" else ""
            kinds += f", {_plural(int(entry['threads']), 'thread')}{per}"
        nodes = _plural(len(set(entry.get("nodes") or [])) or 1, "node")
        if entry.get("mode") == "ray":
            where = "a local Ray instance" if entry.get("address") == "local" else f"the Ray cluster {entry['address']}"
            who = (f"{_plural(int(entry.get('workers') or 0), 'Ray worker')} ({where}) on "
                   f"{_plural(len(devices), 'device')} ({kinds}) on {nodes}")
        else:
            who = f"one process (no Ray) on {kinds}"
            if int(entry.get("batch") or 1) > 1:
                who += f", {entry['batch']} questions at a time in one decode batch"
        text = f"{who}: {_plural(int(entry['runs']), 'run')}"
        if entry.get("requeued"):
            text += f", {entry['requeued']} re-queued after a worker died"
        parts.append(text)
    return "; ".join(parts)
