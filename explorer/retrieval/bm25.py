"""BM25 over a corpus, on an on-disk precomputed score matrix opened with memory mapping.

The index (:mod:`explorer.retrieval.bm25_index`) stores, for every term, the BM25 contribution
of every passage that contains it (what bm25s keeps in memory as a CSC matrix), term-major in
files under the cache. It is written by a streaming, resumable build
(:mod:`explorer.retrieval.bm25_build`) whose memory is bounded by a budget whatever the corpus
size, and opened memory-mapped: the DPR Wikipedia dump (21M passages) opens in milliseconds and
holds little resident memory; a query reads the posting lists of its own terms
(benchmarks/bench_corpus_scale.py measures both, results in BENCHMARKS.md). On the
~15,500-passage benchmark pool the top-10 of every benchmark question is the same as bm25s
0.3.16's in memory (tests/test_bm25_scale.py, benchmarks/bench_bm25_disk.py).

Scoring is the Lucene variant that Elasticsearch, and so the dynamic-RAG papers, use:

    score(q, d) = sum over query terms t (repeats counted) of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with Elasticsearch's defaults k1 = 1.2, b = 0.75. A passage is indexed as its title followed by
its text, since the title is often the only place the entity is named.

Searches only read files that never change after the build, so any number of threads may search
at once without a lock. Passages that share no term with the query are never returned, and ties
are broken by corpus order, so results are deterministic.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path

import numpy as np

from explorer.errors import ConfigError, CorpusError
from explorer.paths import cache_dir, portable_path
from explorer.retrieval.base import Hit, Passage
from explorer.retrieval.bm25_build import DEFAULT_MEMORY_BUDGET, BM25IndexBuild, BuildSettings
from explorer.retrieval.bm25_index import ENGINE, INDEX_VERSION, MANIFEST_FILE, BM25Index
from explorer.retrieval.building import prune_abandoned_builds, slug
from explorer.retrieval.corpora import Corpus
from explorer.retrieval.index_cache import prune_stale
from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings

Progress = Callable[[str], None]
INDEX_FORMAT_VERSION = INDEX_VERSION
META_FILE = MANIFEST_FILE
#: A damaged cached index of a corpus up to this size is rebuilt with a warning; a larger one (an hour's
#: build) is refused with a message saying where it is and how to rebuild it.
REBUILD_DAMAGED_UP_TO = 1_000_000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.2
    b: float = 0.75
    method: str = "lucene"

    def __post_init__(self) -> None:
        if not self.k1 >= 0:
            raise ConfigError(f"BM25 k1 must be >= 0, got {self.k1}")
        if not 0 <= self.b <= 1:
            raise ConfigError(f"BM25 b must be between 0 and 1, got {self.b}")
        if self.method not in ("lucene", "robertson", "atire"):
            raise ConfigError(f"unknown BM25 variant '{self.method}'", fix="use lucene, robertson or atire")


def _bm25s():
    import bm25s

    return bm25s


def engine_name() -> str:
    """The engine that scores (its scoring is bm25s 0.3.16's, reproduced on disk)."""
    return ENGINE


def index_key(corpus: Corpus, settings: TokenizerSettings, params: BM25Params) -> str:
    """What the cached index depends on: the passages, the analysis, the scoring and the engine."""
    payload = json.dumps({"fingerprint": corpus.fingerprint, "passages": len(corpus), "tokenizer": settings.as_dict(),
                          "k1": params.k1, "b": params.b, "method": params.method, "engine": engine_name(),
                          "format": INDEX_FORMAT_VERSION}, sort_keys=True)
    return blake2b(payload.encode(), digest_size=12).hexdigest()


_slug = slug


def index_dir_for(corpus: Corpus, key: str) -> Path:
    """``<cache>/indexes/<name>-<source hash>-<key>``: the source hash groups indexes of one corpus file,
    so a rebuilt index can replace the stale one."""
    source = blake2b(str(corpus.source).encode(), digest_size=3).hexdigest()
    return cache_dir("indexes") / f"{slug(corpus.name)}-{source}-{key}"


def tokenize_corpus(passages, tokenizer: Tokenizer, *, show_progress: bool = False
                    ) -> tuple[list[list[int]], dict[str, int]]:
    """Term ids per passage and the vocabulary, one passage at a time: the input of bm25s's in-memory
    index, which tests and benchmarks compare the on-disk index with. Each distinct word is analysed
    once (stopword check, stemming)."""
    from tqdm import tqdm

    vocab: dict[str, int] = {}
    word_ids: dict[str, int] = {}  # raw word -> term id, or -1 when the word is not indexed
    docs: list[list[int]] = []
    words_of = tokenizer.words
    for passage in tqdm(passages, desc="tokenizing", unit=" passages", disable=not show_progress, leave=False,
                        delay=0.5):
        ids = []
        for word in words_of(f"{passage.title} {passage.text}"):
            tid = word_ids.get(word)
            if tid is None:
                term = tokenizer.term(word)
                tid = vocab.setdefault(term, len(vocab)) if term else -1
                word_ids[word] = tid
            if tid >= 0:
                ids.append(tid)
        docs.append(ids)
    return docs, vocab


def bm25s_in_memory(corpus: Corpus, tokenizer: Tokenizer, params: BM25Params):
    """bm25s's in-memory index of the corpus, as the explorer built it before the on-disk index
    (the reference the on-disk index must agree with)."""
    docs, vocab = tokenize_corpus(corpus.passages, tokenizer)
    model = _bm25s().BM25(k1=params.k1, b=params.b, method=params.method)
    model.index((docs, vocab), create_empty_token=False, show_progress=False)
    return model


class BM25Retriever:
    """The Retriever protocol over one corpus, with ``describe()`` for traces and ``passage(id)``."""

    kind = "bm25"

    def __init__(self, corpus: Corpus, *, settings: TokenizerSettings | None = None,
                 params: BM25Params | None = None, use_cache: bool = True, progress: Progress | None = None,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, workers: int | None = None) -> None:
        self.corpus = corpus
        self.name = corpus.name
        self.settings = settings or TokenizerSettings()
        self.params = params or BM25Params()
        self.tokenizer = Tokenizer(self.settings)
        self.key = index_key(corpus, self.settings, self.params)
        if use_cache:
            self.index_path: Path | None = index_dir_for(corpus, self.key)
        else:  # a private folder, removed with the retriever
            scratch = Path(tempfile.mkdtemp(prefix="explorer-bm25-"))
            weakref.finalize(self, shutil.rmtree, scratch, True)
            self.index_path = scratch / "index"
        self.index_built = False  # True when this instance built the index rather than loading it
        started = time.perf_counter()
        index = self._open_stored()
        if index is None:
            self._build(progress, BuildSettings(self.params.method, self.params.k1, self.params.b, memory_budget,
                                                workers))
            index = BM25Index(self.index_path, expect=self._expect())
            self.index_built = True
            if use_cache:
                prune_stale(self.index_path, self.key, self.corpus.fingerprint, META_FILE)
        self.index_seconds = time.perf_counter() - started
        self.index = index
        self._n = len(corpus)

    # --- the index ----------------------------------------------------------------------------

    def _expect(self) -> dict:
        return {"key": self.key, "fingerprint": self.corpus.fingerprint, "passages": len(self.corpus)}

    def _meta(self) -> dict:
        return {"fingerprint": self.corpus.fingerprint, "name": self.name, "source": str(self.corpus.source),
                "tokenizer": self.settings.as_dict(), "created": time.time()}

    def _build(self, progress: Progress | None, settings: BuildSettings) -> None:
        assert self.index_path is not None
        prune_abandoned_builds(self.index_path, self.index_path.name[: -len(self.key)])
        build = BM25IndexBuild(self.index_path, self.corpus.store, self.tokenizer, settings, key=self.key,
                               meta=self._meta(), progress=progress)
        build.run()

    def _open_stored(self) -> BM25Index | None:
        """The stored index if there is a complete one for these passages; a damaged one is rebuilt
        (small corpora) or refused with where it is and how to rebuild it (large ones)."""
        assert self.index_path is not None
        if not self.index_path.exists():
            return None
        try:
            return BM25Index(self.index_path, expect=self._expect())
        except CorpusError as exc:
            if len(self.corpus) > REBUILD_DAMAGED_UP_TO:
                raise
            log.warning("rebuilding the BM25 index at %s (%s)", self.index_path, exc.what)
            shutil.rmtree(self.index_path, ignore_errors=True)
            return None

    # --- the Retriever protocol ---------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def _term_ids(self, query: str) -> list[int]:
        ids = []
        for term in self.tokenizer.terms(query):
            tid = self.index.term_id(term)
            if tid is not None:
                ids.append(tid)
        return ids

    def query_terms(self, query: str) -> list[str]:
        """The query's index terms that occur in the corpus (what the score is made of)."""
        return [t for t in self.tokenizer.terms(query) if self.index.term_id(t) is not None]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for the query (zeros when no term is in the corpus)."""
        return self.index.scores(self._term_ids(query))

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best passages sharing at least one term with the query, best first, ranks from 1."""
        if k < 1:
            return []
        ids = self._term_ids(query)
        if not ids:
            return []
        rows, values = self.index.top_k(ids, k)
        passages = self.corpus.passages_at(rows)
        return [Hit(passage=p, score=float(v), rank=rank)
                for rank, (p, v) in enumerate(zip(passages, values.tolist(), strict=True), start=1)]

    def passage(self, passage_id: str) -> Passage | None:
        return self.corpus.passage(passage_id)

    def describe(self) -> dict:
        """What a trace records about the retriever: enough to know which index answered."""
        return {"retriever": "bm25", "name": self.name, "source": portable_path(self.corpus.source),
                "format": self.corpus.format,
                "passages": len(self.corpus), "documents": self.corpus.documents,
                "fingerprint": self.corpus.fingerprint, "engine": engine_name(),
                "scoring": {"variant": self.params.method, "k1": self.params.k1, "b": self.params.b},
                "tokenizer": self.settings.as_dict(), "vocabulary": self.index.vocabulary,
                "index": portable_path(self.index_path) if self.index_path else None,
                "index_fingerprint": self.key, "index_type": "BM25 precomputed score matrix on disk (memory-mapped)",
                "embedder": None}

    def __repr__(self) -> str:
        return f"BM25Retriever({self.name!r}, {self._n:,} passages)"
