"""Opening a retriever by name or path, once per process.

``open_retriever("demo")`` (the bundled corpus), ``open_retriever("benchmark")`` (the pooled
benchmark corpus, built on first use) or ``open_retriever("/path/to/corpus")`` (any format of
:mod:`explorer.retrieval.formats`), with ``kind="bm25" | "dense" | "hybrid"`` (BM25 by default;
dense and hybrid share the BM25 retriever's loaded corpus). The web app, the CLI and the
evaluation runner all go through here, so a corpus is read and indexed once per process however
many runs use it; a corpus file that changes on disk is noticed (by size and modification time)
and reopened.

Other backends. Callers depend only on the :class:`~explorer.retrieval.base.Retriever` protocol
(``name``, ``search(query, k) -> list[Hit]``, ``__len__``) plus, where available, ``describe()``
and ``passage(id)``. An Elasticsearch / OpenSearch BM25 backend fits without touching callers:
a class holding a client and an index name whose ``search`` sends a ``multi_match`` query over
``title`` and ``text`` and turns each hit's ``_id``, ``_source`` and ``_score`` into a Hit (ranks
from 1), whose ``__len__`` is the index's document count, and whose ``describe`` reports the
cluster, index and analyzer. It would be chosen here by a spec prefix such as ``es://host/index``
before the path fallback; nothing else in the project would change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from explorer.cache import KeyedCache
from explorer.errors import CorpusError
from explorer.retrieval.base import Retriever
from explorer.retrieval.bm25 import BM25Params, BM25Retriever
from explorer.retrieval.choice import RetrieverConfig, retriever_config
from explorer.retrieval.corpora import NAMED_CORPORA, load_corpus, refuse_broken_link, source_stamp
from explorer.retrieval.formats import FORMATS
from explorer.retrieval.tokenizer import TokenizerSettings

Progress = Callable[[str], None]

_indexes: KeyedCache[Any] = KeyedCache("retrievers")


def _source_of(spec: str, progress: Progress | None) -> tuple[str, Path | None]:
    if spec == "demo":
        from explorer.retrieval.corpora import DEMO_PASSAGES

        return "demo", DEMO_PASSAGES
    if spec == "benchmark":
        from explorer.retrieval.benchmark import ensure_benchmark_corpus

        return "benchmark", ensure_benchmark_corpus(progress=progress).corpus_path
    path = Path(spec).expanduser()
    if not path.exists() and "/" not in spec:
        from explorer.retrieval.corpora import fetched_corpus

        fetched = fetched_corpus(spec)  # 'wikipedia', 'hotpotqa': a fetched file, or an error saying how to fetch it
        if fetched is not None:
            return fetched
    refuse_broken_link(path)
    if not path.exists():
        raise CorpusError(f"no corpus named '{spec}' and no such file or folder",
                          fix=f"use {' or '.join(repr(n) for n in NAMED_CORPORA)}, or the path of a corpus file or "
                              f"folder in one of the formats {', '.join(FORMATS)}")
    return str(path.resolve()), path.resolve()


def open_retriever(spec: str = "demo", *, progress: Progress | None = None, fmt: str | None = None,
                   settings: TokenizerSettings | None = None, params: BM25Params | None = None,
                   kind: str | RetrieverConfig | None = None, embedder: str | None = None,
                   options: dict[str, Any] | None = None) -> Retriever:
    """A retriever over the named corpus or path, shared by every caller in this process.

    ``kind`` is ``bm25`` (default), ``dense`` or ``hybrid`` (or a whole
    :class:`~explorer.retrieval.choice.RetrieverConfig`); ``embedder`` the dense model's path or
    name; ``options`` further :class:`RetrieverConfig` fields (``rrf_k``, ``index``...).
    ``progress`` receives messages (and turns on progress bars on stderr) while a corpus is read,
    an index is built or passages are embedded; a cached retriever returns at once without any.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise CorpusError("no corpus given", fix="use 'demo', 'benchmark' or the path of a corpus")
    spec = spec.strip()
    choice = retriever_config(kind, embedder, options)  # a bad choice fails before any loading
    settings = settings or TokenizerSettings()
    params = params or BM25Params()
    with _indexes.lock:  # one load per corpus even when several app threads ask at once
        key_name, path = _source_of(spec, progress)
        key = (key_name, fmt, settings, params)
        stamp = source_stamp(path) if path else ()

        def build() -> BM25Retriever:
            if progress:
                progress(f"reading corpus '{spec}'")
            named = spec in NAMED_CORPORA or (path is not None and key_name != str(path))  # demo, a fetched file
            corpus = load_corpus(spec if spec in NAMED_CORPORA else key_name if named else path, fmt,
                                 progress=progress,
                                 follows=("bm25",) if choice.kind == "bm25" else ("bm25", "dense"))
            return BM25Retriever(corpus, settings=settings, params=params, progress=progress)

        bm25 = _indexes.get(key, build, stamp=stamp)
        if choice.kind == "bm25":
            return bm25
        return _dense_or_hybrid(key, stamp, bm25, choice, progress)


def _dense_or_hybrid(key: tuple, stamp: tuple, bm25: BM25Retriever, choice: RetrieverConfig,
                     progress: Progress | None) -> Retriever:
    """The dense (or hybrid) retriever over ``bm25``'s corpus, cached like it (caller holds the lock)."""
    from explorer.retrieval.dense import DenseRetriever
    from explorer.retrieval.embeddings import get_encoder, resolve_embedder

    _, model_path = resolve_embedder(choice.embedder)
    dense_key = (*key, "dense", str(model_path), choice.dense_params())

    def build() -> DenseRetriever:
        if progress:
            progress(f"loading the sentence encoder {choice.embedder}")
        return DenseRetriever(bm25.corpus, get_encoder(choice.embedder), params=choice.dense_params(),
                              progress=progress)

    dense = _indexes.get(dense_key, build, stamp=stamp, valid=lambda d: d.corpus is bm25.corpus)
    if choice.kind == "dense":
        return dense
    from explorer.retrieval.hybrid import HybridRetriever

    fusion = (choice.rrf_k, choice.bm25_weight, choice.dense_weight, choice.depth)
    hybrid_key = (*dense_key, "hybrid", fusion)
    return _indexes.get(hybrid_key, lambda: HybridRetriever(bm25, dense, rrf_k=choice.rrf_k,
                                                            bm25_weight=choice.bm25_weight,
                                                            dense_weight=choice.dense_weight, depth=choice.depth),
                        stamp=stamp, valid=lambda h: h.dense is dense and h.bm25 is bm25)


def clear_cache() -> None:
    """Forget every opened retriever (tests; a long-running app after corpora were edited)."""
    _indexes.clear()
