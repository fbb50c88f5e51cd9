"""The compiled inner loop of a BM25 search over the on-disk index (numba), with the same results as numpy.

A search adds the posting lists of the query's terms, in query order, into a score buffer, then
picks the k best passages it touched. In numpy that is several passes over every posting (index
conversion, gather, add, scatter, a concatenation, a partition) at ~45 ns per posting; a
question's lists hold ~9 million postings at DPR's 21M passages.

Compiled, the additions go block by block through the corpus: the lists are sorted by passage,
so each list's postings inside a block of ``BLOCK`` passages are one contiguous run, and the
block's scores fit in a buffer the size of a processor cache (1 MiB) instead of one score per
passage of the corpus (84 MB at 21M, where every addition is a cache miss). Within a block the
lists are added in query order, so every passage's sum is the same float32 sum, bit for bit; the
block's touched passages are then offered to a bounded selection of the k best (score
descending, row ascending, whatever the visiting order) and their scores cleared as they are
read.

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


BLOCK = 1 << 18  # passages per block: 1 MiB of float32 scores


def _top_k_kernel(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  order: np.ndarray, acc: np.ndarray, n: int, k: int,
                  out_rows: np.ndarray, out_scores: np.ndarray) -> int:
    """Add the lists (``order``: list positions in query order, repeats included) block by block into
    ``acc`` (one block long, all zeros, left so); keep the k best touched passages (score descending,
    row ascending) in ``out_*``; return how many were kept."""
    lists = starts.shape[0]
    cursor = starts.copy()
    stop = np.empty(lists, dtype=np.int64)
    block = acc.shape[0]
    kept = 0
    for base in range(0, n, block):
        top = base + block
        any_postings = False
        for i in range(lists):  # each list's run inside this block: binary search for the first doc >= top
            lo, hi = cursor[i], ends[i]
            while lo < hi:
                mid = (lo + hi) >> 1
                if docs[mid] < top:
                    lo = mid + 1
                else:
                    hi = mid
            stop[i] = lo
            if lo > cursor[i]:
                any_postings = True
        if not any_postings:
            continue
        for q in range(order.shape[0]):
            i = order[q]
            for j in range(cursor[i], stop[i]):
                acc[docs[j] - base] += scores[j]
        for i in range(lists):  # every touched passage once: its score is cleared when first read
            for j in range(cursor[i], stop[i]):
                d = docs[j]
                value = acc[d - base]
                if value == 0:
                    continue
                acc[d - base] = 0
                if value < 0:
                    continue
                if kept < k:
                    pos = kept
                    kept += 1
                else:
                    worst_v, worst_d = out_scores[kept - 1], out_rows[kept - 1]
                    if value < worst_v or (value == worst_v and d > worst_d):
                        continue
                    pos = kept - 1
                while pos > 0 and (out_scores[pos - 1] < value
                                   or (out_scores[pos - 1] == value and out_rows[pos - 1] > d)):
                    out_scores[pos] = out_scores[pos - 1]
                    out_rows[pos] = out_rows[pos - 1]
                    pos -= 1
                out_scores[pos] = value
                out_rows[pos] = d
            cursor[i] = stop[i]
    return kept


_compiled: Any = None


def top_k(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, order: np.ndarray,
          acc: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best, best first; ``acc`` is a zeroed block buffer (:data:`BLOCK` float32),
    left zeroed. Compiled on first use (cached on disk by numba)."""
    global _compiled
    if _compiled is None:
        _compiled = numba.njit(cache=True, nogil=True)(_top_k_kernel)
    out_rows = np.zeros(k, dtype=np.int64)
    out_scores = np.zeros(k, dtype=np.float32)
    kept = _compiled(docs, scores, starts, ends, order, acc, n, k, out_rows, out_scores)
    return out_rows[:kept], out_scores[:kept]
