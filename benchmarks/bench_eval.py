"""Evaluation throughput: questions per minute per method on the embedded model on CPU.

Each method runs through the real evaluation pipeline (``run_evaluation``: generation, retrieval,
trace, batched SQLite writes) on the same few questions, after the model and the index are
loaded once; the wall time of that call is what a user waits for. Beside it are the method's
retrievals and LLM calls per question, from the stored traces, and the DRAGIN paper's retrieval
counts on HotpotQA (its table 3, #Num) for the same methods, to compare the shape of the costs.

    python benchmarks/bench_eval.py [--questions 3] [--dataset hotpotqa] [--methods wo,sr,...]
        [--model embedded] [--device cpu] [--dtype float32] [--out benchmarks/results/eval_throughput.md]
    python benchmarks/bench_eval.py --model random-1b --device cuda --dtype bfloat16   # the GPU figure

Numbers taken on a shared machine while other jobs run are provisional; the load average at the
start and end is printed with them.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import write_result  # noqa: E402
from explorer.eval.runner import EvalSettings, build_arms, run_evaluation  # noqa: E402
from explorer.eval.scores import score_evaluation  # noqa: E402
from explorer.methods import METHODS  # noqa: E402
from explorer.paths import shared_data_dir  # noqa: E402
from explorer.store import RunStore  # noqa: E402

#: DRAGIN paper, table 3: retrieval calls per question on HotpotQA (Llama2-7b-chat, Llama2-13b-chat, Vicuna-13b).
PAPER_HQA_RETRIEVALS = {"fl": (3.809, 3.194, 3.564), "fs": (4.152, 4.583, 5.701), "flare": (1.064, 3.378, 1.078),
                        "dragin": (3.013, 3.505, 3.184)}
#: Fixed by design (not in the paper's table): wo-RAG never retrieves, SR-RAG retrieves once.
BY_DESIGN = {"wo": 0.0, "sr": 1.0}
DEFAULT_METHODS = ("wo", "sr", "fl", "fs", "flare", "dragin", "seakr", "blendfilter", "drrag")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _paper(method: str) -> str:
    if method in PAPER_HQA_RETRIEVALS:
        return " / ".join(f"{x:.3f}" for x in PAPER_HQA_RETRIEVALS[method])
    if method in BY_DESIGN:
        return f"{BY_DESIGN[method]:.0f} (by design)"
    return "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=3, help="questions per method (default 3)")
    parser.add_argument("--dataset", default="hotpotqa", help="hotpotqa (default; demo without the benchmark data)")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every registered method)")
    parser.add_argument("--model", default="embedded",
                        help="embedded, a model path, or random-1b (random ~1B Llama-style weights, for GPU timing)")
    parser.add_argument("--random-layers", type=int, default=16, help="layers of random-1b (16 = ~1B parameters)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--set", dest="settings", action="append", default=[], help="[method.]name=value")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as markdown here")
    args = parser.parse_args()

    import torch

    dataset, corpus = args.dataset, "benchmark"
    if dataset != "demo" and not shared_data_dir().is_dir():
        print(f"benchmark data not found at {shared_data_dir()}: timing demo questions on the demo corpus")
        dataset, corpus = "demo", "demo"
    if dataset == "demo":
        corpus = "demo"
    methods = (args.methods.split(",") if args.methods else [m for m in DEFAULT_METHODS if m in METHODS])
    load_start = _load()
    started = time.perf_counter()
    from explorer.runtime import open_runtime

    if args.model == "random-1b":
        # Throughput only: random weights write random text, so the answer columns mean nothing.
        from benchmarks.bench_seakr import random_1b
        from explorer.runtime import runtime_for

        runtime = runtime_for(random_1b(args.device, args.dtype, args.random_layers), corpus)
    else:
        runtime = open_runtime(args.model, corpus, dtype=args.dtype, device=args.device)
    load_seconds = time.perf_counter() - started
    fingerprint = runtime.engine.fingerprint()
    header = [
        f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
        f"- model: {fingerprint.get('name')} on {args.device} ({args.dtype}); corpus {corpus}; "
        f"attention signals: {fingerprint.get('attention_signals')}; loaded in {load_seconds:.1f} s",
        f"- questions: first {args.questions} of {dataset}; method settings: "
        f"{' '.join(args.settings) if args.settings else 'defaults (max_length 100, 6 exemplars)'}",
        f"- load average at start: {load_start}",
        "- GPU: " + (torch.cuda.get_device_name(0) if torch.cuda.is_available() else
                     "none visible to this process; no GPU measurement in this file"),
    ]
    print("\n".join(header))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "bench.sqlite")
        for method in methods:
            arms = build_arms([method], settings=[s for s in args.settings
                                                  if "." not in s.split("=")[0] or s.startswith(method + ".")])
            settings = EvalSettings(name=method, datasets=[dataset], arms=arms, limit=args.questions,
                                    model=args.model, corpus=corpus, dtype=args.dtype, device=args.device)
            t0 = time.perf_counter()
            result = run_evaluation(settings, store, runtime=runtime, show_progress=False)
            seconds = time.perf_counter() - t0
            scores = score_evaluation(store, method)
            cell = scores.cell(scores.labels[0], dataset)
            per_minute = 60.0 * result.ran / seconds if seconds else float("nan")
            rows.append((method, per_minute, seconds / max(1, result.ran), cell.means["retrievals"],
                         cell.means["llm_calls"], cell.means["generated_tokens"], result.errors))
            print(f"{method:>12}: {per_minute:6.2f} questions/min ({seconds:.1f} s for {result.ran})", flush=True)
    table = ["| method | questions/min | s/question | retrievals/q | LLM calls/q | tokens/q | failed | "
             "paper HotpotQA retrievals/q (L2-7B / L2-13B / V-13B) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for method, qpm, spq, ret, llm, tok, failed in rows:
        table.append(f"| {method} | {qpm:.2f} | {spq:.1f} | {ret:.2f} | {llm:.2f} | {tok:.1f} | {failed} | "
                     f"{_paper(method)} |")
    footer = [f"- load average at end: {_load()}"]
    if rows:
        base = rows[0][2]
        footer.append("- seconds per question relative to " + rows[0][0] + ": "
                      + ", ".join(f"{m} {spq / base:.1f}x" for m, _, spq, *_ in rows))
    print("\n".join(["", *table, "", *footer]))
    if args.out:
        command = "python benchmarks/bench_eval.py " + " ".join(sys.argv[1:])
        text = "\n".join(["# Evaluation throughput", "", f"`{command.strip()}`", "", *header, "", *table, "",
                          *footer, ""])
        write_result(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
