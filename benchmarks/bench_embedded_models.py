"""DRAGIN on the two embedded models over the demo questions: how often it retrieves, and how long a question takes.

Thresholds do not transfer across models, which is why the explorer carries a second model: the
same questions, the same method and prompts, on SmolLM2-135M-Instruct and Gemma-3-270M. Each
model runs DRAGIN (paper variant) once with its preset θ (explorer/methods/presets.py, measured
by benchmarks/calibrate_thresholds.py) and once with the paper's θ = 1.2, and the table gives the
share of questions on which retrieval fired at least once, the mean retrievals per question, and
the mean seconds per question (one process, models loaded once, single questions in turn).

    .venv/bin/python -m benchmarks.bench_embedded_models [--limit 41] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result
from explorer.eval.datasets import load_dataset
from explorer.methods.base import run_question
from explorer.methods.presets import preset_for
from explorer.runtime import open_runtime

OUT = Path(__file__).parent / "results" / "embedded_models.md"
MODELS = ("embedded", "gemma3-270m")
PAPER_THETA = 1.2


def run_model(spec: str, limit: int, say) -> list[str]:
    runtime = open_runtime(spec, "demo", progress=say)
    name = runtime.engine.fingerprint()["name"]
    preset = preset_for(name, "dragin", "paper").get("threshold")
    rows = []
    for label, theta in (("preset", preset), ("paper default", PAPER_THETA)):
        if theta is None:
            continue
        fired, retrievals, seconds, errors = [], [], [], 0
        for q in load_dataset("demo", limit=limit):
            started = time.perf_counter()
            trace = run_question("dragin", q.question, runtime, variant="paper", config={"threshold": theta})
            seconds.append(time.perf_counter() - started)
            triggers = sum(1 for e in trace.events if e.kind == "trigger")
            fired.append(triggers > 0)
            retrievals.append(trace.costs.retrievals)
            errors += trace.status != "complete"
        say(f"{name} θ={theta}: {sum(fired)}/{len(fired)} fired")
        rows.append(f"| {name} | {label} θ = {theta:g} | {len(fired)} | **{sum(fired) / len(fired):.0%}** "
                    f"({sum(fired)}) | {statistics.mean(retrievals):.2f} | **{statistics.mean(seconds):.1f}** | "
                    f"{statistics.median(seconds):.1f} | {errors} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=41, help="demo questions per model (41 = all)")
    parser.add_argument("--model", action="append", default=None, help="model spec (repeatable; default: both)")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()

    def say(message: str) -> None:
        print(message, flush=True)

    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    for spec in args.model or MODELS:
        rows += run_model(spec, args.limit, say)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    text = "\n".join([
        "# DRAGIN on the two embedded models (demo questions)",
        "",
        f"Made by `python -m benchmarks.bench_embedded_models --limit {args.limit}` ({time.strftime('%Y-%m-%d')}; "
        f"{cpu_name()}; load average {' '.join(load_before)} at start, {' '.join(load_after)} at the end). "
        "DRAGIN paper variant, demo corpus (BM25), all other settings at their defaults; float32 on the CPU, "
        "attention backend auto (sdpa + the last-layer probe).",
        "",
        "| model | θ | questions | fired on (share) | retrievals per question | seconds per question (mean) | "
        "seconds (median) | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ])
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
