"""Loading a user's GGUF file: the first load (convert and cache) against the second (the cached copy).

Before the cache every load de-quantized the GGUF again; now the first load converts it once into
a float32 transformers copy named by the file's checksum, and every later load reads that copy.
Each load runs in a fresh process (``python -m explorer model info --model FILE``), so the second
load pays for process start, hashing and reading the weights like a user's next session would,
and an empty cache folder makes the first one convert. The same file loaded straight through
transformers' GGUF path (what every load cost before) is timed alongside.

    .venv/bin/python -m benchmarks.bench_gguf_load [--model gemma3-270m] [--out FILE]

The GGUF files are the embedded models' own, assembled from their cached wheels into a scratch
folder, so no download is needed once ``make model`` has run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result
from explorer.engine.embedded import assemble_gguf, embedded_spec

OUT = Path(__file__).parent / "results" / "gguf_load.md"
TARGET = 5.0


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return elapsed


def measure(key: str, repeats: int) -> list[str]:
    model = embedded_spec(key)
    if model is None:
        raise SystemExit(f"{key} is not an embedded model")
    with tempfile.TemporaryDirectory(prefix="gguf-bench-") as scratch:
        gguf = assemble_gguf(model, Path(scratch) / "gguf", progress=lambda _m: None)
        env = {**os.environ, "EXPLORER_CACHE": str(Path(scratch) / "cache"), "HF_HUB_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        info = [sys.executable, "-m", "explorer", "model", "info", "--model", str(gguf)]
        direct = [sys.executable, "-c",
                  "import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer; "
                  "AutoModelForCausalLM.from_pretrained(sys.argv[1], gguf_file=sys.argv[2], dtype=torch.float32); "
                  "AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])", str(gguf.parent), gguf.name]
        mib = gguf.stat().st_size / 2**20
        first = _timed(info, env)
        print(f"{model.name}: first load {first:.1f} s", file=sys.stderr, flush=True)
        seconds = [_timed(info, env) for _ in range(repeats)]
        print(f"{model.name}: second loads {', '.join(f'{x:.1f}' for x in seconds)} s", file=sys.stderr, flush=True)
        plain = _timed(direct, env)
        print(f"{model.name}: straight GGUF load {plain:.1f} s", file=sys.stderr, flush=True)
    second = sorted(seconds)[len(seconds) // 2]
    ratio = first / second
    return [f"| {model.name} ({model.quantization}, {mib:.0f} MiB) | {plain:.1f} | "
            f"{first:.1f} | {second:.1f} | **{ratio:.1f}x** | {'met' if ratio >= TARGET else 'NOT met'} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=None,
                        help="embedded model whose GGUF to load (repeatable; default: gemma3-270m and embedded)")
    parser.add_argument("--repeats", type=int, default=3, help="second loads to take the median of")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    for key in args.model or ["gemma3-270m", "embedded"]:
        rows += measure(key, args.repeats)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    lines = [
        "# Loading a user's GGUF file: first load against second",
        "",
        f"Made by `python -m benchmarks.bench_gguf_load` ({time.strftime('%Y-%m-%d')}; {cpu_name()}; "
        f"load average {' '.join(load_before)} at start, {' '.join(load_after)} at the end). Every load is a "
        "fresh process running `explorer model info --model FILE.gguf` (process start, checksum, weights, "
        f"tokenizer); the second load is the median of {args.repeats}. Target: the second load at least "
        f"{TARGET:g}x faster than the first.",
        "",
        "| GGUF file | straight GGUF load, s (every load before the cache) | first load, s (convert + cache) | "
        "second load, s (cached copy) | first / second | target |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
        "",
    ]
    text = "\n".join(lines)
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
