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
descending, row ascending, whatever the visiting order), which passes over any below the k-th
score so far at the cost of one read, and the block's buffer is cleared in one sweep.

numba is optional: without it, :mod:`explorer.retrieval.bm25_index` keeps its numpy path.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

try:  # pragma: no cover - exercised when numba is installed, which requirements.txt asks for
    import numba
except ImportError:  # pragma: no cover
    numba = None


def available() -> bool:
    return numba is not None


BLOCK = 1 << 18  # passages per block: 1 MiB of float32 scores


def _first_at_least(docs: np.ndarray, lo: int, hi: int, value: int) -> int:
    """The first position in ``docs[lo:hi]`` (ascending) holding ``value`` or more; ``hi`` where none does."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if docs[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


if numba is not None:  # compiled with the loop that calls it
    _first_at_least = numba.njit(cache=True, nogil=True, inline="always")(_first_at_least)


def _top_k_kernel(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  order: np.ndarray, acc: np.ndarray, begin: int, n: int, k: int,
                  out_rows: np.ndarray, out_scores: np.ndarray) -> int:
    """Add the lists (``order``: list positions in query order, repeats included) block by block into
    ``acc`` (one block long, all zeros, left so), for the passages ``begin <= row < n``; keep the k best
    touched passages (score descending, row ascending) in ``out_*``; return how many were kept."""
    lists = starts.shape[0]
    cursor = starts.copy()
    for i in range(lists):  # each list's first passage at or after 'begin'
        cursor[i] = _first_at_least(docs, starts[i], ends[i], begin)
    stop = np.empty(lists, dtype=np.int64)
    block = acc.shape[0]
    kept = 0
    for base in range(begin, n, block):
        top = base + block
        any_postings = False
        for i in range(lists):  # each list's run inside this block ends at its first passage >= top
            stop[i] = _first_at_least(docs, cursor[i], ends[i], top)
            if stop[i] > cursor[i]:
                any_postings = True
        if not any_postings:
            continue
        for q in range(order.shape[0]):
            i = order[q]
            for j in range(cursor[i], stop[i]):
                acc[docs[j] - base] += scores[j]
        # The block's touched passages, through the postings: most fall below the k-th score so far and
        # are passed over at the cost of one read; one that was offered already (from an earlier list)
        # is found in the k kept. The buffer is cleared in one sweep afterwards.
        worst_v = out_scores[kept - 1] if kept == k else np.float32(0)
        for i in range(lists):
            for j in range(cursor[i], stop[i]):
                d = docs[j]
                value = acc[d - base]
                if value < worst_v or value <= 0:
                    continue
                if kept == k and value == worst_v and d > out_rows[kept - 1]:
                    continue
                offered = False
                for u in range(kept):
                    if out_rows[u] == d:
                        offered = True
                        break
                if offered:
                    continue
                if kept < k:
                    pos = kept
                    kept += 1
                else:
                    pos = kept - 1
                while pos > 0 and (out_scores[pos - 1] < value
                                   or (out_scores[pos - 1] == value and out_rows[pos - 1] > d)):
                    out_scores[pos] = out_scores[pos - 1]
                    out_rows[pos] = out_rows[pos - 1]
                    pos -= 1
                out_scores[pos] = value
                out_rows[pos] = d
                if kept == k:
                    worst_v = out_scores[kept - 1]
            cursor[i] = stop[i]
        acc[:min(block, n - base)] = 0
    return kept


_compiled: Any = None
_buffers = threading.local()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _buffer(block: int) -> np.ndarray:
    """This thread's zeroed score buffer of one block (kept between searches, left zeroed by each)."""
    held = getattr(_buffers, "by_size", None)
    if held is None:
        held = _buffers.by_size = {}
    if block not in held:
        held[block] = np.zeros(block, dtype=np.float32)
    return held[block]


def _part(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, order: np.ndarray,
          begin: int, end: int, k: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    global _compiled
    if _compiled is None:
        with _pool_lock:  # one dispatcher: a search during the warm-up waits on the same load (numba's lock)
            if _compiled is None:
                _compiled = numba.njit(cache=True, nogil=True)(_top_k_kernel)
    out_rows = np.zeros(k, dtype=np.int64)
    out_scores = np.zeros(k, dtype=np.float32)
    kept = _compiled(docs, scores, starts, ends, order, _buffer(block), begin, end, k, out_rows, out_scores)
    return out_rows[:kept], out_scores[:kept]


_warming: threading.Thread | None = None
_warm_lock = threading.Lock()


def warm_up() -> None:
    """Load the compiled search now, on arrays of the types a search over a mapped index passes.

    numba keeps the compiled loop on disk (``cache=True``), but loading it (and its dispatcher's
    type resolution) still takes 0.4-0.85 s in a fresh process; done here, the first query does not
    wait for it. The index's posting arrays are read-only memory maps, which numba types apart from
    writable arrays, so the warm-up's are read-only too.
    """
    if numba is None:
        return
    docs = np.arange(4, dtype=np.int32)
    scores = np.ones(4, dtype=np.float32)
    for array in (docs, scores):
        array.flags.writeable = False
    starts, ends = np.zeros(1, dtype=np.int64), np.full(1, 4, dtype=np.int64)
    _part(docs, scores, starts, ends, np.zeros(1, dtype=np.int64), 0, 4, 2, BLOCK)


def warm_in_background() -> threading.Thread | None:
    """Start :func:`warm_up` on a daemon thread, once per process (the thread; None without numba).

    An index that searches with the compiled loop calls this when it is opened, so the loop loads
    while the caller does other work (the model loads, the page opens); a query arriving before it is
    ready waits only for the rest of the load."""
    global _warming
    if numba is None:
        return None
    with _warm_lock:
        if _warming is None:
            _warming = threading.Thread(target=warm_up, name="bm25-kernel-warm-up", daemon=True)
            _warming.start()
        return _warming


def _workers(parts: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < parts - 1:  # noqa: SLF001 - grown only when asked for more
            _pool = ThreadPoolExecutor(max_workers=parts - 1, thread_name_prefix="bm25-search")
        return _pool


def top_k(docs: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, order: np.ndarray,
          n: int, k: int, *, parts: int = 1, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best, best first, ties to the lowest row.

    ``parts`` > 1 splits the passages into that many ranges of whole blocks, searched at once on
    threads (the compiled loop releases the GIL); a passage's sum is made in one range, so the
    result is the same whatever the split. Compiled on first use (cached on disk by numba)."""
    blocks = -(-n // block)
    parts = max(1, min(parts, blocks))
    if parts == 1:
        return _part(docs, scores, starts, ends, order, 0, n, k, block)
    bounds = [min(n, (blocks * i // parts) * block) for i in range(parts + 1)]
    pool = _workers(parts)
    others = [pool.submit(_part, docs, scores, starts, ends, order, bounds[i], bounds[i + 1], k, block)
              for i in range(1, parts)]
    found = [_part(docs, scores, starts, ends, order, bounds[0], bounds[1], k, block)]
    found += [f.result() for f in others]
    rows = np.concatenate([r for r, _ in found])
    values = np.concatenate([v for _, v in found])
    best = np.lexsort((rows, -values))[:k]
    return rows[best], values[best]
