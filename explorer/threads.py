"""How many threads torch's kernels get: the cores this process may use that nothing else is using now.

torch starts one intra-op thread per physical core. On a machine shared with other jobs that is
the wrong number: when the cores are busy, every matrix product waits for its slowest thread,
and the threads of several processes fight for the same cores (BENCHMARKS.md measures
``retrieval-metrics`` both ways on a loaded machine). So the commands that compute choose the
count at start:

    threads = max(1, min(cores, torch's own default, floor(cores - load)))

where ``cores`` is what this process may run on (``os.sched_getaffinity``, lowered to the cgroup
CPU quota when one is set) and ``load`` the one-minute load average (``os.getloadavg``): the
runnable processes competing for those cores. A core half in use is not counted free, and one
thread is always left. The choice is made once, when the command starts (the load average is
itself a one-minute mean, so it does not follow short bursts).

``--threads N`` on those commands sets the count outright; ``OMP_NUM_THREADS`` (or
``MKL_NUM_THREADS``) in the environment is taken as the user's choice too and left alone.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count chosen and what it was chosen from (printed, and recorded where runs are recorded)."""

    threads: int
    cores: int
    load: float | None
    how: str  # "automatic", "--threads" or the environment variable that set it

    def describe(self) -> str:
        if self.how != "automatic":
            return f"{self.threads} torch thread{'s' if self.threads != 1 else ''} ({self.how})"
        load = "unknown" if self.load is None else f"{self.load:.2f}"
        return (f"{self.threads} torch thread{'s' if self.threads != 1 else ''}: {self.cores} cores, load {load} "
                "(--threads N to choose)")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, lowered to a cgroup CPU quota when there is one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


def _cgroup_quota() -> float | None:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cfs_quota_us``/``cfs_period_us``), or None when unlimited."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def current_load() -> float | None:
    """The one-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def automatic_threads(cores: int, load: float | None, ceiling: int | None = None) -> int:
    """The rule: the whole free cores (``cores - load``, rounded down), at least 1, at most ``cores``, ``ceiling``."""
    top = max(1, min(cores, ceiling or cores))
    if load is None:
        return top
    return max(1, min(top, math.floor(cores - load)))


_torch_default: int | None = None


def torch_default() -> int:
    """torch's own thread count, as it was before anything here changed it (one per physical core)."""
    global _torch_default
    if _torch_default is None:
        import torch

        _torch_default = int(torch.get_num_threads())
    return _torch_default


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """What to run with: ``requested`` (``--threads``), else the environment's setting, else the automatic rule."""
    cores = usable_cores()
    if requested is not None:
        return ThreadChoice(requested, cores, None, "--threads")
    for name in _ENVIRONMENT:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return ThreadChoice(int(value), cores, None, name)
    load = current_load()
    return ThreadChoice(automatic_threads(cores, load, torch_default()), cores, load, "automatic")


def apply_threads(requested: int | None = None) -> ThreadChoice:
    """Choose (:func:`choose_threads`) and set torch's intra-op thread count."""
    import torch

    torch_default()
    choice = choose_threads(requested)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice
