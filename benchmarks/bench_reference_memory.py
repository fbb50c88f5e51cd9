"""Memory of the reference DRAGIN's query step against the text's length: the whole attention matrix vs its rows.

The reference variant's query ("real words") re-encodes ``question + answer so far + flagged
sentence`` and reads the last layer's attention of the sentence's tokens. Reading it from the whole
``(n, n)`` matrix (as ``output_attentions`` gives it) costs memory quadratic in n; computing only
the sentence's rows (``explorer.engine.attention_rows``) costs ``rows x n``. Each case runs in a
fresh process with the embedded model and reports the growth of the process's peak resident memory
during the one call, for a text of 512 and of 4,096 tokens; ``--runs`` adds whole DRAGIN runs (paper
and reference variants) whose question is padded to those lengths.

    .venv/bin/python -m benchmarks.bench_reference_memory [--runs] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result
from explorer.paths import PROJECT_ROOT

OUT = Path(__file__).parent / "results" / "reference_memory.md"
ROWS = 24  # about a flagged sentence's tokens
CASE = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(1)
from explorer.runtime import open_engine
from explorer.engine.attention_rows import attention_rows
way, n = sys.argv[1], int(sys.argv[2])
engine = open_engine("embedded")
text = " ".join(["The committee met again in the old hall to discuss the harbour budget and the river bridge."] * 400)
ids = engine.tokenize(text, special=True)[:n]
engine.attention_matrix(ids[:64])  # warm: kernels and buffers of a small call
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
out = engine.attention_matrix(ids)[-ROWS:] if way == "matrix" else attention_rows(engine, ids, n - ROWS)
seconds = time.perf_counter() - started
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"way": way, "n": n, "rows": list(out.shape), "mb": round(grown / 1024), "s": round(seconds, 1)}))
""".replace("ROWS", str(ROWS))
RUN = r"""
import json, resource, sys
import torch
torch.set_num_threads(1)
from explorer.runtime import open_runtime
from explorer.methods.base import run_question
variant, words = sys.argv[1], int(sys.argv[2])
runtime = open_runtime("embedded", "demo")
run_question("wo", "Who wrote Hamlet?", runtime, config={"max_length": 8})  # warm
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
filler = " ".join(["The committee met again in the old hall to discuss the harbour budget and the river bridge."]
                  * max(1, words // 17))
trace = run_question("dragin", filler + " Who lived longer, Alejandro Jodorowsky or Philip Saville?", runtime,
                     variant=variant, config={"max_length": 32, "max_rounds": 2, "threshold": 0.05})
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
prompt = max(e.payload.get("prompt_tokens", 0) for e in trace.events if e.kind == "generation")
print(json.dumps({"variant": variant, "prompt": prompt, "retrievals": trace.costs.retrievals,
                  "status": trace.status, "mb": round(grown / 1024)}))
"""


def _child(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=PROJECT_ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", action="store_true", help="also whole DRAGIN runs, paper and reference variants")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()
    lines = ["# Reference DRAGIN's query step: memory against the text's length (measured)", "",
             f"Made by `python -m benchmarks.bench_reference_memory{' --runs' if args.runs else ''}` "
             f"({time.strftime('%Y-%m-%d')}; {cpu_name()}; the embedded SmolLM2-135M, float32, sdpa with the "
             f"probe on the last layer). Growth of the peak resident memory during one call that reads the last "
             f"{ROWS} rows of the last layer's attention over a text of n tokens; each case a fresh process.", "",
             "| n tokens | whole matrix, then its rows (before) | the rows alone (now) |", "|---:|---:|---:|"]
    for n in (512, 4096):
        whole, rows = _child(CASE, "matrix", str(n)), _child(CASE, "rows", str(n))
        lines.append(f"| {n} | +{whole['mb']} MB ({whole['s']} s) | +{rows['mb']} MB ({rows['s']} s) |")
        print(lines[-1], flush=True)
    if args.runs:
        lines += ["", "Whole DRAGIN runs (threshold 0.05, so both variants retrieve; max_length 32, 2 rounds), the "
                      "question padded to the length shown; growth of the peak resident memory during the run:", "",
                  "| variant | prompt tokens | retrievals | peak memory growth |", "|---|---:|---:|---:|"]
        for variant in ("paper", "reference"):
            for words in (40, 2900):
                run = _child(RUN, variant, str(words))
                lines.append(f"| {variant} | {run['prompt']} | {run['retrievals']} | +{run['mb']} MB |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
