"""BM25 on disk: the index's files, and exact top-k search over them, opened memory-mapped.

The index holds, for every term, the BM25 contribution of every passage that contains it (the
precomputed sparse score matrix bm25s builds in memory), laid out term-major in files that a
search reads through memory maps:

===================  ==============================================================================
indptr.i64           V + 1 offsets: term t's postings are rows [indptr[t], indptr[t+1])
post_docs.i32        the passages (corpus rows) of every posting, ascending within a term
post_scores.f32      idf(t) * tf(t, d) / (tf(t, d) + k1 (1 - b + b |d| / avgdl)), as float32
term_max.f32         the largest contribution of each term (what lets a search skip long lists)
vocab.bin            the terms in sorted order (UTF-8), with vocab_offsets.i64 ...
vocab_ids.i32        ... and the term id of each, for a binary search from a query term
manifest.json        counts, parameters, the content fingerprint, and each file's size and the hashes
                     of a few blocks (all of a file up to 32 MB), checked on every open; written last
===================  ==============================================================================

It is written by the streaming build of :mod:`explorer.retrieval.bm25_build`, whose numbers are
bm25s 0.3.16's bit for bit, so searches here return the same scores and the same top-k as the
in-memory bm25s index it replaces (tests/test_bm25_scale.py checks this on the benchmark pool).

**A search** is exact and reads only the posting lists of the query's terms. Up to a million
passages it scores every passage in one array (``full``, as bm25s does); above, it adds the
lists into a per-thread score buffer that is cleared after each search and reads back only the
postings' passages (``accumulate``); compiled with numba where it is installed, it goes block by
block through the corpus with a cache-sized buffer, and above four million passages splits the
blocks over one thread per core. Its cost follows the lists, not the corpus. A third strategy,
``maxscore``, skips the lists whose terms cannot lift any unseen passage to the k-th score (the
MaxScore bound); it returns the same results, but on the synthetic DPR corpus, whose words are
drawn independently so that few passages share several query terms, the bound prunes little and
it was slower than ``accumulate`` (BENCHMARKS.md, "Corpus at scale"). Ties at the k-th score go
to the lowest corpus position, as before.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import CorpusError
from explorer.retrieval import bm25_kernel
from explorer.retrieval.building import folder_bytes, read_json, verify_file_checks

INDEX_VERSION = 2
ENGINE = f"explorer on-disk BM25 {INDEX_VERSION}"
MANIFEST_FILE = "manifest.json"
INDPTR_FILE = "indptr.i64"
DOCS_FILE = "post_docs.i32"
SCORES_FILE = "post_scores.f32"
TERM_MAX_FILE = "term_max.f32"
VOCAB_FILE = "vocab.bin"
VOCAB_OFFSETS_FILE = "vocab_offsets.i64"
VOCAB_IDS_FILE = "vocab_ids.i32"
INDEX_FILES = {MANIFEST_FILE, INDPTR_FILE, DOCS_FILE, SCORES_FILE, TERM_MAX_FILE, VOCAB_FILE, VOCAB_OFFSETS_FILE,
               VOCAB_IDS_FILE}
EPSILON = 1e-4  # slack on score bounds for float32 rounding of sums
FULL_SCORING_UP_TO = 1 << 20  # passages up to which a search scores every passage (one array, no bounds)
THREADS_FROM = 1 << 22  # passages from which a compiled search splits the corpus over threads
MAX_SEARCH_THREADS = 4


def _fix_rebuild(folder: Path) -> str:
    return (f"delete the folder {folder} and search again to rebuild it (python -m explorer corpus index CORPUS "
            "builds it with a progress bar and resumes after an interruption)")


_FINGERPRINT_FIELDS = ("version", "key", "passages", "vocabulary", "postings", "tokens", "avgdl", "method", "k1", "b")
_CONTENT_FILES = (INDPTR_FILE, DOCS_FILE, SCORES_FILE, TERM_MAX_FILE, VOCAB_FILE, VOCAB_OFFSETS_FILE, VOCAB_IDS_FILE)


def content_fingerprint(folder: Path, manifest: dict[str, Any]) -> str:
    """A hash of the index's identity and every byte of its files (what a resumed build must reproduce)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps({k: manifest.get(k) for k in _FINGERPRINT_FIELDS}, sort_keys=True).encode())
    for name in _CONTENT_FILES:
        digest.update(f"\x1e{name}\x1f".encode())
        with open(folder / name, "rb") as stream:
            for block in iter(lambda stream=stream: stream.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


# --- the index, opened ----------------------------------------------------------------------------


class _SortedTerms(Sequence[str]):
    """The vocabulary's sorted terms read from disk on demand (what ``bisect`` searches)."""

    def __init__(self, blob: Any, offsets: np.ndarray) -> None:
        self._blob, self._offsets = blob, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return self._blob[int(self._offsets[i]):int(self._offsets[i + 1])].decode("utf-8")


class BM25Index:
    """A built index, memory-mapped: term lookup, exact full scores, and exact top-k.

    Read-only after opening, so any number of threads may search at once."""

    def __init__(self, folder: Path, *, expect: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        manifest = read_json(self.folder / MANIFEST_FILE)
        if manifest is None:
            building = self.folder.parent / f".building-{self.folder.name}"
            state = "its build is still running or was interrupted" if building.exists() else "it has no manifest"
            raise CorpusError(f"the BM25 index is incomplete ({state}), so it is not opened",
                              where=str(self.folder), fix=_fix_rebuild(self.folder))
        if manifest.get("version") != INDEX_VERSION:
            raise CorpusError(f"the BM25 index has format {manifest.get('version')}, this version reads "
                              f"{INDEX_VERSION}", where=str(self.folder), fix=_fix_rebuild(self.folder))
        for field, value in (expect or {}).items():
            if manifest.get(field) != value:
                raise CorpusError(f"the BM25 index was built for other passages or settings ({field} is "
                                  f"{manifest.get(field)!r}, expected {value!r})", where=str(self.folder),
                                  fix=_fix_rebuild(self.folder))
        v, postings = int(manifest["vocabulary"]), int(manifest["postings"])
        sizes = {INDPTR_FILE: (v + 1) * 8, DOCS_FILE: postings * 4, SCORES_FILE: postings * 4, TERM_MAX_FILE: v * 4,
                 VOCAB_OFFSETS_FILE: (v + 1) * 8, VOCAB_IDS_FILE: v * 4}
        for name, size in sizes.items():
            path = self.folder / name
            actual = path.stat().st_size if path.is_file() else None
            if actual != size:
                state = "missing" if actual is None else f"{actual:,} bytes"
                raise CorpusError(f"the BM25 index file {name} is {state}, expected {size:,} bytes (a half-written "
                                  "or damaged index)", where=str(path), fix=_fix_rebuild(self.folder))
        if isinstance(manifest.get("checks"), dict):  # sizes and a few blocks of every file (all of a small one)
            verify_file_checks(self.folder, manifest["checks"], "BM25 index", _fix_rebuild(self.folder))
        self.manifest = manifest
        self.n = int(manifest["passages"])
        self.indptr = np.memmap(self.folder / INDPTR_FILE, dtype=np.int64, mode="r")
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != postings:
            raise CorpusError("the BM25 index's term offsets do not match its postings (a damaged index)",
                              where=str(self.folder / INDPTR_FILE), fix=_fix_rebuild(self.folder))
        self.docs = _map(self.folder / DOCS_FILE, np.int32)
        self.scores_data = _map(self.folder / SCORES_FILE, np.float32)
        self.term_max = _map(self.folder / TERM_MAX_FILE, np.float32)
        vocab_offsets = np.memmap(self.folder / VOCAB_OFFSETS_FILE, dtype=np.int64, mode="r")
        self._vocab_ids = _map(self.folder / VOCAB_IDS_FILE, np.int32)
        with open(self.folder / VOCAB_FILE, "rb") as stream:
            blob = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) if int(vocab_offsets[-1]) else b""
        if len(blob) != int(vocab_offsets[-1]):
            raise CorpusError("the BM25 index's vocabulary file is cut short (a damaged index)",
                              where=str(self.folder / VOCAB_FILE), fix=_fix_rebuild(self.folder))
        self._terms = _SortedTerms(blob, vocab_offsets)
        if self.n > FULL_SCORING_UP_TO and bm25_kernel.available():  # its searches use the compiled loop
            bm25_kernel.warm_in_background()

    @property
    def fingerprint(self) -> str:
        """The hash of the index's identity and files (equal for a resumed and an uninterrupted build)."""
        return str(self.manifest["content_fingerprint"])

    @property
    def vocabulary(self) -> int:
        return int(self.manifest["vocabulary"])

    def size_bytes(self) -> int:
        return int(self.manifest.get("bytes") or folder_bytes(self.folder))

    def verify(self) -> None:
        """Re-hash every file against the manifest's fingerprint (reads the whole index)."""
        if content_fingerprint(self.folder, self.manifest) != self.fingerprint:
            raise CorpusError("the BM25 index's files do not match its fingerprint (a damaged index)",
                              where=str(self.folder), fix=_fix_rebuild(self.folder))

    def term_id(self, term: str) -> int | None:
        at = bisect.bisect_left(self._terms, term)
        if at < len(self._terms) and self._terms[at] == term:
            return int(self._vocab_ids[at])
        return None

    def postings(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        a, z = int(self.indptr[term_id]), int(self.indptr[term_id + 1])
        return self.docs[a:z], self.scores_data[a:z]

    def df(self, term_id: int) -> int:
        return int(self.indptr[term_id + 1] - self.indptr[term_id])

    def scores(self, term_ids: Sequence[int]) -> np.ndarray:
        """The score of every passage (float32, summed in query order like bm25s); zeros without terms."""
        out = np.zeros(self.n, dtype=np.float32)
        for t in term_ids:
            docs, values = self.postings(t)
            out[docs] += values  # a term's postings name each passage once
        return out

    def top_k(self, term_ids: Sequence[int], k: int, *, strategy: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best passages with a positive score, best first, ties by row.

        ``strategy``: ``full`` scores every passage (cheapest up to about a million passages),
        ``accumulate`` adds the query's lists into a reusable buffer (cost of the lists, not of the
        corpus), ``maxscore`` reads only what the MaxScore bound needs; ``auto`` chooses. All
        return the same passages and scores."""
        if strategy == "auto":
            strategy = "full" if self.n <= FULL_SCORING_UP_TO else "accumulate"
        if k < 1 or not term_ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if strategy == "full":
            return full_top_k(self.scores(term_ids), k)
        if strategy == "accumulate":
            return self._accumulate(list(term_ids), k)
        if strategy != "maxscore":
            raise ValueError(f"unknown search strategy {strategy!r}")
        return _TopK(self, list(term_ids), k).run()

    def _accumulate(self, term_ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Every list of the query added, in query order, into the per-thread score buffer: the exact sums
        of ``full``, at the cost of the lists instead of the corpus size (compiled when numba is there).

        A passage appears at most once per distinct term, so the k-th passage's score is at least the
        (k x terms)-th largest of the scores read back at every posting: the passages at or above it
        hold the k best, ties included."""
        if bm25_kernel.available():
            distinct = list(dict.fromkeys(term_ids))
            position = {t: i for i, t in enumerate(distinct)}
            starts = np.asarray([self.indptr[t] for t in distinct], dtype=np.int64)
            ends = np.asarray([self.indptr[t + 1] for t in distinct], dtype=np.int64)
            return bm25_kernel.top_k(np.asarray(self.docs), np.asarray(self.scores_data), starts, ends,
                                     np.asarray([position[t] for t in term_ids], dtype=np.int64), self.n, k,
                                     parts=search_threads(self.n))
        acc, _seen = _scratch.buffers(self.n)
        lists = {t: tuple(np.asarray(a) for a in self.postings(t)) for t in dict.fromkeys(term_ids)}
        every = np.concatenate([docs for docs, _ in lists.values()])
        try:
            for t in term_ids:  # query order, repeats included
                docs, values = lists[t]
                acc[docs] += values
            values = acc[every]
            take = min(len(every), k * len(lists))
            floor = np.partition(values, len(values) - take)[len(values) - take] if take else 0
            rows = np.unique(every[values >= floor])
            scores = acc[rows]
        finally:
            acc[every] = 0
        return full_top_k_of(rows, scores, k)


def full_top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best positive scores of a full score array, ties to the lowest row."""
    candidates = np.flatnonzero(scores > 0)
    values = scores[candidates]
    if len(candidates) > k:
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = values > kth
        tied = np.flatnonzero(values == kth)[: k - int(above.sum())]
        keep = np.concatenate([np.flatnonzero(above), tied])
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))
    return candidates[order].astype(np.int64), values[order]


def search_threads(n: int) -> int:
    """Threads for one compiled search: one below ``THREADS_FROM`` passages (a search takes milliseconds
    there), else one per usable core, at most ``MAX_SEARCH_THREADS``."""
    if n < THREADS_FROM:
        return 1
    from explorer.threads import usable_cores

    return max(1, min(MAX_SEARCH_THREADS, usable_cores()))


def _map(path: Path, dtype: Any) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class _Scratch(threading.local):
    """Per-thread buffers of one score and one flag per passage, kept between searches (and left
    cleared after each), so a search costs what its posting lists cost, not the corpus size."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        held = self.held.get(n)
        if held is None:
            held = self.held[n] = (np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool))
        return held


_scratch = _Scratch()


def lookup(rows: np.ndarray, docs: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each of the sorted ``rows``' value in a posting list (0 where absent), by whichever binary search is
    cheaper: the list's passages among the rows, or the rows in the list."""
    out = np.zeros(len(rows), dtype=np.float32)
    if len(docs) <= 8 * len(rows):
        at = np.searchsorted(rows, docs)
        inside = at < len(rows)
        hit = np.zeros(len(docs), dtype=bool)
        hit[inside] = rows[at[inside]] == docs[inside]
        out[at[hit]] = values[hit]
    else:
        at = np.searchsorted(docs, rows)
        inside = at < len(docs)
        hit = np.zeros(len(rows), dtype=bool)
        hit[inside] = docs[at[inside]] == rows[inside]
        out[hit] = values[at[hit]]
    return out


class _TopK:
    """One exact top-k search with the MaxScore bound (see the module docstring).

    Terms are read from the highest possible contribution down, their contributions added into a
    per-thread score buffer (partial scores, in whatever order) while the k-th best partial score
    is tracked; once the terms left could not lift a passage that none of the read terms touched
    to that score, their lists are not read. The passages that could still reach it are then scored
    exactly, every query term's contribution added in query order as bm25s adds them."""

    def __init__(self, index: BM25Index, query: list[int], k: int) -> None:
        self.index, self.query, self.k = index, query, k
        self.lists: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _list(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        held = self.lists.get(t)
        if held is None:
            docs, values = self.index.postings(t)
            held = self.lists[t] = (np.asarray(docs), np.asarray(values))
        return held

    def _kth(self, values: np.ndarray) -> float:
        positive = values[values > 0]
        if len(positive) < self.k:
            return 0.0
        return float(np.partition(positive, len(positive) - self.k)[len(positive) - self.k])

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        if self.k < 1 or not self.query:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        index = self.index
        mult = Counter(self.query)
        bound = {t: mult[t] * float(index.term_max[t]) for t in mult}
        order = sorted(mult, key=lambda t: (-bound[t], index.df(t)))
        acc, seen = _scratch.buffers(index.n)
        left = sum(bound.values())
        theta = 0.0
        best = np.zeros(0, dtype=np.int32)  # the passages of the k best partial scores so far
        parts: list[np.ndarray] = []
        try:
            for t in order:
                if theta > 0 and left * (1 + EPSILON) < theta * (1 - EPSILON):
                    break  # no passage outside those read can reach the k-th partial score
                docs, values = self._list(t)
                fresh = docs[~seen[docs]]
                seen[fresh] = True
                parts.append(fresh)  # recorded before any score is added, so the buffers are always cleared
                acc[docs] += values * np.float32(mult[t])
                left -= bound[t]
                # Only this list's passages changed score: the new k best are among them and the old k best.
                if len(best):
                    at = np.minimum(np.searchsorted(docs, best), len(docs) - 1)
                    best = best[docs[at] != best]
                pool = np.concatenate([best, docs]) if len(best) else docs
                scores = acc[pool]
                if len(pool) > self.k:
                    top = np.argpartition(scores, len(pool) - self.k)[len(pool) - self.k:]
                    best, scores = pool[top], scores[top]
                else:
                    best = pool
                theta = self._kth(scores)
            touched = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            parts = [touched]
            ceiling = acc[touched] + np.float32(left)  # no passage can score above its partial plus the unread
            keep = ceiling * (1 + EPSILON) >= theta * (1 - EPSILON)
            candidates, ceiling = touched[keep], ceiling[keep]
        finally:
            for part in parts:
                acc[part] = 0
                seen[part] = False
        # Exact scores, best ceilings first, until no ceiling left can reach the k-th exact score.
        order = np.argsort(-ceiling, kind="stable")
        block = max(4 * self.k, 256)
        rows_parts, value_parts = [], []
        exact_kth = 0.0
        start = 0
        while start < len(order):
            picked = order[start:start + block]
            start += len(picked)
            block *= 2  # few rounds: each costs a binary search per query term
            if exact_kth > 0 and float(ceiling[picked[0]]) * (1 + EPSILON) < exact_kth * (1 - EPSILON):
                break
            rows = np.sort(candidates[picked])
            rows_parts.append(rows)
            value_parts.append(self._exact(rows, mult))
            exact_kth = self._kth(np.concatenate(value_parts))
        if not rows_parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows, values = np.concatenate(rows_parts), np.concatenate(value_parts)
        order = np.argsort(rows, kind="stable")
        return full_top_k_of(rows[order], values[order], self.k)

    def _exact(self, rows: np.ndarray, mult: Counter) -> np.ndarray:
        """Scores of sorted ``rows``: every query term's contribution added in query order, repeats included,
        as float32 (the sums bm25s makes)."""
        found = {t: lookup(rows, *self._list(t)) for t in mult}
        values = np.zeros(len(rows), dtype=np.float32)
        for t in self.query:
            values += found[t]
        return values


def full_top_k_of(rows: np.ndarray, values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best positive ``values`` of sorted ``rows``, ties to the lowest row."""
    positive = values > 0
    rows, values = rows[positive], values[positive]
    if len(rows) > k:
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = values > kth
        tied = np.flatnonzero(values == kth)[: k - int(above.sum())]  # rows are sorted: lowest win
        keep = np.concatenate([np.flatnonzero(above), tied])
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))
    return rows[order].astype(np.int64), values[order]

