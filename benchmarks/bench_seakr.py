"""What SEAKR's uncertainty costs: U(c) with k samples against one greedy generation of the same length.

Measured side by side in one run on the same prompt (a SEAKR step context for a demo question):

* greedy: ``Engine.generate`` of L tokens, the cost of one ordinary generation;
* U(c): :func:`explorer.engine.uncertainty.measure`'s work for SEAKR, k rows sampled in ONE batch
  from one shared prefill, each with its end state, plus the Gram log-determinant;
* HF generate: ``model.generate(num_return_sequences=k, do_sample=True)``, the plain way to get k
  samples (it pre-fills the prompt k times and captures no state), as the comparison point.

Every sampled row is held to L tokens (no stop strings; EOS is rare in this format and reported)
so all three do the same number of decoding steps. Target: U(c) at most 3x the greedy generation
on CPU (at most 1.5x on a GPU, where a batch of 20 costs little more than one row).

Then SEAKR itself runs with its default settings on a few demo questions, and the table gives
LLM calls, sampled sequences, retrievals and forward passes per question.

    python benchmarks/bench_seakr.py [--k 20] [--length 32] [--repeats 3] [--questions 4] [--device cpu]
    python benchmarks/bench_seakr.py --model random-1b --device cuda --dtype bfloat16 --questions 0

``random-1b`` is a randomly initialised Llama-style model of about 1B parameters (Llama-3.2-1B's
shape with the embedded tokenizer), for the GPU check; its text is noise, so only the cost table
means anything for it.

The table is printed and written to benchmarks/results/seakr.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.common import write_result  # noqa: E402
from explorer.engine.generation import Engine, Sampling  # noqa: E402
from explorer.engine.hidden import HiddenSpec  # noqa: E402
from explorer.engine.sampling import sample  # noqa: E402
from explorer.engine.uncertainty import gram  # noqa: E402
from explorer.methods import prompts  # noqa: E402
from explorer.paths import DEMO_CORPUS_DIR  # noqa: E402

TARGET_CPU = 3.0
TARGET_GPU = 1.5
RESULTS = Path(__file__).resolve().parent / "results" / "seakr.md"
CASE = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"


def _timed(fn) -> tuple[float, object]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def _load_other(own: float = 0.0) -> str:
    """The 1-minute load average, flagged when work other than this benchmark's ``own`` threads is running."""
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        return "load average unknown"
    cores = os.cpu_count() or 1
    return f"load average {load1:.1f} on {cores} cores" + (" (other work shares this machine: timings are "
                                                           "provisional)" if load1 - own > 0.75 * cores else "")


def _own_threads() -> float:
    """What this benchmark itself adds to the load average just after it ran."""
    return float(min(torch.get_num_threads(), os.cpu_count() or 1))


def cost_of_u(engine: Engine, k: int, length: int, repeats: int) -> list[str]:
    shots = prompts.exemplars(CASE, "auto", 6)
    segments = prompts.build_prompt(CASE, shots=shots)
    _text, ids, _ = engine.encode_segments(segments)
    model = engine.model
    sampling = Sampling(seed=0)
    load_before = _load_other()

    def greedy():
        return engine.generate(segments, max_new_tokens=length, attention=False)

    def u_of_c():
        batch = sample(engine, segments, k=k, max_new_tokens=length, sampling=sampling, hidden=HiddenSpec())
        return batch, gram(batch.samples)

    def hf_generate():
        with torch.inference_mode():
            return model.generate(input_ids=torch.tensor([ids], device=engine.device), do_sample=True, top_k=50,
                                  top_p=0.9, temperature=1.0, num_return_sequences=k, max_new_tokens=length,
                                  min_new_tokens=length, pad_token_id=engine.tokenizer.pad_token_id)

    greedy()  # warm-up (allocator, kernels)
    # The three are timed back to back in every round and the ratios taken per round, so load from
    # other work that comes and goes hits a round's numerator and denominator alike.
    times: dict[str, list[float]] = {"greedy": [], "u": [], "hf": []}
    ratios: list[float] = []
    hf_ratios: list[float] = []
    for _ in range(repeats):
        t_g, g = _timed(greedy)
        t_u, (batch, est) = _timed(u_of_c)
        t_h, _ = _timed(hf_generate)
        times["greedy"].append(t_g)
        times["u"].append(t_u)
        times["hf"].append(t_h)
        ratios.append(t_u / t_g)
        hf_ratios.append(t_h / t_g)
    t_greedy, t_u, t_hf = (statistics.median(times[key]) for key in ("greedy", "u", "hf"))
    ratio, hf_ratio = statistics.median(ratios), statistics.median(hf_ratios)
    rows = [len(s.ids) for s in batch.samples]
    target = TARGET_GPU if engine.device.type == "cuda" else TARGET_CPU
    lines = [
        f"### Cost of U(c): k = {k}, {length} new tokens, prompt {len(ids)} tokens, {engine.lm.name}, "
        f"{engine.lm.dtype} on {engine.device.type}",
        "",
        f"| what | seconds (median of {repeats} rounds) | x greedy (median of the rounds' ratios) |",
        "|---|---:|---:|",
        f"| greedy generation (1 row, {len(g.ids)} tokens) | {t_greedy:.3f} | 1.00 |",
        f"| U(c): {k} samples in one batch + end states + Gram logdet | {t_u:.3f} | {ratio:.2f} |",
        f"| HF `generate(num_return_sequences={k})`, no states | {t_hf:.3f} | {hf_ratio:.2f} |",
        "",
        f"Per-round ratios U(c)/greedy: {', '.join(f'{r:.2f}' for r in ratios)}.",
        f"U(c) = {est.value:.3f} from {est.details['valid']} samples (mean {statistics.mean(rows):.1f} tokens, "
        f"{batch.empty} empty, {batch.forward_passes} forward passes). Target: at most {target:.1f}x greedy -> "
        f"{'met' if ratio <= target else 'NOT met'} ({ratio:.2f}x). U(c) vs HF generate: "
        f"{statistics.median(h / r for h, r in zip(hf_ratios, ratios, strict=True)):.2f}x faster.",
        f"Machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{load_before} before, {_load_other(_own_threads())} after.",
    ]
    return lines


def random_1b(device: str, dtype: str, layers: int = 16) -> Engine:
    """A ~1B-parameter Llama-style model with random weights (hidden 2048, MLP 8192, 32/8 heads)."""
    from explorer.engine.random_models import random_llama_1b

    lm = random_llama_1b(device, dtype, layers)
    print(f"random model: {lm.num_parameters / 1e9:.2f} B parameters", flush=True)
    return Engine(lm)


def per_question(n: int, model: str, device: str, dtype: str) -> list[str]:
    from explorer.eval.metrics import exact_match
    from explorer.methods import run_question
    from explorer.runtime import open_runtime

    runtime = open_runtime(model, "demo", device=device, dtype=dtype)
    rows = [json.loads(line) for line in (DEMO_CORPUS_DIR / "questions.jsonl").read_text().splitlines() if line]
    chosen = [r for r in rows if r.get("case_study") == "seakr"] + [r for r in rows if not r.get("case_study")]
    lines = [f"### SEAKR per question (default settings: k = 20, N = 3, at most 7 steps / 5 passages), "
             f"{len(chosen[:n])} demo questions", "",
             "| question | LLM calls | sampled sequences | retrievals | forward passes | steps fired / checked "
             "| seconds | answer | EM |", "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    totals = {"llm": 0, "samples": 0, "retrievals": 0, "passes": 0}
    for r in chosen[:n]:
        t = time.perf_counter()
        trace = run_question("seakr", r["question"], runtime)
        seconds = time.perf_counter() - t
        c = trace.costs
        checks = [e for e in trace.of_kind("check")]
        fired = sum(e.payload["fired"] is not None for e in checks)
        em = exact_match(trace.answer or "", r["answers"])
        totals["llm"] += c.llm_calls
        totals["samples"] += c.sampled_sequences
        totals["retrievals"] += c.retrievals
        totals["passes"] += c.forward_passes
        answer = (trace.answer or "").replace("|", "/")[:40]
        lines.append(f"| {r['question'][:60]} | {c.llm_calls} | {c.sampled_sequences} | {c.retrievals} | "
                     f"{c.forward_passes} | {fired} / {len(checks)} | {seconds:.0f} | {answer} | {em:.0f} |")
    m = max(1, len(chosen[:n]))
    load_note = f"Seconds are wall time with 1 run at a time; {_load_other(_own_threads())} at the end."
    lines.append(f"| **mean** | {totals['llm'] / m:.1f} | {totals['samples'] / m:.1f} | "
                 f"{totals['retrievals'] / m:.1f} | {totals['passes'] / m:.0f} | | | | |")
    lines += ["", "LLM calls count one per batched sampling call (k samples + the greedy row) and one per plain "
              "generation; sampled sequences count every sampled row.", load_note]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--length", type=int, default=32, help="tokens generated per row")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--questions", type=int, default=4, help="demo questions for the per-question table (0: skip)")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--random-layers", type=int, default=16, help="layers of random-1b (16 = ~1B parameters)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from explorer.runtime import open_engine

    if args.model == "random-1b":
        engine = random_1b(args.device, args.dtype, args.random_layers)
        args.questions = 0  # random text: per-question costs would say nothing
    else:
        engine = open_engine(args.model, device=args.device, dtype=args.dtype)
    lines = ["# SEAKR benchmark", "", *cost_of_u(engine, args.k, args.length, args.repeats), ""]
    if engine.device.type != "cuda":
        lines += [f"GPU check (random ~1B Llama-style model, bfloat16, target at most {TARGET_GPU}x): not run on "
                  "this machine (no GPU); run `python benchmarks/bench_seakr.py --model random-1b --device cuda "
                  "--dtype bfloat16 --questions 0` on a GPU.", ""]
    print("\n".join(lines), flush=True)
    if args.questions > 0:
        table = per_question(args.questions, args.model, args.device, args.dtype)
        print("\n".join(table), flush=True)
        lines += [*table, ""]
    write_result("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
