"""BM25 on disk: a streaming, resumable build with bounded memory, and exact top-k search over memory maps.

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
manifest.json        counts, parameters, the content fingerprint; written last
===================  ==============================================================================

**The build** streams the passage store twice and never holds the corpus:

1. *Terms.* Chunks of passages (sized from the memory budget) are analysed exactly as
   :class:`~explorer.retrieval.tokenizer.Tokenizer` analyses a query: a whole batch is folded
   and lower-cased as one string and split by one regular expression, every distinct word is
   stemmed once (a word -> term id dictionary), and the chunk's (term, passage, tf) triples are
   written to disk sorted by term, with the passages' lengths. A finished chunk is a checkpoint.
2. *Postings.* Term-id ranges holding at most as many postings as the budget allows are
   gathered from every chunk, scored (with the document frequencies and average length now
   known) and written to their place in the preallocated posting files. A finished range is a
   checkpoint.

Every number is computed the way bm25s 0.3.16 computes it (idf in Python floats stored as
float32, the length normalisation in float64, contributions rounded to float32, per-query sums
in float32 in query-term order), so the on-disk index returns the same scores, bit for bit, and
the same top-k as the in-memory bm25s index it replaces (tests/test_bm25_scale.py checks this
on the benchmark pool).

**A search** is exact and reads only the posting lists of the query's terms. Up to a million
passages it scores every passage in one array (``full``, as bm25s does); above, it adds the
lists into a per-thread score buffer that is cleared after each search and reads back only the
postings' passages (``accumulate``), so its cost follows the lists, not the corpus. A third
strategy, ``maxscore``, skips the lists whose terms cannot lift any unseen passage to the k-th
score (the MaxScore bound); it returns the same results, but on the synthetic DPR corpus, whose
words are drawn independently so that few passages share several query terms, the bound prunes
little and it was slower than ``accumulate`` (benchmarks/results/corpus_scale_21m.md). Ties at
the k-th score go to the lowest corpus position, as before.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import math
import mmap
import os
import re
import shutil
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import CorpusError
from explorer.retrieval import bm25_kernel
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
)
from explorer.retrieval.passage_store import FIELD, PassageStore
from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings, fold

Progress = Callable[[str], None]
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
CHUNKS = "chunks"
DEFAULT_MEMORY_BUDGET = 2 << 30
MIN_MEMORY_BUDGET = 16 * MIB
BATCH_PASSAGES = 4096  # passages analysed as one string
BYTES_PER_TOKEN = 40  # pass 1: a token's arrays while a chunk's pairs are counted
BYTES_PER_POSTING = 40  # pass 2: a posting's arrays while a range is sorted and scored
BYTES_PER_SCORED = 96  # pass 2: the float64 temporaries of one posting while its contribution is computed
BYTES_PER_CHAR = 16  # a batch's text as strings, the folded and lower-cased copies, and the list of its words
SENTINEL = "Q"  # marks passage boundaries in a lower-cased batch: lower-casing leaves no upper-case letter
EPSILON = 1e-4  # slack on score bounds for float32 rounding of sums
PARALLEL_FROM = 200_000  # passages from which text is analysed in worker processes by default
FULL_SCORING_UP_TO = 1 << 20  # passages up to which a search scores every passage (one array, no bounds)
_WORD = re.compile(r"\w+")


def _fix_rebuild(folder: Path) -> str:
    return (f"delete the folder {folder} and search again to rebuild it (python -m explorer corpus index CORPUS "
            "builds it with a progress bar and resumes after an interruption)")


# --- analysis: passages to term ids ---------------------------------------------------------------


class Vocabulary:
    """Term ids in order of first appearance, and a cache of each raw word's term id (-1: not indexed)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.term_ids: dict[str, int] = {}
        self.terms: list[str] = []
        self.word_ids: dict[bytes, int] = {}
        self._text_bytes = 0  # characters of the words and terms held (for the memory estimate)

    def add_terms(self, terms: Sequence[str]) -> None:
        for term in terms:
            self.term_ids[term] = len(self.terms)
            self.terms.append(term)
            self._text_bytes += len(term)

    def estimated_bytes(self) -> int:
        """Python objects: ~100 bytes per dict entry and string header, plus the characters."""
        return (len(self.word_ids) + len(self.term_ids)) * 100 + len(self.terms) * 36 + 2 * self._text_bytes

    def map_words(self, words: list[bytes], new_terms: list[str]) -> np.ndarray:
        """Term ids of distinct UTF-8 ``words`` (-1: not indexed); new terms get the next ids, in the words' order."""
        ids = np.fromiter(map(self.word_ids.get, words, itertools.repeat(-2)), dtype=np.int32, count=len(words))
        unseen = np.flatnonzero(ids == -2)
        if len(unseen):
            word_ids, term_ids, term_of = self.word_ids, self.term_ids, self.tokenizer.term
            sentinel = self.tokenizer.settings.lowercase  # then "Q" can only be the passage separator
            for at in unseen.tolist():
                word = words[at]
                term = "" if sentinel and word == SENTINEL_BYTES else term_of(word.decode("utf-8"))
                if term:
                    tid = term_ids.get(term)
                    if tid is None:
                        tid = term_ids[term] = len(self.terms)
                        self.terms.append(term)
                        new_terms.append(term)
                        self._text_bytes += len(term)
                else:
                    tid = -1
                word_ids[word] = tid
                self._text_bytes += len(word)
                ids[at] = tid
        return ids


class WordIndexer:
    """Raw words (UTF-8 bytes) to small ids in order of first appearance, kept for a whole build by the
    process that analyses text: each batch reports only the words it is the first to meet."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}

    def index(self, tokens: list[bytes]) -> tuple[np.ndarray, list[bytes]]:
        known = self.ids
        ids = np.fromiter(map(known.get, tokens, itertools.repeat(-1)), dtype=np.int32, count=len(tokens))
        new: list[bytes] = []
        for at in np.flatnonzero(ids < 0).tolist():
            word = tokens[at]
            found = known.get(word)
            if found is None:
                found = known[word] = len(known)
                new.append(word)
            ids[at] = found
        return ids, new


@dataclass
class BatchWords:
    """A batch of passages analysed where its text was read: the words met there for the first time (in
    order of their ids), the word id of every token, the passage (within the batch) of every token, and
    the process whose word ids these are."""

    new_words: list[bytes]
    ids: np.ndarray
    rows: np.ndarray
    origin: int


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# ASCII bytes that are not word characters become spaces; UTF-8 bytes of other characters stay.
_ASCII_WORDS = bytes(b if b >= 128 or chr(b).isalnum() or b == ord("_") else ord(" ") for b in range(256))
SENTINEL_BYTES = SENTINEL.encode()


def _fold_run(match: re.Match) -> str:
    return fold(match.group())


def _blank_non_words(match: re.Match) -> str:
    run = match.group()
    if run.isalnum():
        return run
    return "".join(ch if ch.isalnum() or ch == "_" else " " for ch in run)


def words_of_batch(texts: list[str], settings: TokenizerSettings) -> list[bytes] | None:
    """The words of ``"\\x00"``-free texts joined by ``"\\x00"``, with the sentinel between passages, as
    ``Tokenizer.words`` finds them in each text (None when the batch cannot be done in one piece).

    Folding, lower-casing and the word pattern all work per character, so the batch is processed as
    one string: accents are folded in its non-ASCII runs only (decomposition never reaches across an
    ASCII character), the whole is lower-cased (keeping the final-sigma rule's context), non-word
    characters become spaces (``\\w`` is exactly ``isalnum() or "_"``, checked for every code point),
    and the UTF-8 bytes are split on spaces. Lower-casing leaves no upper-case letter, so the
    upper-case sentinel cannot be a word of the text."""
    joined = "\x00".join(texts)
    if not settings.lowercase or joined.count("\x00") != len(texts) - 1:
        return None
    if not joined.isascii():
        if settings.fold_accents:
            joined = _NON_ASCII.sub(_fold_run, joined)
        joined = joined.lower()
        joined = _NON_ASCII.sub(_blank_non_words, joined)
    else:
        joined = joined.lower()
    joined = joined.replace("\x00", f" {SENTINEL} ")
    return joined.encode("utf-8").translate(_ASCII_WORDS).split()


def analyse_records(records: list[str], settings: TokenizerSettings, indexer: WordIndexer,
                    origin: int = 0) -> BatchWords:
    """The words of store records ``id\\x1ftitle\\x1ftext``, as ``Tokenizer.words(title + " " + text)`` gives
    them, as ids of ``indexer``. Needs nothing else, so worker processes run it."""
    texts = [r[r.index(FIELD) + 1:].replace(FIELD, " ") for r in records]  # "title text"
    tokens = words_of_batch(texts, settings)
    if tokens is None:
        tokenizer = Tokenizer(settings)
        tokens, rows_list = [], []
        for row, text in enumerate(texts):
            found = [w.encode("utf-8") for w in tokenizer.words(text)]
            tokens.extend(found)
            rows_list.extend([row] * len(found))
        ids, new = indexer.index(tokens)
        return BatchWords(new, ids, np.asarray(rows_list, dtype=np.int32), origin)
    ids, new = indexer.index(tokens)
    boundary = ids == indexer.ids[SENTINEL_BYTES] if len(texts) > 1 else np.zeros(len(ids), dtype=bool)
    rows = np.cumsum(boundary, dtype=np.int32)
    keep = ~boundary
    return BatchWords(new, ids[keep], rows[keep], origin)


class WordTables:
    """The parent's view of each analysing process's word ids: their term ids (-1: not indexed)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.tables: dict[int, np.ndarray] = {}

    def term_ids(self, batch: BatchWords, new_terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, passage of each) of an analysed batch."""
        table = self.tables.get(batch.origin, np.zeros(0, dtype=np.int32))
        if batch.new_words:
            table = np.concatenate([table, self.vocab.map_words(batch.new_words, new_terms)])
            self.tables[batch.origin] = table
        ids = table[batch.ids] if len(batch.ids) else np.zeros(0, np.int32)
        keep = ids >= 0
        return ids[keep], batch.rows[keep]

    def estimated_bytes(self) -> int:
        """The analysing processes' word dictionaries (~100 bytes a word) and these tables."""
        return sum(len(t) * 104 for t in self.tables.values())


# Worker processes of a build: each opens the store itself and analyses the batches it is given.
_worker_store: PassageStore | None = None
_worker_settings: TokenizerSettings | None = None
_worker_indexer = WordIndexer()


def _worker_init(store_folder: str, settings: TokenizerSettings, parent: int) -> None:
    global _worker_store, _worker_settings
    _worker_store, _worker_settings = PassageStore(Path(store_folder)), settings

    def exit_with_parent() -> None:  # a build killed outright must not leave its workers behind
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()


def _worker_analyse(start: int, stop: int) -> BatchWords:
    assert _worker_store is not None and _worker_settings is not None
    return analyse_records(_worker_store.records_text(start, stop), _worker_settings, _worker_indexer, os.getpid())


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
        self.folder = BuildFolder(final, "BM25 index")
        self.ledger = MemoryLedger(settings.memory_budget)
        self.n = len(store)
        chars = store.record_bytes / max(1, len(store))
        self.workers = settings.workers if settings.workers is not None else (
            0 if self.n < PARALLEL_FROM else min(4, max(1, (os.cpu_count() or 1) - 1)))
        share = 0.15 / (1 + self.workers)  # each worker holds a batch of its own
        self.batch = int(min(BATCH_PASSAGES, max(64, settings.memory_budget * share / (chars * BYTES_PER_CHAR))))

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
            vocab, df, total_tokens = self._terms(state)
            self._postings(state, vocab, df, total_tokens)
            self._finish(state, vocab, df, total_tokens, seconds=time.perf_counter() - started, resumed=resumed)
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
                    self.folder.save_checkpoint(state)
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
                self.folder.save_checkpoint(state)
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
            "build": {"seconds": round(seconds, 2), "resumed": resumed, "memory_budget": self.settings.memory_budget,
                      "ledger_peak_bytes": self.ledger.peak, "ledger_at_peak": self.ledger.at_peak,
                      "peak_rss_bytes": peak_rss_bytes(),
                      "chunk_passages": int(state["chunk_passages"]), "chunks": int(state["chunks_done"]),
                      "ranges": len(state.get("ranges") or [])},
        }
        manifest["content_fingerprint"] = content_fingerprint(work, manifest)
        manifest["bytes"] = sum((work / name).stat().st_size for name in INDEX_FILES if name != MANIFEST_FILE)
        write_json_atomic(work / MANIFEST_FILE, manifest)  # last: marks the index complete


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
        acc, seen = _scratch.buffers(self.n)
        if bm25_kernel.available():
            distinct = list(dict.fromkeys(term_ids))
            position = {t: i for i, t in enumerate(distinct)}
            starts = np.asarray([self.indptr[t] for t in distinct], dtype=np.int64)
            ends = np.asarray([self.indptr[t + 1] for t in distinct], dtype=np.int64)
            return bm25_kernel.top_k(np.asarray(self.docs), np.asarray(self.scores_data), starts, ends,
                                     np.asarray([position[t] for t in term_ids], dtype=np.int64),
                                     np.arange(len(distinct), dtype=np.int64), acc, seen, k)
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
