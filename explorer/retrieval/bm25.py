"""BM25 over a corpus in memory, on bm25s's precomputed sparse score matrix, cached on disk.

Why bm25s: it stores, for every term, the BM25 contribution of every passage that contains it
(a CSC matrix), so a query is a sum of a few posting lists plus a top-k selection, all in
numpy. benchmarks/bench_retrieval.py measures it against rank-bm25 (which rescores the whole
corpus in Python per query) on the same term lists: on the ~15,500-passage benchmark pool a query
takes under 0.1 ms against tens of milliseconds with rank-bm25, and at a million passages ~1.6 ms,
with the index built in under a minute (benchmarks/results/retrieval.md).

Scoring is the Lucene variant that Elasticsearch, and so the dynamic-RAG papers, use:

    score(q, d) = sum over query terms t (repeats counted) of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with Elasticsearch's defaults k1 = 1.2, b = 0.75. A passage is indexed as its title followed by
its text, since the title is often the only place the entity is named.

Searches only read arrays that never change after loading, so any number of threads may search
at once without a lock. Passages that share no term with the query are never returned, and ties
are broken by corpus order, so results are deterministic.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path

import numpy as np

from explorer.errors import ConfigError, CorpusError
from explorer.paths import cache_dir, portable_path
from explorer.retrieval.base import Hit, Passage
from explorer.retrieval.corpora import Corpus
from explorer.retrieval.index_cache import load_stored, prune_stale, store_folder
from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings

Progress = Callable[[str], None]
INDEX_FORMAT_VERSION = 1
META_FILE = "explorer-index.json"
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
    return f"bm25s {_bm25s().__version__}"


def index_key(corpus: Corpus, settings: TokenizerSettings, params: BM25Params) -> str:
    """What the cached index depends on: the passages, the analysis, the scoring and the engine."""
    payload = json.dumps({"fingerprint": corpus.fingerprint, "passages": len(corpus), "tokenizer": settings.as_dict(),
                          "k1": params.k1, "b": params.b, "method": params.method, "engine": engine_name(),
                          "format": INDEX_FORMAT_VERSION}, sort_keys=True)
    return blake2b(payload.encode(), digest_size=12).hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:40] or "corpus"


def index_dir_for(corpus: Corpus, key: str) -> Path:
    """``<cache>/indexes/<name>-<source hash>-<key>``: the source hash groups indexes of one corpus file,
    so a rebuilt index can replace the stale one."""
    source = blake2b(str(corpus.source).encode(), digest_size=3).hexdigest()
    return cache_dir("indexes") / f"{_slug(corpus.name)}-{source}-{key}"


def tokenize_corpus(passages: list[Passage], tokenizer: Tokenizer, *, show_progress: bool = False
                    ) -> tuple[list[list[int]], dict[str, int]]:
    """Term ids per passage and the vocabulary. Each distinct word is analysed once (stopword check,
    stemming), which is what makes a million passages affordable in Python."""
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


class BM25Retriever:
    """The Retriever protocol over one corpus, with ``describe()`` for traces and ``passage(id)``."""

    kind = "bm25"

    def __init__(self, corpus: Corpus, *, settings: TokenizerSettings | None = None,
                 params: BM25Params | None = None, use_cache: bool = True, progress: Progress | None = None) -> None:
        self.corpus = corpus
        self.name = corpus.name
        self.settings = settings or TokenizerSettings()
        self.params = params or BM25Params()
        self.tokenizer = Tokenizer(self.settings)
        self.key = index_key(corpus, self.settings, self.params)
        self.index_path: Path | None = index_dir_for(corpus, self.key) if use_cache else None
        self.index_built = False  # True when this instance built the index rather than loading it
        self.index_seconds = 0.0
        started = time.perf_counter()
        model = self._load_cached() if self.index_path else None
        if model is None:
            model = self._build(progress)
            self.index_built = True
            if self.index_path:
                self._store(model)
        self.index_seconds = time.perf_counter() - started
        self._model = model
        self._vocab: dict[str, int] = model.vocab_dict
        self._n = len(corpus.passages)

    # --- the index ----------------------------------------------------------------------------

    def _build(self, progress: Progress | None):
        bm25s = _bm25s()
        if progress:
            progress(f"building the BM25 index of '{self.name}' ({len(self.corpus):,} passages)")
        docs, vocab = tokenize_corpus(self.corpus.passages, self.tokenizer, show_progress=progress is not None)
        if not vocab:
            raise CorpusError("no passage has a searchable word (only stopwords, punctuation or single letters)",
                              where=str(self.corpus.source), fix="add passages with real text")
        model = bm25s.BM25(k1=self.params.k1, b=self.params.b, method=self.params.method)
        # bm25s draws its own bars, which only help on corpora that take a while
        model.index((docs, vocab), create_empty_token=False,
                    show_progress=progress is not None and len(docs) >= 100_000)
        return model

    def _store(self, model) -> None:
        """Keep the index in the cache (explorer.retrieval.index_cache: renamed into place, stale ones pruned)."""
        assert self.index_path is not None
        meta = {"format": INDEX_FORMAT_VERSION, "key": self.key, "fingerprint": self.corpus.fingerprint,
                "passages": len(self.corpus), "vocabulary": len(model.vocab_dict), "engine": engine_name(),
                "tokenizer": self.settings.as_dict(), "k1": self.params.k1, "b": self.params.b,
                "method": self.params.method, "source": str(self.corpus.source), "created": time.time()}
        if store_folder(self.index_path, lambda tmp: model.save(tmp, show_progress=False), meta, META_FILE,
                        "BM25 index"):
            prune_stale(self.index_path, self.key, self.corpus.fingerprint, META_FILE)

    def _load_cached(self):
        """The stored index if it exists and matches this corpus; None (after removing it) if damaged."""
        assert self.index_path is not None

        def read(meta: dict) -> object:
            if (meta.get("key") != self.key or meta.get("fingerprint") != self.corpus.fingerprint
                    or meta.get("passages") != len(self.corpus)):
                raise ValueError("the stored index belongs to other passages")
            model = _bm25s().BM25.load(self.index_path, show_progress=False)
            scores = model.scores
            n_data = len(scores["data"])
            if (int(scores["num_docs"]) != len(self.corpus) or len(scores["indptr"]) != len(model.vocab_dict) + 1
                    or len(scores["indices"]) != n_data or int(scores["indptr"][-1]) != n_data):
                raise ValueError("the stored arrays do not fit together")
            if len(scores["indices"]) and int(scores["indices"].max()) >= len(self.corpus):
                raise ValueError("the stored index points past the corpus")
            return model

        return load_stored(self.index_path, META_FILE, "BM25 index", read)

    # --- the Retriever protocol ---------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def query_terms(self, query: str) -> list[str]:
        """The query's index terms that occur in the corpus (what the score is made of)."""
        return [t for t in self.tokenizer.terms(query) if t in self._vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for the query (zeros when no term is in the corpus)."""
        ids = [self._vocab[t] for t in self.tokenizer.terms(query) if t in self._vocab]
        if not ids:
            return np.zeros(self._n, dtype=np.float32)
        return self._model.get_scores_from_ids(ids)

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best passages sharing at least one term with the query, best first, ranks from 1."""
        if k < 1:
            return []
        scores = self.scores(query)
        candidates = np.flatnonzero(scores > 0)
        if not len(candidates):
            return []
        values = scores[candidates]
        if len(candidates) > k:
            kth = np.partition(values, len(values) - k)[len(values) - k]  # the k-th largest score
            above = values > kth
            tied = np.flatnonzero(values == kth)[: k - int(above.sum())]  # lowest corpus positions win ties
            keep = np.concatenate([np.flatnonzero(above), tied])
            candidates, values = candidates[keep], values[keep]
        order = np.lexsort((candidates, -values))
        passages = self.corpus.passages
        return [Hit(passage=passages[int(candidates[i])], score=float(values[i]), rank=rank)
                for rank, i in enumerate(order, start=1)]

    def passage(self, passage_id: str) -> Passage | None:
        return self.corpus.passage(passage_id)

    def describe(self) -> dict:
        """What a trace records about the retriever: enough to know which index answered."""
        return {"retriever": "bm25", "name": self.name, "source": portable_path(self.corpus.source),
                "format": self.corpus.format,
                "passages": len(self.corpus), "documents": self.corpus.documents,
                "fingerprint": self.corpus.fingerprint, "engine": engine_name(),
                "scoring": {"variant": self.params.method, "k1": self.params.k1, "b": self.params.b},
                "tokenizer": self.settings.as_dict(), "vocabulary": len(self._vocab),
                "index": portable_path(self.index_path) if self.index_path else None, "index_fingerprint": self.key,
                "index_type": "BM25 sparse score matrix (bm25s)", "embedder": None}

    def __repr__(self) -> str:
        return f"BM25Retriever({self.name!r}, {self._n:,} passages)"
