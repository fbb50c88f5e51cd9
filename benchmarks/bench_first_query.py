"""The first BM25 query after opening a built index, with and without loading the compiled search at open.

Above a million passages a search runs numba's compiled loop, kept on disk (``cache=True``), yet a
fresh process still spends a fraction of a second loading it on its first call. An index of that
size now starts loading it on a background thread when it is opened
(:func:`explorer.retrieval.bm25_kernel.warm_in_background`). Each case here is a fresh process
that opens a built index and times its first query through the compiled loop (``accumulate``), side
by side, alternating:

* ``cold``: nothing loaded at open (as before): the query pays for the load;
* ``warm at open, query at once``: the query arrives while the load is still under way and waits
  for the rest of it (a shell command that searches right after opening);
* ``warm at open, query after it``: the load finished before the question arrived (the app and an
  evaluation open the index, then load the model, then ask).

The index is the demo corpus's (any built index has the same compiled loop; its size only changes
the search's own cost, reported as the second query).

    python -m benchmarks.bench_first_query [--repeats 3] [--out benchmarks/results/first_query.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import cpu_name, write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "first_query.md"
QUERY = "Lewiston Maineiacs arena seating capacity"
CASES = ("cold", "warm-now", "warm-after")
TARGET_MS = 50.0


def child(index: str, case: str, terms: str) -> None:
    """One fresh process: open the index, (maybe) warm, time the first and the second query."""
    start = time.perf_counter()
    from explorer.retrieval import bm25_kernel
    from explorer.retrieval.bm25_index import BM25Index

    opened = BM25Index(Path(index))
    warming = bm25_kernel.warm_in_background() if case != "cold" else None
    open_s = time.perf_counter() - start
    if case == "warm-after" and warming is not None:
        warming.join()
    ids = [int(t) for t in terms.split(",")]
    times = []
    for _ in range(2):
        t = time.perf_counter()
        opened.top_k(ids, 10, strategy="accumulate")
        times.append(time.perf_counter() - t)
    print(json.dumps({"open_s": open_s, "first_ms": times[0] * 1000, "second_ms": times[1] * 1000}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", nargs=3, metavar=("INDEX", "CASE", "TERMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    from explorer.retrieval import bm25_kernel
    from explorer.retrieval.bm25 import BM25Retriever
    from explorer.retrieval.corpora import load_corpus

    if not bm25_kernel.available():
        print("numba is not installed: searches use numpy and nothing is compiled")
        return 1
    retriever = BM25Retriever(load_corpus("demo"))
    index = str(retriever.index_path)
    terms = ",".join(str(t) for t in retriever._term_ids(QUERY))
    bm25_kernel.warm_up()  # the compiled loop is on disk before any case runs (a first-ever run compiles it)
    load0 = os.getloadavg()[0]
    found: dict[str, list[dict[str, float]]] = {c: [] for c in CASES}
    for _ in range(args.repeats):
        for case in CASES:
            out = subprocess.run([sys.executable, "-m", "benchmarks.bench_first_query", "--child", index, case, terms],
                                 capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
            found[case].append(json.loads(out.stdout.strip().splitlines()[-1]))
    labels = {"cold": "cold (nothing loaded at open; before)", "warm-now": "loaded at open, query at once",
              "warm-after": "loaded at open, query after the load (the app, an evaluation)"}
    lines = ["# First BM25 query after opening a built index", "",
             f"`python -m benchmarks.bench_first_query --repeats {args.repeats}` on {cpu_name()}; load average "
             f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at the end. Each cell: the median of {args.repeats} "
             "fresh processes, cases alternating.", "",
             "| case | open s | first query ms | second query ms |", "|---|---:|---:|---:|"]
    for case in CASES:
        rows = found[case]
        lines.append(f"| {labels[case]} | {statistics.median(r['open_s'] for r in rows):.3f} | "
                     f"{statistics.median(r['first_ms'] for r in rows):.1f} | "
                     f"{statistics.median(r['second_ms'] for r in rows):.2f} |")
    after = statistics.median(r["first_ms"] for r in found["warm-after"])
    cold = statistics.median(r["first_ms"] for r in found["cold"])
    lines += ["", f"Target: first query at most {TARGET_MS:.0f} ms after opening: "
              f"{'met' if after <= TARGET_MS else 'NOT met'} ({after:.1f} ms, against {cold:.1f} ms cold)."]
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
