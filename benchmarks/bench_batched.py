"""Fast decoding with every signal, and concurrent runs sharing the model: measured side by side in one run.

1. Decode speed at batch 1, per model: greedy tokens/s of plain ``model.generate`` (sdpa), of the
   engine's own loop with every signal (today's path: attention probe, entropy, top-5, amax,
   RIND), and of the fast path (the batch's decode step: signals on the device; on CUDA replayed
   as a captured graph). Beside them the weight-bandwidth limit: the device's measured copy
   bandwidth divided by the bytes of weights one token reads (target on a GPU: the fast path at
   60 % of it or more for the 8B shape). The fast path's tokens and signals are compared with the
   loop's (bf16 on a GPU: the first token where a near-tie flipped, and the largest signal gap
   before it).
2. Questions per minute of DRAGIN and SEAKR with 1, 8 and 32 concurrent runs (CPU: 1, 4, 8): one
   at a time on today's loop, one at a time on the fast path, then N at once in one batch (target
   on a GPU: 10x the one-at-a-time rate at 32).

::

    python -m benchmarks.bench_batched                   # CPU: the embedded model, short configs (minutes)
    python -m benchmarks.bench_batched --device cuda     # GPU: random 1B and 8B shapes in bf16, < 8 min

On a GPU it needs no network and no model weights: the models are random weights of Llama-3.2-1B's
and Llama-3-8B's shapes built on the device; only the embedded tokenizer and the project's demo
corpus are read (benchmarks/gpu_run.sh says what to carry). The table is printed and written to
benchmarks/results/batched_{cpu,gpu}.md. A time budget (``--budget``) skips, with a note, any
cell that would not finish in time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.common import cpu_name, write_result  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
GPU_BANDWIDTH_TARGET = 0.60
GPU_SPEEDUP_TARGET = 10.0


@dataclass
class Plan:
    """What one run of the benchmark measures (the CPU and GPU modes differ only in these numbers)."""

    device: str
    dtype: str
    models: list[str]
    qpm_model: str
    prompt_tokens: int
    new_tokens: int
    repeats: int
    concurrency: list[int]
    configs: dict[str, dict[str, Any]]
    questions_alone: dict[str, int]
    budget: float
    notes: list[str] = field(default_factory=list)


def gpu_plan(budget: float) -> Plan:
    return Plan(device="cuda", dtype="bfloat16", models=["random:1b", "random:8b"], qpm_model="random:1b",
                prompt_tokens=1000, new_tokens=128, repeats=3, concurrency=[1, 8, 32],
                configs={"dragin": {}, "seakr": {}}, questions_alone={"dragin": 3, "seakr": 1}, budget=budget)


def cpu_plan(budget: float) -> Plan:
    short = {"max_length": 32, "fewshot": 2, "answer_tokens": 8}
    return Plan(device="cpu", dtype="float32", models=["embedded"], qpm_model="embedded", prompt_tokens=400,
                new_tokens=48, repeats=3, concurrency=[1, 4, 8],
                configs={"dragin": dict(short), "seakr": {**short, "k": 6, "max_steps": 2, "step_tokens": 16,
                                                          "candidates": 2}},
                questions_alone={"dragin": 2, "seakr": 1}, budget=budget)


# -- models ----------------------------------------------------------------------------------------------
def open_engine(spec: str, plan: Plan) -> Any:
    from explorer.engine.generation import Engine
    from explorer.engine.loader import load_model
    from explorer.engine.random_models import is_random_spec, load_random_model

    if is_random_spec(spec):
        lm = load_random_model(spec, dtype=plan.dtype, device=plan.device, attn_implementation="sdpa")
    else:
        lm = load_model(spec, dtype=plan.dtype, device=plan.device, attn_implementation="sdpa")
    return Engine(lm)


def weight_bytes(model: Any) -> int:
    """Bytes of weights one decode step reads (a tied head counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def copy_bandwidth(device: str) -> float:
    """Bytes per second a device-to-device copy moves, counting bytes read and written."""
    size = (2 << 30) if device.startswith("cuda") else (256 << 20)
    src = torch.empty(size // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync(device)
    rounds = 20 if device.startswith("cuda") else 5
    start = time.perf_counter()
    for _ in range(rounds):
        dst.copy_(src)
    sync(device)
    seconds = time.perf_counter() - start
    del src, dst
    return 2 * size * rounds / seconds


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- 1. decode speed -----------------------------------------------------------------------------------
def decode_speed(spec: str, plan: Plan, lines: list[str]) -> None:
    from explorer.engine.batching import Batcher

    built = time.perf_counter()
    engine = open_engine(spec, plan)
    model = engine.model
    batcher = Batcher(engine)
    ids = engine.encode_prompt(engine.decode(list(range(1000, 1000 + plan.prompt_tokens))))[1]
    prompt = engine.decode(ids[len(engine.prefix_ids):])
    tensor = torch.tensor([ids], device=plan.device)
    n = plan.new_tokens
    seconds_built = time.perf_counter() - built

    def timed(fn) -> float:
        sync(plan.device)
        start = time.perf_counter()
        fn()
        sync(plan.device)
        return time.perf_counter() - start

    def plain() -> None:
        with torch.inference_mode():
            model.generate(tensor, max_new_tokens=n, min_new_tokens=n, do_sample=False)

    outputs: dict[str, Any] = {}

    def engine_run(fast: bool) -> None:
        engine.batcher = batcher if fast else None
        outputs[fast] = engine.generate(prompt, max_new_tokens=n, attention=True, ignore_eos=True)
        engine.batcher = None

    runs = {"plain `model.generate` (sdpa)": plain,
            "engine today: its loop, every signal": lambda: engine_run(False),
            "fast path: batch step, every signal": lambda: engine_run(True)}
    for fn in runs.values():  # warm-up: kernels, allocator, the captured graph
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(plan.repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(v) for name, v in times.items()}
    bandwidth = copy_bandwidth(plan.device)
    weights = weight_bytes(model)
    limit = bandwidth / weights
    params = sum(p.numel() for p in model.parameters()) / 1e9
    lines += [f"### Decode speed, {engine.lm.name} ({params:.2f} B parameters, {plan.dtype}, {plan.device}): "
              f"{n} greedy tokens after a {len(ids)}-token prompt, median of {plan.repeats} alternating rounds", "",
              f"Built in {seconds_built:.1f} s. Weights read per token: {weights / 1e9:.2f} GB; copy bandwidth "
              f"{bandwidth / 1e9:.0f} GB/s; weight-bandwidth limit **{limit:.0f} tokens/s**.", "",
              "| run | seconds | tokens/s | x plain generate | share of the bandwidth limit |",
              "|---|---:|---:|---:|---:|"]
    base = medians["plain `model.generate` (sdpa)"]
    for name, secs in medians.items():
        lines.append(f"| {name} | {secs:.3f} | {n / secs:.1f} | {base / secs:.2f} | {n / secs / limit:.0%} |")
    fast_share = n / medians["fast path: batch step, every signal"] / limit
    lines += ["", agreement(outputs[False], outputs[True]), "",
              f"Decode step mode: {batcher.step.mode}" + (f" (fell back: {batcher.step.fallback})"
                                                            if batcher.step.fallback else "") + ".", ""]
    if plan.device.startswith("cuda") and spec.startswith("random:8b"):
        met = "met" if fast_share >= GPU_BANDWIDTH_TARGET else "NOT met"
        lines += [f"Fast path at {fast_share:.0%} of the weight-bandwidth limit (target >= "
                  f"{GPU_BANDWIDTH_TARGET:.0%}: {met}).", ""]
    batcher.close()


def agreement(loop: Any, fast: Any) -> str:
    """Where the fast path's tokens first differ from the loop's, and the largest signal gap before that."""
    same = 0
    for a, b in zip(loop.ids, fast.ids, strict=False):
        if a != b:
            break
        same += 1
    gaps: dict[str, float] = {}
    for ta, tb in zip(loop.tokens[:same], fast.tokens[:same], strict=True):
        for key, value in ta.signals.items():
            other = tb.signals.get(key)
            if isinstance(value, (int, float)) and isinstance(other, (int, float)) and not isinstance(value, bool):
                gaps[key] = max(gaps.get(key, 0.0), abs(float(value) - float(other)))
    shown = ", ".join(f"{k} {v:.2g}" for k, v in sorted(gaps.items()))
    verdict = "all tokens identical" if same == len(loop.ids) == len(fast.ids) else \
        f"identical for the first {same} of {len(loop.ids)} tokens (then a near-tie went the other way)"
    return f"Fast path against the loop: {verdict}; largest signal gaps over those tokens: {shown or 'none'}."


# -- 2. questions per minute ----------------------------------------------------------------------------
def questions(count: int) -> list[str]:
    from explorer.eval.datasets import resolve_sources

    pool = [q.question for q in resolve_sources(["demo"])[0].load(None)]
    return [pool[i % len(pool)] for i in range(count)]


def run_cell(runtime: Any, method: str, config: dict[str, Any], texts: list[str], at_once: int) -> tuple[float, int]:
    """Seconds for ``texts`` run with ``at_once`` in flight, and how many completed."""
    from explorer.methods.base import run_question

    def one(text: str) -> str:
        return run_question(method, text, runtime, config=dict(config)).status

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        statuses = list(pool.map(one, texts))
    return time.perf_counter() - start, sum(s == "complete" for s in statuses)


def throughput(plan: Plan, lines: list[str], deadline: float) -> None:
    from explorer.engine.batching import Batcher
    from explorer.runtime import runtime_for

    engine = open_engine(plan.qpm_model, plan)
    runtime = runtime_for(engine, "demo")
    batcher = Batcher(engine)
    lines += [f"### Questions per minute, {engine.lm.name} ({plan.dtype}, {plan.device}), demo corpus (BM25)", "",
              "| method | runs at once | decoding | questions | seconds | questions/min | x one at a time (today) "
              "| x one at a time (fast path) | rows per step |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for method, config in plan.configs.items():
        engine.batcher = batcher
        run_cell(runtime, method, config, questions(1), 1)  # warm-up: spaCy, kernels, the captured graphs
        base: dict[str, float] = {}
        per_question = None
        cells = [(1, "today's loop"), *[(c, "batch" if c > 1 else "fast path") for c in plan.concurrency]]
        for at_once, decoding in cells:
            count = plan.questions_alone[method] if at_once == 1 else at_once
            left = deadline - time.monotonic()
            # Skipped when it would overrun the budget, assuming at most an eighth of the runs' speed-up.
            expected = per_question * count / max(1.0, at_once / 8) if per_question else 0.0
            if expected > left:
                lines.append(f"| {method} | {at_once} | {decoding} | {count} | skipped: ~{expected:.0f} s expected, "
                             f"{max(0.0, left):.0f} s of the budget left | | | | |")
                continue
            engine.batcher = None if decoding == "today's loop" else batcher
            steps, rows = batcher.steps, batcher.row_steps
            seconds, done = run_cell(runtime, method, config, questions(count), at_once)
            qpm = 60 * done / seconds
            base.setdefault(decoding, qpm)
            if at_once == 1 and decoding == "fast path":
                per_question = seconds / max(1, done)
            stepped = batcher.steps - steps
            per_step = f"{(batcher.row_steps - rows) / stepped:.1f}" if stepped else "-"
            today, fast = base.get("today's loop"), base.get("fast path")
            vs_today = f"{qpm / today:.2f}" if today else "-"
            vs_fast = f"{qpm / fast:.2f}" if fast else "-"
            lines.append(f"| {method} | {at_once} | {decoding} | {done}/{count} | {seconds:.1f} | {qpm:.2f} | "
                         f"{vs_today} | {vs_fast} | {per_step} |")
            print(lines[-1], flush=True)
    lines += ["", "Configs (the rest are the methods' paper defaults): "
              + "; ".join(f"{m} {c or 'defaults'}" for m, c in plan.configs.items()) + ".",
              f"Decode step mode: {batcher.step.mode}" + (f" (fell back: {batcher.step.fallback})"
                                                            if batcher.step.fallback else "") + ".", ""]
    if plan.device.startswith("cuda"):
        lines.append(f"Target: {GPU_SPEEDUP_TARGET:.0f}x the one-at-a-time rate with 32 runs at once.")
    batcher.close()


def machine(device: str) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"{cpu_name()}, {os.cpu_count()} cores"
    import transformers

    return (f"{where}; torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
            f"{transformers.__version__}, Python {platform.python_version()}; load average {load:.1f} at start")


def main() -> None:
    parser = argparse.ArgumentParser(description="fast decoding with every signal, and concurrent runs in one batch")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run (default 420 on a GPU, 1800 on a CPU); cells that would "
                             "not fit are skipped with a note")
    parser.add_argument("--models", default=None, help="decode-speed models, comma-separated (default: random:1b,"
                                                       "random:8b on a GPU, embedded on a CPU)")
    parser.add_argument("--skip-speed", action="store_true", help="only the questions-per-minute table")
    parser.add_argument("--skip-qpm", action="store_true", help="only the decode-speed tables")
    parser.add_argument("--out", default=None, help="results file (default benchmarks/results/batched_DEVICE.md)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device on this machine")
    plan = gpu_plan(args.budget or 420.0) if cuda else cpu_plan(args.budget or 1800.0)
    if args.models:
        plan.models = [m.strip() for m in args.models.split(",") if m.strip()]
    started = time.monotonic()
    deadline = started + plan.budget
    lines = [f"# Fast decoding and batched runs ({'GPU' if cuda else 'CPU'})", "",
             f"`python -m benchmarks.bench_batched{' --device cuda' if cuda else ''}`", "",
             f"Machine: {machine(args.device)}", ""]
    if not args.skip_speed:
        for spec in plan.models:
            decode_speed(spec, plan, lines)
            print("\n".join(lines), flush=True)
            if cuda:  # the next model needs the memory (an 8B shape takes 15 GB)
                import gc

                gc.collect()
                torch.cuda.empty_cache()
    if not args.skip_qpm:
        throughput(plan, lines, deadline)
    lines.append(f"\nWhole run: {time.monotonic() - started:.0f} s.")
    report = "\n".join(lines)
    print(report)
    write_result(report + "\n", args.out or RESULTS / f"batched_{'gpu' if cuda else 'cpu'}.md")


if __name__ == "__main__":
    main()
