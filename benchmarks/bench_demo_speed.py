"""SEAKR against DRAGIN on the demo question, before and after the sampler's speed-ups, side by side in one process.

The demo question is DRAGIN's paper case question (the page's opening question); every method runs
with its default settings over the demo corpus on the embedded model. Three runs, alternating per
round so that load from other work hits them alike:

* DRAGIN as the app runs it (prefix cache on);
* SEAKR as before: every sampled row holding its own copy of the prompt's keys and values, every
  context encoded whole;
* SEAKR now: the rows read the prompt's states once (:mod:`explorer.engine.shared_prefix`) and each
  context's opening comes from the prefix cache, as in the app.

Each run reports wall seconds and the process's CPU seconds (one torch thread: on a machine shared
with other work the CPU seconds are what the run itself cost, the wall seconds what it waited too).
The two SEAKR traces are compared (span and sample tokens, retrievals, answer). Target: SEAKR at
most 4x DRAGIN.

    python -m benchmarks.bench_demo_speed [--rounds 1] [--out benchmarks/results/demo_speed.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import cpu_name, write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "demo_speed.md"
QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
TARGET = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import torch

    from explorer.engine.prefix_cache import PrefixCache
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime

    runtime = open_runtime("embedded", "demo")
    engine = runtime.engine
    run_question("wo", QUESTION, runtime, config={"max_length": 8})  # warm-up: first passes, spaCy, the index

    def run(method: str, before: bool) -> tuple[float, float, object]:
        engine.shares_prefix = False if before else None
        engine.prefix_cache = None if before else PrefixCache()
        wall, cpu = time.perf_counter(), time.process_time()
        trace = run_question(method, QUESTION, runtime)
        return time.perf_counter() - wall, time.process_time() - cpu, trace

    cases = (("DRAGIN (prefix cache, as the app)", "dragin", False), ("SEAKR before", "seakr", True),
             ("SEAKR now", "seakr", False))
    load0 = os.getloadavg()[0]
    found: dict[str, list[tuple[float, float, object]]] = {label: [] for label, _, _ in cases}
    for _ in range(args.rounds):
        for label, method, before in cases:
            found[label].append(run(method, before))
            w, c, t = found[label][-1]
            print(f"{label}: wall {w:.1f} s, cpu {c:.1f} s, costs {t.costs.to_dict()}", flush=True)
    dragin_cpu = statistics.median(c for _, c, _ in found[cases[0][0]])
    dragin_wall = statistics.median(w for w, _, _ in found[cases[0][0]])
    lines = ["# SEAKR and DRAGIN on the demo question, before and after", "",
             f"`python -m benchmarks.bench_demo_speed --rounds {args.rounds}` on {cpu_name()}, "
             f"{torch.get_num_threads()} torch thread(s); load average {load0:.1f} at start, "
             f"{os.getloadavg()[0]:.1f} at the end. Question: {QUESTION}", "",
             "| run | wall s | CPU s | x DRAGIN (CPU) | x DRAGIN (wall) | LLM calls | sampled sequences | generated "
             "tokens | forward passes | prompt tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, _, _ in cases:
        rows = found[label]
        wall, cpu = statistics.median(w for w, _, _ in rows), statistics.median(c for _, c, _ in rows)
        costs = rows[-1][2].costs
        lines.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {cpu / dragin_cpu:.2f} | {wall / dragin_wall:.2f} | "
                     f"{costs.llm_calls} | {costs.sampled_sequences} | {costs.generated_tokens:,} | "
                     f"{costs.forward_passes} | {costs.prompt_tokens:,} |")
    a, b = found["SEAKR before"][-1][2], found["SEAKR now"][-1][2]

    def spans(t):
        return [[tok["id"] for tok in e.payload["tokens"]] for e in t.of_kind("generation")]

    def samples(t):
        return [[s["text"] for s in e.payload["samples"]] for e in t.of_kind("uncertainty")
                if e.payload["estimator"] == "gram"]

    def values(t):
        return [e.payload["value"] for e in t.of_kind("uncertainty") if e.payload["estimator"] == "gram"]

    same = spans(a) == spans(b) and samples(a) == samples(b) and a.answer == b.answer
    gaps = [abs(x - y) for x, y in zip(values(a), values(b), strict=False) if x is not None and y is not None]
    now_cpu = statistics.median(c for _, c, _ in found["SEAKR now"])
    before_cpu = statistics.median(c for _, c, _ in found["SEAKR before"])
    lines += ["", f"SEAKR traces before and after: {'the same' if same else 'DIFFERENT'} span tokens, samples and "
              f"answer; largest |U before - U now| {max(gaps, default=0.0):.2g}.",
              f"Target SEAKR at most {TARGET:.0f}x DRAGIN: {'met' if now_cpu / dragin_cpu <= TARGET else 'NOT met'} "
              f"on CPU seconds ({now_cpu / dragin_cpu:.2f}x; before {before_cpu / dragin_cpu:.2f}x)."]
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
