"""Scaling on Ray workers: questions per minute with 1 and with 2 workers, side by side in one run.

Each method runs the same questions through the real evaluation (``run_evaluation`` with Ray
workers, each loading the model once, the driver writing the store), first on 1 worker and then
on 2, on one local Ray instance started once. Throughput is taken over the run phase (from the
first task handed out to the last trace received, as the evaluation records it), so the
workers' start-up (loading the model) is reported beside it and not mixed into it. Efficiency is
throughput(2) / (2 x throughput(1)); the target is at least 0.8.

    python benchmarks/bench_scaling.py [--methods wo,dragin,seakr] [--questions wo=10,dragin=6,seakr=4]
        [--dataset hotpotqa] [--model embedded] [--workers 1,2] [--out benchmarks/results/scaling.md]
    # the GPU figure (random ~1B-parameter weights; one worker per GPU):
    python benchmarks/bench_scaling.py --model random:1b --device cuda --dtype bfloat16 --worker-gpus 1 --workers 1

Every worker runs one torch thread (``--worker-cpus 1``). On a machine shared with other jobs
the efficiency says as much about the other jobs as about the explorer: the load average is
printed before and after every row.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import cpu_name, write_result  # noqa: E402
from explorer.eval.cluster import ClusterOptions  # noqa: E402
from explorer.eval.runner import EvalSettings, build_arms, run_evaluation  # noqa: E402
from explorer.paths import shared_data_dir  # noqa: E402
from explorer.store import RunStore  # noqa: E402

DEFAULT_QUESTIONS = {"wo": 10, "dragin": 6, "seakr": 4}
TARGET = 0.8


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _questions(text: str | None, methods: list[str]) -> dict[str, int]:
    counts = {m: DEFAULT_QUESTIONS.get(m, 6) for m in methods}
    for item in (text or "").split(","):
        if "=" in item:
            method, _, n = item.partition("=")
            counts[method.strip()] = int(n)
        elif item.strip():
            counts = {m: int(item) for m in methods}
    return counts


def _answers(store: RunStore, name: str) -> dict[tuple, str | None]:
    return {(row["dataset"], row["question_id"]): trace.answer for row, trace in store.traces(evaluation=name)}


def measure(method: str, workers: int, args: argparse.Namespace, limit: int, dataset: str, corpus: str,
            store: RunStore) -> dict:
    name = f"{method}-{workers}"
    settings = EvalSettings(name=name, datasets=[dataset], arms=build_arms([method], settings=args.settings),
                            limit=limit, model=args.model, corpus=corpus, dtype=args.dtype, device=args.device)
    load_before = _load()
    result = run_evaluation(settings, store, show_progress=False, progress=lambda _m: None,
                            cluster=ClusterOptions(workers=workers, cpus=1, gpus=args.worker_gpus))
    execution = store.evaluation(name)["settings"]["executions"][-1]
    seconds = execution["run_seconds"]
    return {"method": method, "workers": workers, "runs": result.ran, "errors": result.errors, "seconds": seconds,
            "per_minute": 60.0 * result.ran / seconds if seconds else float("nan"),
            "startup": execution["startup_seconds"], "devices": execution["devices"],
            "load": f"{load_before} -> {_load()}", "answers": _answers(store, name)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="wo,dragin,seakr")
    parser.add_argument("--questions", default=None, help="per method (wo=10,dragin=6,seakr=4) or one number for all")
    parser.add_argument("--dataset", default="hotpotqa", help="hotpotqa (default; demo without the benchmark data)")
    parser.add_argument("--model", default="embedded", help="embedded, a model path, random:1b (GPU timing)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--worker-gpus", type=float, default=None)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare (default 1,2)")
    parser.add_argument("--set", dest="settings", action="append", default=[], help="[method.]name=value")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as markdown here")
    args = parser.parse_args()

    import ray
    import torch

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    counts = _questions(args.questions, methods)
    widths = [int(w) for w in args.workers.split(",")]
    dataset, corpus = args.dataset, "benchmark"
    if dataset == "demo" or not shared_data_dir().is_dir():
        dataset, corpus = "demo", "demo"
    header = [f"- machine: {cpu_name()}, {os.cpu_count()} CPUs visible; torch {torch.__version__}; "
              f"ray {ray.__version__}",
              f"- model: {args.model} on {args.device} ({args.dtype}); corpus {corpus}; questions: the first N of "
              f"{dataset} (N per method below); method settings: {' '.join(args.settings) or 'defaults'}",
              "- each worker: 1 CPU, 1 torch thread" + (f", {args.worker_gpus:g} GPU" if args.worker_gpus else ""),
              f"- load average at start: {_load()}"]
    print("\n".join(header), flush=True)
    ray.init(address="local", num_cpus=max([os.cpu_count() or 1, *widths]), include_dashboard=False,
             log_to_driver=False, logging_level=logging.ERROR)
    rows = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = RunStore(Path(tmp) / "scaling.sqlite")
            for method in methods:
                for workers in widths:
                    row = measure(method, workers, args, counts[method], dataset, corpus, store)
                    rows.append(row)
                    print(f"{method:>8} x{workers}: {row['per_minute']:6.2f} questions/min ({row['seconds']:.1f} s for "
                          f"{row['runs']}; start-up {row['startup']:.1f} s; load {row['load']})", flush=True)
    finally:
        ray.shutdown()
    table, notes = _table(rows, widths)
    footer = [f"- load average at end: {_load()}; whole run {time.perf_counter() - started:.0f} s", *notes]
    print("\n".join(["", *table, "", *footer]))
    if args.out:
        command = "python benchmarks/bench_scaling.py " + " ".join(sys.argv[1:])
        write_result("\n".join(["# Scaling on Ray workers", "", f"`{command.strip()}`", "", *header, "", *table, "",
                                *footer, ""]), args.out)
    return 0


def _table(rows: list[dict], widths: list[int]) -> tuple[list[str], list[str]]:
    table = ["| method | questions | workers | questions/min | speed-up | efficiency | same answers as 1 worker | "
             "worker start-up s | load average (before -> after) |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    notes = []
    base = {r["method"]: r for r in rows if r["workers"] == widths[0]}
    for r in rows:
        first = base[r["method"]]
        speedup = r["per_minute"] / first["per_minute"] if first["per_minute"] else float("nan")
        efficiency = speedup * first["workers"] / r["workers"]
        same = "yes" if r["answers"] == first["answers"] else "NO"
        table.append(f"| {r['method']} | {r['runs']} | {r['workers']} | {r['per_minute']:.2f} | {speedup:.2f}x | "
                     f"{efficiency:.2f} | {same} | {r['startup']:.1f} | {r['load']} |")
        if r["workers"] != first["workers"] and efficiency < TARGET:
            notes.append(f"- {r['method']}: efficiency {efficiency:.2f} at {r['workers']} workers, under the {TARGET} "
                         "target")
        if r["errors"]:
            notes.append(f"- {r['method']} x{r['workers']}: {r['errors']} failed runs")
    return table, notes


if __name__ == "__main__":
    raise SystemExit(main())
