"""The streaming, resumable build of the on-disk BM25 index, with bounded memory.

The build streams the passage store twice and never holds the corpus:

1. *Terms.* Chunks of passages (sized from the memory budget) are analysed
   (:mod:`explorer.retrieval.bm25_analysis`, in worker processes for large corpora), and each
   chunk's (term, passage, tf) triples are written to disk sorted by term, with the passages'
   lengths. A finished chunk is a checkpoint.
2. *Postings.* Term-id ranges holding at most as many postings as the budget allows are
   gathered from every chunk, scored (with the document frequencies and average length now
   known) and written to their place in the preallocated posting files. A finished range is a
   checkpoint.

Every number is computed the way bm25s 0.3.16 computes it (idf in Python floats stored as
float32, the length normalisation in float64, contributions rounded to float32), so the index
(:mod:`explorer.retrieval.bm25_index`) gives bm25s's scores bit for bit. Files are read and
written, never mapped, so the build's resident memory is what it holds: its ledger
(:class:`~explorer.retrieval.building.MemoryLedger`) sizes chunks and ranges from the budget and
records the peak in the manifest. The manifest, with the content fingerprint, is written last.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import CorpusError
from explorer.retrieval.bm25_analysis import (
    BatchWords,
    Vocabulary,
    WordIndexer,
    WordTables,
    _worker_analyse,
    _worker_init,
    analyse_records,
)
from explorer.retrieval.bm25_index import (
    DOCS_FILE,
    ENGINE,
    INDEX_FILES,
    INDEX_VERSION,
    INDPTR_FILE,
    MANIFEST_FILE,
    SCORES_FILE,
    TERM_MAX_FILE,
    VOCAB_FILE,
    VOCAB_IDS_FILE,
    VOCAB_OFFSETS_FILE,
    content_fingerprint,
)
from explorer.retrieval.building import (
    MIB,
    BuildFolder,
    MemoryLedger,
    check_disk,
    folder_bytes,
    human_bytes,
    peak_rss_bytes,
    progress_bar,
    read_json,
    write_json_atomic,
    write_manifest,
)
from explorer.retrieval.passage_store import PassageStore
from explorer.retrieval.tokenizer import Tokenizer

Progress = Callable[[str], None]
CHUNKS = "chunks"
DEFAULT_MEMORY_BUDGET = 2 << 30
MIN_MEMORY_BUDGET = 16 * MIB
BATCH_PASSAGES = 4096  # passages analysed as one string
BYTES_PER_TOKEN = 40  # pass 1: a token's arrays while a chunk's pairs are counted
BYTES_PER_POSTING = 40  # pass 2: a posting's arrays while a range is sorted and scored
BYTES_PER_SCORED = 96  # pass 2: the float64 temporaries of one posting while its contribution is computed
BYTES_PER_CHAR = 16  # a batch's text as strings, the folded and lower-cased copies, and the list of its words
PARALLEL_FROM = 200_000  # passages from which text is analysed in worker processes by default


# --- scoring, exactly as bm25s computes it ---------------------------------------------------------


def idf_of(method: str, df: int, n: int) -> float:
    """bm25s's idf for each variant, in Python floats (math.log), as its index build computes it."""
    if method == "lucene":
        return math.log(1 + (n - df + 0.5) / (df + 0.5))
    if method == "robertson":
        inner = (n - df + 0.5) / (df + 0.5)
        return math.log(1 if inner < 1 else inner)
    if method == "atire":
        return math.log(n / df)
    raise ValueError(f"unknown BM25 variant {method!r}")


def contributions(method: str, idf32: np.ndarray, tf: np.ndarray, doc_len: np.ndarray, avgdl: np.float64,
                  k1: float, b: float) -> np.ndarray:
    """float32 contributions idf * tfc with bm25s's operations and dtypes (tf as float32, |d| in float64)."""
    tf32 = tf.astype(np.float32)
    length = doc_len.astype(np.float64)
    if method in ("lucene", "robertson"):
        tfc = tf32 / (k1 * ((1 - b) + b * length / avgdl) + tf32)
    elif method == "atire":
        tfc = (tf32 * np.float32(k1 + 1)) / (tf32 + k1 * (1 - b + b * length / avgdl))
    else:
        raise ValueError(f"unknown BM25 variant {method!r}")
    return (idf32 * tfc).astype(np.float32)


# --- the build ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildSettings:
    """What shapes the index (part of its key) and how the build may use the machine (not part of it)."""

    method: str
    k1: float
    b: float
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    workers: int | None = None  # processes analysing text; None: none below PARALLEL_FROM passages, else the cores


def _chunk_passages(store: PassageStore, budget: int) -> int:
    words = store.manifest.get("words") or {}
    tokens = float(words.get("mean") or 100) + 4  # the title's words
    return max(1024, int(budget * 0.4 / (tokens * BYTES_PER_TOKEN)))


def estimated_disk_bytes(store: PassageStore) -> int:
    """Bytes the build needs at its peak: the chunk files plus the postings (distinct terms ~ 0.8 of the words)."""
    words = store.manifest.get("words") or {}
    tokens = int(words.get("total") or store.record_bytes // 6) + 4 * len(store)
    postings = int(tokens * 0.8)
    return postings * (10 + 8) + 12 * len(store) + 64 * MIB


class BM25IndexBuild:
    """One build of the index of ``store`` into ``final`` (resumed from its work folder if interrupted)."""

    def __init__(self, final: Path, store: PassageStore, tokenizer: Tokenizer, settings: BuildSettings, *,
                 key: str, meta: dict[str, Any], progress: Progress | None = None) -> None:
        if settings.memory_budget < MIN_MEMORY_BUDGET:
            raise CorpusError(f"a memory budget of {human_bytes(settings.memory_budget)} is too small to build an "
                              "index", where="memory budget", fix=f"give at least {human_bytes(MIN_MEMORY_BUDGET)}")
        self.final = final
        self.store = store
        self.tokenizer = tokenizer
        self.settings = settings
        self.key = key
        self.meta = meta
        self.progress = progress
        self._earlier, self._started = 0.0, time.perf_counter()
        self.folder = BuildFolder(final, "BM25 index")
        self.ledger = MemoryLedger(settings.memory_budget)
        self.n = len(store)
        chars = store.record_bytes / max(1, len(store))
        self.workers = settings.workers if settings.workers is not None else (
            0 if self.n < PARALLEL_FROM else min(4, max(1, (os.cpu_count() or 1) - 1)))
        share = 0.15 / (1 + self.workers)  # each worker holds a batch of its own
        self.batch = int(min(BATCH_PASSAGES, max(64, settings.memory_budget * share / (chars * BYTES_PER_CHAR))))

    def _seconds(self) -> float:
        """The build's time over all its sessions (an earlier session's, up to its last checkpoint)."""
        return self._earlier + time.perf_counter() - self._started

    def _save(self, state: dict[str, Any]) -> None:
        state["seconds"] = self._seconds()
        self.folder.save_checkpoint(state)

    def _say(self, message: str) -> None:
        if self.progress:
            self.progress(message)

    def run(self) -> None:
        started = time.perf_counter()
        folder = self.folder
        with folder.locked(wait_message=self.progress):
            if (self.final / MANIFEST_FILE).is_file():
                return  # built by the process we waited for
            state = folder.checkpoint()
            if state.get("key") != self.key:
                folder.reset()
                state = {"key": self.key, "chunk_passages": _chunk_passages(self.store, self.settings.memory_budget)}
                check_disk(folder.work, estimated_disk_bytes(self.store), "BM25 index")
                folder.save_checkpoint(state)
            else:
                check_disk(folder.work, estimated_disk_bytes(self.store), "BM25 index",
                           already=folder_bytes(folder.work))
            resumed = bool(state.get("chunks_done") or state.get("ranges_done"))
            self._earlier, self._started = float(state.get("seconds", 0.0)), started
            state["sessions"] = int(state.get("sessions", 0)) + 1 if resumed else 1
            vocab, df, total_tokens = self._terms(state)
            self._postings(state, vocab, df, total_tokens)
            self._finish(state, vocab, df, total_tokens, seconds=self._seconds(), resumed=resumed)
            folder.finish(keep=INDEX_FILES)

    # --- pass 1 -------------------------------------------------------------------------------

    def _chunk_dir(self, c: int) -> Path:
        return self.folder.work / CHUNKS / f"{c:06d}"

    def _terms(self, state: dict[str, Any]) -> tuple[Vocabulary, np.ndarray, int]:
        size = int(state["chunk_passages"])
        count = -(-self.n // size)
        vocab = Vocabulary(self.tokenizer)
        df = np.zeros(0, dtype=np.int64)
        total_tokens = 0
        done = 0
        (self.folder.work / CHUNKS).mkdir(exist_ok=True)
        while done < count and (self._chunk_dir(done) / "meta.json").is_file():  # finished chunks, read back
            meta = read_json(self._chunk_dir(done) / "meta.json") or {}
            new_terms = (self._chunk_dir(done) / "new_terms.txt").read_text(encoding="utf-8").split("\n")
            vocab.add_terms(new_terms[: int(meta.get("new_terms", 0))])
            terms = np.fromfile(self._chunk_dir(done) / "terms.i32", dtype=np.int32)
            df = _add_counts(df, terms, len(vocab.terms))
            total_tokens += int(meta["tokens"])
            done += 1
        if done:
            self._say(f"resuming the BM25 index of {self.meta.get('name')} after {done} of {count} chunks")
        elif self.progress:
            self._say(f"building the BM25 index of {self.meta.get('name')} ({self.n:,} passages, {count} chunks of "
                      f"{size:,})")
        self.ledger.hold("vocabulary", vocab.estimated_bytes())
        bar = progress_bar(self.n, "BM25 terms", " passages", enabled=self.progress is not None,
                           initial=min(self.n, done * size))
        chunks = {c: (c * size, min(self.n, (c + 1) * size)) for c in range(done, count)}
        parts: tuple[list[np.ndarray], list[np.ndarray], list[str]] = ([], [], [])
        try:
            tables = WordTables(vocab)
            for c, begin, end, batch in self._batch_stream(chunks):
                start, stop = chunks[c]
                ids, rows = tables.term_ids(batch, parts[2])
                self.ledger.hold("word tables", tables.estimated_bytes())
                parts[0].append(ids)
                parts[1].append(rows + np.int32(begin - start))
                self.ledger.hold_arrays("chunk tokens", *parts[0], *parts[1])
                bar.update(end - begin)
                if end == stop:
                    tokens, df = self._write_chunk(c, start, stop, parts, vocab, df)
                    parts = ([], [], [])
                    total_tokens += tokens
                    state["chunks_done"] = c + 1
                    self._save(state)
        finally:
            bar.close()
        self.ledger.drop("analysis", "word tables")
        vocab.word_ids.clear()  # the word caches serve the analysis only; the terms themselves are kept
        vocab.term_ids.clear()
        self.ledger.hold("vocabulary", vocab.estimated_bytes())
        return vocab, df, total_tokens

    def _batch_stream(self, chunks: dict[int, tuple[int, int]]) -> Iterator[tuple[int, int, int, BatchWords]]:
        """(chunk, first row, end row, analysed batch) in corpus order, analysed in worker processes when
        the build has any (the parent then only maps distinct words and counts pairs)."""
        jobs = [(c, b, min(stop, b + self.batch)) for c, (start, stop) in chunks.items()
                for b in range(start, stop, self.batch)]
        chars = self.store.record_bytes / max(1, self.n)
        per_batch = int(self.batch * chars * BYTES_PER_CHAR)
        if not self.workers:
            self.ledger.hold("analysis", per_batch)
            indexer = WordIndexer()
            for c, b, e in jobs:
                yield c, b, e, analyse_records(self.store.records_text(b, e), self.tokenizer.settings, indexer)
            return
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        ahead = 2 * self.workers
        # each worker holds one batch's strings; the results waiting here hold ~12 bytes per token
        self.ledger.hold("analysis", self.workers * per_batch + ahead * per_batch // 4)
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"), initializer=_worker_init,
                                 initargs=(str(self.store.folder), self.tokenizer.settings, os.getpid())) as pool:
            queue = iter(jobs)
            pending = deque((job, pool.submit(_worker_analyse, job[1], job[2]))
                            for job in itertools.islice(queue, ahead))
            while pending:
                job, future = pending.popleft()
                result = future.result()
                following = next(queue, None)
                if following is not None:
                    pending.append((following, pool.submit(_worker_analyse, following[1], following[2])))
                yield (*job, result)

    def _write_chunk(self, c: int, start: int, stop: int, parts: tuple[list[np.ndarray], list[np.ndarray], list[str]],
                     vocab: Vocabulary, df: np.ndarray) -> tuple[int, np.ndarray]:
        term_parts, row_parts, new_terms = parts
        self.ledger.hold("vocabulary", vocab.estimated_bytes())
        terms = np.concatenate(term_parts) if term_parts else np.zeros(0, np.int32)
        rows = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int32)
        term_parts.clear()
        row_parts.clear()
        lengths = np.bincount(rows, minlength=stop - start).astype(np.int32)
        keys = (terms.astype(np.int64) << 32) | rows.astype(np.int64)
        self.ledger.hold_arrays("chunk tokens", terms, rows, keys, keys, keys)  # np.unique sorts a copy
        del terms, rows
        pairs, tf = np.unique(keys, return_counts=True)
        del keys
        pair_terms = (pairs >> 32).astype(np.int32)
        pair_rows = (pairs & 0xFFFFFFFF).astype(np.uint32 if stop - start > 65535 else np.uint16)
        pair_tf = tf.astype(np.uint16 if tf.max(initial=0) <= 65535 else np.uint32)
        self.ledger.hold_arrays("chunk pairs", pairs, tf, pair_terms, pair_rows, pair_tf)
        tmp = self.folder.work / CHUNKS / f".tmp-{c:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        pair_terms.tofile(tmp / "terms.i32")
        pair_rows.tofile(tmp / "rows.bin")
        pair_tf.tofile(tmp / "tf.bin")
        lengths.tofile(tmp / "lengths.i32")
        (tmp / "new_terms.txt").write_text("\n".join(new_terms), encoding="utf-8")
        write_json_atomic(tmp / "meta.json", {"passages": stop - start, "pairs": len(pair_terms),
                                              "tokens": int(lengths.sum(dtype=np.int64)),
                                              "rows_dtype": pair_rows.dtype.name, "tf_dtype": pair_tf.dtype.name,
                                              "new_terms": len(new_terms)})
        target = self._chunk_dir(c)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # the chunk exists whole or not at all
        df = _add_counts(df, pair_terms, len(vocab.terms))
        self.ledger.hold("document frequencies", df.nbytes)
        self.ledger.drop("chunk tokens", "chunk pairs")
        return int(lengths.sum(dtype=np.int64)), df

    # --- pass 2 -------------------------------------------------------------------------------

    def _score_block(self) -> int:
        return max(1 << 14, self.settings.memory_budget // 8 // BYTES_PER_SCORED)

    def _ranges(self, df: np.ndarray) -> list[tuple[int, int]]:
        """Term-id ranges of at most the budget's postings each (a single longer term is a range of its own)."""
        budget = self.settings.memory_budget
        spare = budget - self.ledger.current - self._score_block() * BYTES_PER_SCORED
        most = max(1, int(max(spare, budget // 4) // BYTES_PER_POSTING))
        ranges, start, held = [], 0, 0
        for t, count in enumerate(df.tolist()):
            if held and held + count > most:
                ranges.append((start, t))
                start, held = t, 0
            held += count
        if start < len(df):
            ranges.append((start, len(df)))
        return ranges

    def _postings(self, state: dict[str, Any], vocab: Vocabulary, df: np.ndarray, total_tokens: int) -> None:
        work = self.folder.work
        v = len(vocab.terms)
        if v == 0:
            raise CorpusError("no passage has a searchable word (only stopwords, punctuation or single letters)",
                              where=str(self.meta.get("source", "")), fix="add passages with real text")
        indptr = np.zeros(v + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        total = int(indptr[-1])
        if not (work / INDPTR_FILE).is_file() or (work / INDPTR_FILE).stat().st_size != indptr.nbytes:
            indptr.tofile(work / INDPTR_FILE)
        docs_out = _Output(work / DOCS_FILE, np.int32, total)
        scores_out = _Output(work / SCORES_FILE, np.float32, total)
        max_out = _Output(work / TERM_MAX_FILE, np.float32, v)
        done = set(state.get("ranges_done") or [])
        chunk_count = int(state["chunks_done"])
        chunks = [self._open_chunk(c, int(state["chunk_passages"])) for c in range(chunk_count)]
        lengths = np.concatenate([c.pop("lengths") for c in chunks]) if chunks else np.zeros(0, np.int32)
        self.ledger.hold("passage lengths", lengths.nbytes)
        self.ledger.hold("term offsets", indptr.nbytes)
        ranges = [(int(a), int(z)) for a, z in state.get("ranges") or self._ranges(df)]
        state["ranges"] = [list(r) for r in ranges]
        edges = np.asarray([r[0] for r in ranges] + [ranges[-1][1]] if ranges else [0], dtype=np.int64)
        for chunk in chunks:  # where each range starts in each chunk, from one read of its term column
            terms_file = chunk["folder"] / "terms.i32"
            column = np.fromfile(terms_file, dtype=np.int32) if terms_file.is_file() else np.zeros(0, np.int32)
            chunk["bounds"] = np.searchsorted(column, edges)
            del column
        avgdl = np.float64(total_tokens) / self.n
        method, k1, b = self.settings.method, self.settings.k1, self.settings.b
        idf_cache: dict[int, np.float32] = {}
        block = self._score_block()
        bar = progress_bar(total, "BM25 postings", " postings", enabled=self.progress is not None,
                           initial=sum(int(indptr[r[1]] - indptr[r[0]]) for i, r in enumerate(ranges) if i in done))
        try:
            for i, (t0, t1) in enumerate(ranges):
                if i in done:
                    continue
                parts_t, parts_d, parts_f = [], [], []
                for chunk in chunks:
                    lo, hi = int(chunk["bounds"][i]), int(chunk["bounds"][i + 1])
                    if hi > lo:  # read, not mapped: the pages stay in the page cache, out of this process
                        parts_t.append(_read_slice(chunk["folder"] / "terms.i32", np.int32, lo, hi))
                        parts_d.append(_read_slice(chunk["folder"] / "rows.bin", chunk["rows_dtype"], lo, hi)
                                       .astype(np.int32) + np.int32(chunk["base"]))
                        parts_f.append(_read_slice(chunk["folder"] / "tf.bin", chunk["tf_dtype"], lo, hi))
                terms = np.concatenate(parts_t) if parts_t else np.zeros(0, np.int32)
                docs = np.concatenate(parts_d) if parts_d else np.zeros(0, np.int32)
                tf = np.concatenate(parts_f) if parts_f else np.zeros(0, np.uint16)
                del parts_t, parts_d, parts_f
                order = np.argsort(terms, kind="stable")  # each chunk's slice is sorted by (term, row)
                terms, docs, tf = terms[order], docs[order], tf[order]
                del order
                counts = df[t0:t1]
                idf32 = np.array([idf_cache.setdefault(int(c), np.float32(idf_of(method, int(c), self.n)))
                                  for c in counts.tolist()], dtype=np.float32)
                self.ledger.hold("range", len(terms) * BYTES_PER_POSTING + block * BYTES_PER_SCORED)
                repeated = np.repeat(idf32, counts)
                scores = np.empty(len(docs), dtype=np.float32)
                for at in range(0, len(docs), block):  # float64 temporaries for one block at a time
                    part = slice(at, at + block)
                    scores[part] = contributions(method, repeated[part], tf[part], lengths[docs[part]], avgdl, k1, b)
                del repeated
                a, z = int(indptr[t0]), int(indptr[t1])
                docs_out.write(a, docs)
                scores_out.write(a, scores)
                starts = (indptr[t0:t1] - a).astype(np.int64)
                maxima = np.maximum.reduceat(scores, starts) if len(scores) else np.zeros(t1 - t0, np.float32)
                max_out.write(t0, maxima.astype(np.float32))
                self.ledger.drop("range")
                done.add(i)
                state["ranges_done"] = sorted(done)
                self._save(state)
                bar.update(z - a)
        finally:
            bar.close()
        for output in (docs_out, scores_out, max_out):
            output.close()
        self.avgdl = float(avgdl)

    def _open_chunk(self, c: int, size: int) -> dict[str, Any]:
        folder = self._chunk_dir(c)
        meta = read_json(folder / "meta.json") or {}
        # Nothing is mapped: a binary search in a mapped column reads the whole file into the process.
        return {"folder": folder, "rows_dtype": np.dtype(meta["rows_dtype"]),
                "tf_dtype": np.dtype(meta["tf_dtype"]),
                "lengths": np.fromfile(folder / "lengths.i32", dtype=np.int32), "base": c * size}

    # --- the vocabulary and the manifest --------------------------------------------------------

    def _finish(self, state: dict[str, Any], vocab: Vocabulary, df: np.ndarray, total_tokens: int, *,
                seconds: float, resumed: bool) -> None:
        work = self.folder.work
        order = sorted(range(len(vocab.terms)), key=vocab.terms.__getitem__)
        encoded = [vocab.terms[i].encode("utf-8") for i in order]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        (work / VOCAB_FILE).write_bytes(b"".join(encoded))
        offsets.tofile(work / VOCAB_OFFSETS_FILE)
        np.asarray(order, dtype=np.int32).tofile(work / VOCAB_IDS_FILE)
        self._say("computing the index fingerprint")
        manifest = {
            "version": INDEX_VERSION, "engine": ENGINE, "key": self.key, **self.meta,
            "passages": self.n, "vocabulary": len(vocab.terms), "postings": int(df.sum()), "tokens": total_tokens,
            "avgdl": self.avgdl, "method": self.settings.method, "k1": self.settings.k1, "b": self.settings.b,
            "max_df": int(df.max(initial=0)),
            "build": {"seconds": round(seconds, 2), "resumed": resumed, "sessions": int(state.get("sessions", 1)),
                      "memory_budget": self.settings.memory_budget,
                      "ledger_peak_bytes": self.ledger.peak, "ledger_at_peak": self.ledger.at_peak,
                      "peak_rss_bytes": peak_rss_bytes(),
                      "chunk_passages": int(state["chunk_passages"]), "chunks": int(state["chunks_done"]),
                      "ranges": len(state.get("ranges") or [])},
        }
        manifest["content_fingerprint"] = content_fingerprint(work, manifest)
        manifest["bytes"] = sum((work / name).stat().st_size for name in INDEX_FILES if name != MANIFEST_FILE)
        write_manifest(work, MANIFEST_FILE, manifest, INDEX_FILES)  # last: marks the index complete


def _add_counts(df: np.ndarray, terms: np.ndarray, size: int) -> np.ndarray:
    if len(df) < size:
        df = np.concatenate([df, np.zeros(size - len(df), dtype=np.int64)])
    if len(terms):
        counts = np.bincount(terms, minlength=size)
        df[: len(counts)] += counts
    return df


class _Output:
    """A preallocated output file (sparse until written) filled by positioned writes, not a mapping, so
    the written pages never count in the build's resident memory. Kept as is across a resume."""

    def __init__(self, path: Path, dtype: Any, count: int) -> None:
        self.itemsize = np.dtype(dtype).itemsize
        size = self.itemsize * count
        if not path.is_file() or path.stat().st_size != size:
            with open(path, "wb") as stream:
                stream.truncate(size)
        self.fd = os.open(path, os.O_WRONLY)

    def write(self, at: int, values: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(values)).cast("B")
        offset = at * self.itemsize
        while len(data):
            written = os.pwrite(self.fd, data, offset)
            data, offset = data[written:], offset + written

    def close(self) -> None:
        os.close(self.fd)


def _read_slice(path: Path, dtype: Any, lo: int, hi: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.fromfile(path, dtype=dtype, count=hi - lo, offset=lo * dtype.itemsize)


