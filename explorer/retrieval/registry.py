"""Opening a retriever by name or path, once per process.

``open_retriever("demo")`` (the bundled corpus), ``open_retriever("benchmark")`` (the pooled
benchmark corpus, built on first use) or ``open_retriever("/path/to/corpus")`` (any format of
:mod:`explorer.retrieval.formats`). The web app, the CLI and the evaluation runner all go through
here, so a corpus is read and indexed once per process however many runs use it; a corpus file
that changes on disk is noticed (by size and modification time) and reopened.

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

import threading
from collections.abc import Callable
from pathlib import Path

from explorer.errors import CorpusError
from explorer.retrieval.base import Retriever
from explorer.retrieval.bm25 import BM25Params, BM25Retriever
from explorer.retrieval.corpora import NAMED_CORPORA, load_corpus
from explorer.retrieval.formats import FORMATS
from explorer.retrieval.tokenizer import TokenizerSettings

Progress = Callable[[str], None]

_lock = threading.Lock()
_open: dict[tuple, tuple[tuple, BM25Retriever]] = {}


def _stamp(path: Path) -> tuple:
    """What tells that a corpus on disk changed: size and mtime of the file, or of every file in a folder."""
    try:
        if path.is_dir():
            return tuple(sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                                for p in path.rglob("*.txt") if p.is_file()))
        stat = path.stat()
        return (stat.st_size, stat.st_mtime_ns)
    except OSError:
        return ()


def _source_of(spec: str, progress: Progress | None) -> tuple[str, Path | None]:
    if spec == "demo":
        from explorer.retrieval.corpora import DEMO_PASSAGES

        return "demo", DEMO_PASSAGES
    if spec == "benchmark":
        from explorer.retrieval.benchmark import ensure_benchmark_corpus

        return "benchmark", ensure_benchmark_corpus(progress=progress).corpus_path
    path = Path(spec).expanduser()
    if not path.exists():
        raise CorpusError(f"no corpus named '{spec}' and no such file or folder",
                          fix=f"use {' or '.join(repr(n) for n in NAMED_CORPORA)}, or the path of a corpus file or "
                              f"folder in one of the formats {', '.join(FORMATS)}")
    return str(path.resolve()), path.resolve()


def open_retriever(spec: str = "demo", *, progress: Progress | None = None, fmt: str | None = None,
                   settings: TokenizerSettings | None = None, params: BM25Params | None = None) -> Retriever:
    """A BM25 retriever over the named corpus or path, shared by every caller in this process.

    ``progress`` receives messages (and turns on progress bars on stderr) while a corpus is read or
    an index is built; a cached retriever returns at once without any.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise CorpusError("no corpus given", fix="use 'demo', 'benchmark' or the path of a corpus")
    spec = spec.strip()
    settings = settings or TokenizerSettings()
    params = params or BM25Params()
    with _lock:  # one load per corpus even when several app threads ask at once
        key_name, path = _source_of(spec, progress)
        key = (key_name, fmt, settings, params)
        stamp = _stamp(path) if path else ()
        cached = _open.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        if progress:
            progress(f"reading corpus '{spec}'")
        corpus = load_corpus(spec if spec in NAMED_CORPORA else path, fmt, show_progress=progress is not None)
        retriever = BM25Retriever(corpus, settings=settings, params=params, progress=progress)
        _open[key] = (stamp, retriever)
        return retriever


def clear_cache() -> None:
    """Forget every opened retriever (tests; a long-running app after corpora were edited)."""
    with _lock:
        _open.clear()
