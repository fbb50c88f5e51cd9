"""Running an evaluation's tasks on Ray workers: a local Ray instance or an existing cluster.

Each worker is a Ray actor that opens the runtime once, from the driver's
:class:`~explorer.eval.runtime_spec.RuntimeSpec`, and then runs (question, method, config) tasks
with :func:`~explorer.eval.execution.execute`, the same function the single-process evaluation
uses. Traces come back to the driver as plain dicts; the driver alone writes the run store, in
batches, so the store keeps one writer and resuming works exactly as without Ray.

What happens when things go wrong:

- a worker whose process dies (killed, out of memory, its node lost) has its unfinished tasks put
  back at the front of the queue for the other workers; Ray restarts it (up to
  :data:`MAX_RESTARTS` times) and it rejoins once it has reloaded its model. A task whose
  worker died under it :data:`MAX_ATTEMPTS` times is stored as a failed run instead of being
  retried for ever (it is what kills them);
- the driver interrupted (Ctrl-C, SIGTERM, an exception) stops its workers; traces already
  received are written, tasks in flight are dropped and redone by the next resume.

The corpus index is built by the driver (:meth:`RuntimeSpec.prepare`) into the on-disk cache
before any worker starts, so workers on the driver's machine, or on nodes sharing its cache
folder, load it instead of building it. A worker that had to build it says so, and the driver
passes that on.

Ray is imported only here, and only when a pool starts: without ``--workers`` or
``--ray-address`` it is never imported.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import ConfigError, ExplorerError
from explorer.eval.execution import Task, error_trace, execute, local_device
from explorer.eval.runtime_spec import RuntimeSpec
from explorer.trace import Trace

#: Tasks a worker holds at once while many are left, so it never waits for the driver between two runs.
PREFETCH = 2
#: How often Ray restarts a worker whose process died.
MAX_RESTARTS = 3
#: How many times a task may lose its worker before it is stored as failed.
MAX_ATTEMPTS = 3
RAY_REQUIREMENT = "ray==2.60.0"


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how wide to run: ``workers`` on a local instance, or on the cluster at ``address``."""

    workers: int | None = None
    address: str | None = None
    gpus: float | None = None  # per worker; None: 1 when the device is a GPU, else 0
    cpus: float = 1.0  # per worker; also the worker's torch thread count (at least 1)
    start_timeout: float = 900.0  # seconds to wait for workers to load their model

    @property
    def enabled(self) -> bool:
        return self.workers is not None or self.address is not None

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus))

    def check(self, device: str) -> float:
        """Refuse contradictory options before anything starts; the GPUs each worker gets."""
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}", where="--workers",
                              fix="give the number of Ray workers, e.g. --workers 2")
        if not self.cpus > 0:
            raise ConfigError(f"--worker-cpus must be more than 0, got {self.cpus}", where="--worker-cpus",
                              fix="give the CPUs (and torch threads) per worker, e.g. --worker-cpus 1")
        gpus = self.gpus if self.gpus is not None else (1.0 if device.startswith("cuda") else 0.0)
        if gpus < 0:
            raise ConfigError(f"--worker-gpus must be 0 or more, got {gpus}", where="--worker-gpus",
                              fix="e.g. --worker-gpus 1 (or 0.5 to put two workers on one GPU)")
        if gpus > 0 and not device.startswith("cuda"):
            raise ConfigError(f"--worker-gpus {gpus:g} gives each worker a GPU, but the device is {device}",
                              where="--device", fix="add --device cuda, or leave --worker-gpus out")
        if device.startswith("cuda") and gpus == 0:
            raise ConfigError("--device cuda with --worker-gpus 0: Ray would hide every GPU from the workers",
                              where="--worker-gpus", fix="give each worker a GPU share, e.g. --worker-gpus 1")
        if device.startswith("cuda:"):
            raise ConfigError(f"--device {device}: on Ray, each worker is given its own GPU and sees it as cuda",
                              where="--device", fix="use --device cuda and let --worker-gpus assign the GPUs")
        return gpus


class EvalWorker:
    """A Ray actor's body: one runtime, opened once, and the tasks run on it.

    A failure to open the runtime is kept and reported by :meth:`describe`, so the driver can
    show the worker's own message (a missing model on that node) instead of a remote traceback.
    """

    def __init__(self, spec: dict[str, Any], threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.spec = RuntimeSpec(**spec)
        self.runtime = None
        self.error: str | None = None
        started = time.perf_counter()
        try:
            self.runtime = self.spec.open()
        except ExplorerError as exc:
            self.error = exc.message
        except Exception as exc:  # noqa: BLE001 - reported to the driver with its type
            self.error = f"{type(exc).__name__}: {exc}"
        self.load_seconds = time.perf_counter() - started

    def describe(self) -> dict[str, Any]:
        import ray
        import torch

        info: dict[str, Any] = {"pid": os.getpid(), "node": socket.gethostname(), "threads": torch.get_num_threads(),
                                "error": self.error, "load_seconds": round(self.load_seconds, 3)}
        if self.runtime is None:
            return info
        device = local_device(self.spec.device)
        gpu_ids = ray.get_gpu_ids()
        if gpu_ids:
            device["index"] = str(gpu_ids[0])  # the node's GPU, not the worker's renumbered cuda:0
        info.update(device=device, model=self.runtime.engine.fingerprint(), corpus=dict(self.runtime.corpus),
                    index_built=bool(getattr(self.runtime.retriever, "index_built", False)))
        return info

    def run(self, task: Task) -> dict[str, Any]:
        if self.runtime is None:
            raise ExplorerError(self.error or "the worker has no runtime")
        return execute(self.runtime, task).to_dict()


@dataclass
class _Worker:
    handle: Any
    number: int
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "ready"  # ready, restarting or dead
    inflight: int = 0
    restarts: int = 0


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExplorerError("running on Ray workers needs the ray package, which is not installed",
                            fix=f"pip install {RAY_REQUIREMENT} (it is in requirements.txt), or leave out "
                                "--workers/--ray-address") from exc
    return ray


class RayPool:
    """Ray workers behind the driver's executor interface (:class:`explorer.eval.execution.Executor`)."""

    def __init__(self, spec: RuntimeSpec, options: ClusterOptions, progress: Callable[[str], None] | None = None):
        self.spec = spec
        self.options = options
        self.gpus = options.check(spec.device)
        self.say = progress or (lambda _m: None)
        self.ray: Any = None
        self.owned = False  # True when this pool started the Ray instance (and so shuts it down)
        self.address = "local"
        self.workers: list[_Worker] = []
        self.closed = False
        self.requeued = 0
        self.failed_tasks = 0
        self.startup_seconds = 0.0
        self.run_seconds = 0.0
        self._attempts: dict[int, int] = {}

    # --- starting -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.ray is not None:
            return
        started = time.perf_counter()
        self.spec.prepare(progress=self.say)  # the corpus index, built once here and read by the workers
        self.ray = import_ray()
        self._connect()
        count = self._worker_count()
        self.say(f"starting {count} Ray worker{'s' if count != 1 else ''} ({self.options.cpus:g} CPU"
                 + (f", {self.gpus:g} GPU" if self.gpus else "") + " each)")
        self._spawn(count)
        self.startup_seconds = time.perf_counter() - started

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():  # Ray already started or joined by this process (a notebook, a test): use it
            self.address = "local" if self.options.address is None else self.options.address
            return
        quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
        with _own_sigterm():
            self._init(quiet)
        self.owned = True

    def _init(self, quiet: dict[str, Any]) -> None:
        ray = self.ray
        try:
            if self.options.address is None:
                cpus = max(os.cpu_count() or 1, math.ceil((self.options.workers or 1) * self.options.cpus))
                ray.init(address="local", num_cpus=cpus, **quiet)
            else:
                self.address = self.options.address
                ray.init(address=self.options.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.options.address or "a local Ray instance"
            raise ExplorerError(f"could not start or reach Ray at {where}: {exc}",
                                fix="check the address (ray status on the head node prints it), or use --workers N "
                                    "for a local instance") from exc

    def _worker_count(self) -> int:
        total = self.ray.cluster_resources()
        fits = int(total.get("CPU", 0) // self.options.cpus)
        if self.gpus:
            if not total.get("GPU"):
                raise ExplorerError(f"--worker-gpus {self.gpus:g} asked for, but the Ray cluster has no GPUs",
                                    fix="run on a cluster with GPU nodes, or leave out --worker-gpus and --device")
            fits = min(fits, int(total["GPU"] // self.gpus))
        if fits < 1:
            raise ExplorerError(f"the Ray cluster ({_resources(total)}) cannot hold one worker of "
                                f"{self.options.cpus:g} CPU" + (f" and {self.gpus:g} GPU" if self.gpus else ""),
                                fix="ask for less with --worker-cpus/--worker-gpus, or add nodes")
        wanted = self.options.workers or fits
        if wanted > fits:
            self.say(f"the Ray cluster ({_resources(total)}) holds {fits} of the {wanted} workers asked for: "
                     f"starting {fits}")
        return min(wanted, fits)

    def _spawn(self, count: int) -> None:
        ray = self.ray
        remote = ray.remote(num_cpus=self.options.cpus, num_gpus=self.gpus, max_restarts=MAX_RESTARTS,
                            max_task_retries=0)(EvalWorker)
        handles = [remote.remote(self.spec.to_dict(), self.options.threads) for _ in range(count)]
        pings = {h.describe.remote(): n for n, h in enumerate(handles)}
        ready, waiting = ray.wait(list(pings), num_returns=len(pings), timeout=self.options.start_timeout)
        errors = []
        for ref in ready:
            number = pings[ref]
            info = self._get_info(ref)
            if info.get("error"):
                errors.append(info["error"])
                ray.kill(handles[number], no_restart=True)
                continue
            self.workers.append(_Worker(handles[number], number, info))
        for ref in waiting:
            ray.kill(handles[pings[ref]], no_restart=True)
        self._check_started(count, errors, len(waiting))

    def _get_info(self, ref: Any) -> dict[str, Any]:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return {"error": f"the worker failed to start: {_first_line(exc)}"}

    def _check_started(self, count: int, errors: list[str], waiting: int) -> None:
        if not self.workers:
            reason = errors[0] if errors else f"none started within {self.options.start_timeout:g} s"
            raise ExplorerError(f"no Ray worker could open the runtime: {reason}",
                                fix="make the model and corpus available on every node (same paths, or a shared "
                                    "EXPLORER_CACHE), or check the cluster's free resources with `ray status`")
        if errors or waiting:
            self.say(f"{len(self.workers)} of {count} workers started ({len(errors)} failed"
                     + (f": {errors[0]}" if errors else "") + f", {waiting} not scheduled in time)")
        names = {str((w.info.get("model") or {}).get("name")) for w in self.workers}
        if len(names) > 1:
            raise ExplorerError(f"the workers loaded different models ({', '.join(sorted(names))})",
                                fix="give every node the same model files for --model")
        builders = sorted({w.info["node"] for w in self.workers if w.info.get("index_built")})
        if builders:
            self.say(f"workers on {', '.join(builders)} built the corpus index themselves: their cache folder does "
                     "not hold the driver's; point EXPLORER_CACHE of every node at shared storage")

    # --- the executor interface ---------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return bool(self.workers)

    def model_name(self) -> str:
        self.start()
        return str((self.workers[0].info.get("model") or {}).get("name", ""))

    def runs(self, tasks: list[Task]) -> Iterator[tuple[Task, Trace]]:
        self.start()
        started = time.perf_counter()
        queue: deque[Task] = deque(tasks)
        pending: dict[Any, tuple[_Worker, Task | None]] = {}  # a None task is a ping to a restarting worker
        try:
            while queue or any(task is not None for _, task in pending.values()):
                self._dispatch(queue, pending)
                ready, _ = self.ray.wait(list(pending), num_returns=1)
                worker, task = pending.pop(ready[0])
                if task is None:
                    self._pinged(worker, ready[0], pending)
                    continue
                worker.inflight -= 1
                trace = self._result(ready[0], worker, task, queue, pending)
                if trace is not None:
                    yield task, trace
        finally:
            self.run_seconds = time.perf_counter() - started

    def _dispatch(self, queue: deque[Task], pending: dict[Any, tuple[_Worker, Task | None]]) -> None:
        ready = [w for w in self.workers if w.state == "ready"]
        # Near the end, one task per worker: a second one queued behind a long run would wait
        # while another worker sits idle.
        depth = PREFETCH if len(queue) > PREFETCH * len(ready) else 1
        for worker in ready:
            while worker.inflight < depth and queue:
                task = queue.popleft()
                pending[worker.handle.run.remote(task)] = (worker, task)
                worker.inflight += 1
        if not pending:
            raise ExplorerError("every Ray worker has died, so the evaluation cannot go on",
                                fix="check the workers' logs (ray logs on the head node) and the nodes' memory, "
                                    "then rerun the same command to resume")

    def _result(self, ref: Any, worker: _Worker, task: Task, queue: deque[Task],
                pending: dict[Any, tuple[_Worker, Task | None]]) -> Trace | None:
        exceptions = self.ray.exceptions
        try:
            return Trace.from_dict(self.ray.get(ref))
        except exceptions.RayActorError as exc:
            return self._lost(worker, task, exc, queue, pending)
        except exceptions.RayError as exc:  # the task itself failed outside the method's own handling
            self.failed_tasks += 1
            return self._failed(worker, task, _first_line(exc))

    def _lost(self, worker: _Worker, task: Task, exc: Exception, queue: deque[Task],
              pending: dict[Any, tuple[_Worker, Task | None]]) -> Trace | None:
        """A task whose worker died: back to the front of the queue, or stored as failed after MAX_ATTEMPTS."""
        if worker.state == "ready":
            worker.state = "restarting"
            self.say(f"worker {worker.number} (pid {worker.info.get('pid')}) died: {_first_line(exc)}; "
                     "its runs go to the other workers")
            pending[worker.handle.describe.remote()] = (worker, None)
        attempts = self._attempts[task.index] = self._attempts.get(task.index, 0) + 1
        if attempts >= MAX_ATTEMPTS:
            return self._failed(worker, task, f"the Ray worker running it died {attempts} times "
                                              f"(last: {_first_line(exc)})")
        self.requeued += 1
        queue.appendleft(task)
        return None

    def _failed(self, worker: _Worker, task: Task, message: str) -> Trace:
        return error_trace(task, worker.info.get("model") or {}, worker.info.get("corpus") or {}, message)

    def _pinged(self, worker: _Worker, ref: Any, pending: dict[Any, tuple[_Worker, Task | None]]) -> None:
        exceptions = self.ray.exceptions
        try:
            info = self.ray.get(ref)
        except exceptions.ActorUnavailableError:  # still restarting: ask again
            time.sleep(0.5)
            pending[worker.handle.describe.remote()] = (worker, None)
            return
        except exceptions.RayActorError as exc:
            worker.state = "dead"
            self.say(f"worker {worker.number} is gone for good: {_first_line(exc)}")
            return
        if info.get("error"):
            worker.state = "dead"
            self.say(f"worker {worker.number} restarted but cannot open the runtime: {info['error']}")
            return
        worker.info, worker.state = info, "ready"
        worker.restarts += 1
        self.say(f"worker {worker.number} is back (pid {info.get('pid')})")

    def record(self) -> dict[str, Any]:
        """Workers, devices and timings of this pool, for the evaluation's ``executions`` list."""
        devices: list[dict[str, Any]] = []
        for worker in self.workers:
            device = worker.info.get("device")
            if device and device not in devices:
                devices.append(device)
        return {"mode": "ray", "address": self.address, "workers": len(self.workers),
                "worker_cpus": self.options.cpus, "worker_gpus": self.gpus, "threads": self.options.threads,
                "nodes": sorted({str(w.info.get("node")) for w in self.workers}), "devices": devices,
                "pids": [w.info.get("pid") for w in self.workers], "requeued": self.requeued,
                "restarts": sum(w.restarts for w in self.workers),
                "startup_seconds": round(self.startup_seconds, 3), "run_seconds": round(self.run_seconds, 3)}

    def close(self) -> None:
        """Stop the workers (their unfinished tasks are dropped) and the Ray instance this pool started."""
        if self.ray is None or self.closed:
            return
        self.closed = True
        for worker in self.workers:
            try:
                self.ray.kill(worker.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.owned:
            self.ray.shutdown()
            self.owned = False


@contextmanager
def _own_sigterm() -> Iterator[None]:
    """Keep this process's SIGTERM handler across ``ray.init`` (which installs one that exits at once).

    The evaluation command turns SIGTERM into an interrupt that writes the finished runs and marks
    the evaluation interrupted; that must hold with Ray as without it.
    """
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _resources(total: dict[str, float]) -> str:
    return f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
