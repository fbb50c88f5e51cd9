"""The on-disk BM25 index against bm25s in memory on the benchmark pool: the same top 10, and the cost of each.

    python -m benchmarks.bench_bm25_disk [--out benchmarks/results/bm25_disk.md]

Every question of the four benchmark sets (HotpotQA, MuSiQue, NQ, 2WikiMultihopQA) is searched
four ways over the ~15,500-passage pool: bm25s 0.3.16 in memory (the index the explorer used to
build), and the on-disk index with each of its three exact strategies (``full``: every passage
scored; ``accumulate``: the query's lists added into a reusable buffer, what corpora above a
million passages use; ``maxscore``: only the lists the MaxScore bound needs). Agreement is the
share of questions whose top-10 passages *and* scores are identical to bm25s's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import cpu_name, write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "bm25_disk.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    from explorer.eval.datasets import resolve_sources
    from explorer.retrieval.bm25 import BM25Retriever, bm25s_in_memory
    from explorer.retrieval.bm25_index import full_top_k
    from explorer.retrieval.corpora import load_corpus

    load0 = os.getloadavg()[0]
    corpus = load_corpus("benchmark")
    started = time.perf_counter()
    disk = BM25Retriever(corpus, use_cache=False)
    disk_build = time.perf_counter() - started
    started = time.perf_counter()
    reference = bm25s_in_memory(corpus, disk.tokenizer, disk.params)
    memory_build = time.perf_counter() - started
    questions = [q.question for s in resolve_sources(["hotpotqa", "musique", "nq", "2wiki"]) for q in s.load()]
    times: dict[str, list[float]] = {"bm25s": [], "full": [], "accumulate": [], "maxscore": []}
    agree = {"full": 0, "accumulate": 0, "maxscore": 0}
    vocab = reference.vocab_dict
    for question in questions:
        start = time.perf_counter()
        ids = [vocab[t] for t in disk.tokenizer.terms(question) if t in vocab]
        expected = full_top_k(reference.get_scores_from_ids(ids), 10) if ids else (np.zeros(0), np.zeros(0))
        times["bm25s"].append(time.perf_counter() - start)
        for strategy in ("full", "accumulate", "maxscore"):
            start = time.perf_counter()
            mine = disk._term_ids(question)
            rows, scores = disk.index.top_k(mine, 10, strategy=strategy) if mine else (np.zeros(0), np.zeros(0))
            times[strategy].append(time.perf_counter() - start)
            agree[strategy] += rows.tolist() == expected[0].tolist() and scores.tolist() == expected[1].tolist()
    lines = ["# On-disk BM25 against bm25s in memory (benchmark pool)", "",
             f"`python -m benchmarks.bench_bm25_disk` on {cpu_name()}; load average {load0:.1f} at start (the cores "
             f"were shared with other work). {len(corpus):,} passages, {len(questions):,} questions (HotpotQA, "
             "MuSiQue, NQ, 2WikiMultihopQA), top 10.", "",
             f"Index build: on disk {disk_build:.1f} s, bm25s in memory {memory_build:.1f} s.", "",
             "| search | agreement with bm25s (top 10 and scores) | p50 ms | p95 ms |", "|---|---:|---:|---:|"]
    for name, label in (("bm25s", "bm25s in memory"), ("full", "on disk, full scoring"),
                        ("accumulate", "on disk, lists into a score buffer"), ("maxscore", "on disk, MaxScore")):
        t = sorted(times[name])
        n = len(questions)
        share = "reference" if name == "bm25s" else f"{agree[name] / n:.4f} ({agree[name]:,}/{n:,})"
        lines.append(f"| {label} | {share} | {t[len(t) // 2] * 1000:.2f} | {t[int(len(t) * 0.95)] * 1000:.2f} |")
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
