"""``retrieval-metrics`` wall time with the automatic thread choice against torch's own default, on one machine state.

Each run is a fresh ``python -m explorer retrieval-metrics`` process with an empty cache of its own
(so the pooled passages are embedded every time, which is the part that uses torch's threads) over
the same question sets. The two settings alternate, ``--rounds`` times each, back to back, so both
see the same load from whatever else runs on the machine; the load average is recorded before each
run. "torch default" passes ``--threads N`` with N = the count torch picks when nothing sets it
(one per physical core), which is what the command ran with before it chose for itself.

    .venv/bin/python -m benchmarks.bench_threads [--rounds 2] [--limit 50] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result
from explorer.paths import PROJECT_ROOT, shared_data_dir

OUT = Path(__file__).parent / "results" / "threads.md"


def _run(threads: int | None, limit: int, methods: str) -> tuple[float, str, str]:
    """One fresh process: (wall seconds, the load average before it, the thread line it printed)."""
    cache = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(EXPLORER_CACHE=str(cache), PYTHONPATH=str(PROJECT_ROOT), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", EXPLORER_DATA=str(shared_data_dir()))
    argv = [sys.executable, "-m", "explorer", "retrieval-metrics", "--methods", methods, "--retriever", "dense",
            "--limit", str(limit), "--out", "-"]
    if threads is not None:
        argv += ["--threads", str(threads)]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"retrieval-metrics failed:\n{done.stderr[-2000:]}")
    line = next((x for x in done.stderr.splitlines() if "torch thread" in x), "torch's default (nothing printed)")
    return seconds, load, line


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=50, help="questions per dataset (the pool is every paragraph)")
    parser.add_argument("--methods", default="bm25,sm,qdc,cfs")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()
    default = torch.get_num_threads()
    rows, times = [], {"automatic": [], f"torch default ({default})": []}
    for r in range(1, args.rounds + 1):
        for name, threads in (("automatic", None), (f"torch default ({default})", default)):
            seconds, load, line = _run(threads, args.limit, args.methods)
            times[name].append(seconds)
            rows.append(f"| {r} | {name} | {load} | {re.sub(r' [(]--threads N to choose[)]', '', line)} | "
                        f"{seconds:.1f} |")
            print(rows[-1], flush=True)
    auto, old = (statistics.median(v) for v in times.values())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    text = "\n".join([
        "# retrieval-metrics: automatic thread choice against torch's default (measured)",
        "",
        f"Made by `python -m benchmarks.bench_threads --rounds {args.rounds} --limit {args.limit} --methods "
        f"{args.methods}` ({time.strftime('%Y-%m-%d')}; {cpu_name()}, {cores} cores usable, shared with other "
        f"jobs; torch {torch.__version__}). Each run: a fresh process and an empty cache (the HotpotQA + MuSiQue dev "
        "pool embedded every time), `--retriever dense`, k = 3, 4, 6; the settings alternate back to back.",
        "",
        "| round | threads | load average before (1, 5, 15 min) | what the command chose | wall s |",
        "|---|---|---|---|---:|",
        *rows,
        "",
        f"Median wall time: automatic {auto:.1f} s, torch default {old:.1f} s: the default takes "
        f"{old / auto:.2f}x the automatic choice's time.",
        "",
    ])
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
