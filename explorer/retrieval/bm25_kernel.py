"""The compiled inner loop of a BM25 search over the on-disk index (numba), with the same results as numpy.

A search adds the posting lists of the query's terms, in query order, into a per-thread score
buffer, then picks the k best passages it touched. In numpy that is several passes over every
posting (index conversion, gather, add, scatter, a concatenation, a partition) at ~45 ns per
posting; a question's lists hold ~9 million postings at DPR's 21M passages. Compiled, the same
additions (float32, in the same order, so the same sums bit for bit) and a bounded selection of
the k best run in one pass each at a few ns per posting.

numba is optional: without it, :mod:`explorer.retrieval.bm25_index` keeps its numpy path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # pragma: no cover - exercised when numba is installed, which requirements.txt asks for
    import numba
except ImportError:  # pragma: no cover
    numba = None


def available() -> bool:
    return numba is not None


def _top_k_kernel(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  order: np.ndarray, distinct: np.ndarray, acc: np.ndarray, seen: np.ndarray, k: int,
                  out_rows: np.ndarray, out_scores: np.ndarray) -> int:
    """Add the lists (``order``: list positions in query order, repeats included) into ``acc``; keep the
    k best touched passages (score descending, row ascending) in ``out_*``; clear ``acc`` and ``seen``;
    return how many were kept."""
    for q in range(order.shape[0]):
        i = order[q]
        for j in range(starts[i], ends[i]):
            acc[docs[j]] += scores[j]
    kept = 0
    for u in range(distinct.shape[0]):  # every touched passage once, through its first list
        i = distinct[u]
        for j in range(starts[i], ends[i]):
            d = docs[j]
            if seen[d]:
                continue
            seen[d] = True
            value = acc[d]
            if value <= 0:
                continue
            if kept < k:
                pos = kept
                kept += 1
            else:
                worst_v, worst_d = out_scores[kept - 1], out_rows[kept - 1]
                if value < worst_v or (value == worst_v and d > worst_d):
                    continue
                pos = kept - 1
            while pos > 0 and (out_scores[pos - 1] < value or (out_scores[pos - 1] == value and out_rows[pos - 1] > d)):
                out_scores[pos] = out_scores[pos - 1]
                out_rows[pos] = out_rows[pos - 1]
                pos -= 1
            out_scores[pos] = value
            out_rows[pos] = d
    for u in range(distinct.shape[0]):
        i = distinct[u]
        for j in range(starts[i], ends[i]):
            d = docs[j]
            acc[d] = 0
            seen[d] = False
    return kept


_compiled: Any = None


def top_k(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, order: np.ndarray,
          distinct: np.ndarray, acc: np.ndarray, seen: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best, best first; compiled on first use (cached on disk by numba)."""
    global _compiled
    if _compiled is None:
        _compiled = numba.njit(cache=True, nogil=True)(_top_k_kernel)
    out_rows = np.zeros(k, dtype=np.int64)
    out_scores = np.zeros(k, dtype=np.float32)
    kept = _compiled(docs, scores, starts, ends, order, distinct, acc, seen, k, out_rows, out_scores)
    return out_rows[:kept], out_scores[:kept]
