"""Dense retrieval at scale: the embedding rate per worker, and IVF-PQ's recall@10 against exact search.

    python -m benchmarks.bench_dense_scale [--passages 4000] [--vectors 1000000] [--queries 200] [--out FILE]

1. **Embedding rate.** The first ``--passages`` passages of the benchmark corpus are embedded in
   shards the way a large corpus is (:mod:`explorer.retrieval.dense_shards`, length-sorted
   batches of 64, float16 shards): passages per second of one worker process on this CPU. The
   time for DPR's 21,015,324 passages follows for 1..N such workers (shards are independent, so
   workers scale until the driver's reading of texts or the disk limits them).
2. **Recall on real vectors.** Benchmark questions searched among those passages: exact
   (numpy) against the shipped IVF-PQ build (``build_ivfpq``: ~4 sqrt(N) cells, 48 one-byte
   codes a vector, opened memory-mapped) at several ``nprobe``.
3. **Recall at a million.** ``--vectors`` synthetic vectors made from the real ones (each a real
   vector plus Gaussian noise, renormalised, as benchmarks/bench_dense.py makes them), the same
   comparison with a 1024-cell IVF-PQ index, plus its size on disk against the float32 matrix.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import cpu_name, write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "dense_scale.md"
DPR = 21_015_324


def recall_at_10(exact: list[np.ndarray], found: list[np.ndarray]) -> float:
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(exact, found, strict=True)]))


def exact_top10(matrix: np.ndarray, queries: np.ndarray) -> list[np.ndarray]:
    out = []
    for q in queries:
        scores = matrix @ q
        top = np.argpartition(-scores, 10)[:10]
        out.append(top[np.argsort(-scores[top], kind="stable")])
    return out


def ivf_rows(index, queries: np.ndarray, nprobe: int, rerank: tuple | None = None) -> tuple[list[np.ndarray], float]:
    """IVF-PQ's top 10 per query; with ``rerank`` = (shards, plan), its top RERANK_DEPTH re-scored by the stored
    vectors, as the dense retriever searches."""
    import faiss

    from explorer.retrieval.dense import RERANK_DEPTH
    from explorer.retrieval.dense_shards import gather

    faiss.downcast_index(faiss.extract_index_ivf(index)).nprobe = nprobe
    rows, times = [], []
    for q in queries:
        start = time.perf_counter()
        _, ids = index.search(q.reshape(1, -1), RERANK_DEPTH if rerank else 10)
        found = ids[0][ids[0] >= 0]
        if rerank:
            scores = gather(rerank[0], rerank[1], found) @ q
            found = found[np.lexsort((found, -scores))[:10]]
        times.append(time.perf_counter() - start)
        rows.append(found)
    return rows, float(np.median(times) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=4000)
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    import faiss
    import torch

    from explorer.eval.datasets import resolve_sources
    from explorer.retrieval import dense_shards
    from explorer.retrieval.corpora import load_corpus
    from explorer.retrieval.embeddings import get_encoder

    load0 = os.getloadavg()[0]
    corpus = load_corpus("benchmark")
    encoder = get_encoder()
    n = min(args.passages, len(corpus))
    work = Path(tempfile.mkdtemp(prefix="bench-dense-scale-"))
    plan = dense_shards.ShardPlan(n, 1000)

    class First:  # the first n passages of the benchmark corpus, as a store
        def iter_range(self, a: int, b: int):
            return corpus.store.iter_range(a, b)

    started = time.perf_counter()
    dense_shards.build_shards(work, First(), encoder.dim, "bench", dense_shards.local_embedder(
        First(), encoder, plan, 64), plan=plan)
    rate = n / (time.perf_counter() - started)
    real = np.concatenate([np.asarray(s, dtype=np.float32) for s in dense_shards.open_shards(work, plan)])
    words = np.mean([len(p.text.split()) for p in corpus.passages[:n]])

    questions = [q.question for s in resolve_sources(["hotpotqa", "musique", "nq"]) for q in s.load(None)]
    questions = list(dict.fromkeys(questions))[: args.queries]
    queries = encoder.encode_queries(questions).astype(np.float32)

    lines = ["# Dense retrieval at scale: embedding rate and IVF-PQ recall", "",
             f"`python -m benchmarks.bench_dense_scale --passages {args.passages} --vectors {args.vectors} --queries "
             f"{args.queries}` on {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} "
             f"({torch.get_num_threads()} thread), faiss {faiss.__version__}. Load average {load0:.1f} at start "
             "(the cores were shared with other work).", "",
             "## Embedding rate (CPU, one worker)", "",
             f"{encoder.name}: {n:,} benchmark passages (mean {words:.0f} words) in shards of 1,000, batches of 64: "
             f"**{rate:.1f} passages/s**.", "",
             "| workers of this rate | 21,015,324 DPR passages |", "|---:|---:|"]
    for workers in (1, 2, 8, 32):
        hours = DPR / (rate * workers) / 3600
        lines.append(f"| {workers} | {hours:,.1f} h ({hours / 24:.1f} days) |")
    lines += ["", "## Recall@10 of IVF-PQ against exact search", "",
              "| vectors | index | nprobe | recall@10 | p50 ms (search only) | index bytes / float32 matrix bytes |",
              "|---:|---|---:|---:|---:|---:|"]

    def measure(matrix: np.ndarray, label: str) -> None:
        folder = Path(tempfile.mkdtemp(prefix="bench-ivfpq-"))
        folders.append(folder)
        rows = 10_000 if len(matrix) > 10_000 else max(1, len(matrix) // 4)
        plan_m = dense_shards.ShardPlan(len(matrix), rows)
        for i in range(plan_m.count):
            dense_shards.write_shard(folder, i, matrix[slice(*plan_m.span(i))])
        nlist = 1024 if len(matrix) >= 100_000 else 0
        path = dense_shards.build_ivfpq(folder, plan_m, matrix.shape[1], "bench", nlist=nlist)
        index = dense_shards.open_ivfpq(path, 1)
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
        exact = exact_top10(np.asarray(matrix, dtype=np.float32), queries)
        shards = dense_shards.open_shards(folder, plan_m)
        for rerank in (None, (shards, plan_m)):
            for nprobe in (8, 16, 32, 64):
                found, p50 = ivf_rows(index, queries, nprobe, rerank)
                lines.append(f"| {label} | IVF{ivf.nlist},PQ{ivf.pq.M}x{ivf.pq.nbits}"
                             f"{' + re-rank top 100' if rerank else ''} | {nprobe} | "
                             f"{recall_at_10(exact, found):.3f} | {p50:.2f} | "
                             f"{path.stat().st_size / (matrix.size * 4):.3f} |")

    folders = [work]
    measure(real, f"{n:,} real passages")
    rng = np.random.default_rng(0)
    synthetic = real[rng.integers(0, n, size=args.vectors)]
    synthetic += rng.standard_normal(synthetic.shape, dtype=np.float32) * (0.6 / np.sqrt(real.shape[1]))
    synthetic /= np.linalg.norm(synthetic, axis=1, keepdims=True)
    measure(synthetic, f"{args.vectors:,} synthetic")
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.1f}."]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
