"""Dense retrieval: passages and queries as unit-length sentence embeddings, nearest by cosine.

The passage matrix is computed once per (passages, model) in batches with a progress bar and kept
on disk beside the BM25 index (``<cache>/indexes/dense-<key>/``). The key hashes the passages'
texts as they are embedded, the model's files, its prompts and its maximum sequence length, and
nothing of the corpus's name or file: a changed corpus or another model gets a fresh matrix, and
the same passages are embedded once whatever process, command or file built them.

Search is exact (one matrix-vector product and a top-k selection) up to ``exact_limit``
passages; above it a faiss index takes over (IVF by default: ~sqrt(N) k-means cells, ``nprobe``
of them scanned per query), stored next to the matrix. benchmarks/bench_dense.py measures both
side by side at 15k real passages and at 1M vectors. The index type is part of what
``describe()`` reports, so a trace says whether its passages came from exact or approximate
search.

Texts are embedded as the model sees them everywhere else: ``title: text`` for passages, with
the model's own query and document prompts when it declares them (e5 and bge models do;
all-MiniLM-L6-v2 does not).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import ConfigError, CorpusError
from explorer.paths import cache_dir, portable_path
from explorer.retrieval.base import Hit, Passage
from explorer.retrieval.corpora import Corpus
from explorer.retrieval.embeddings import TextEncoder, model_fingerprint
from explorer.retrieval.faiss_loader import faiss_module
from explorer.retrieval.index_cache import load_stored, store_folder

Progress = Callable[[str], None]
INDEX_KINDS = ("auto", "exact", "flat", "ivf", "hnsw", "ivfpq")
#: Above this many passages ``index=auto`` embeds in shards and searches an on-disk IVF-PQ index
#: (explorer.retrieval.dense_shards): a float32 matrix of DPR's 21M passages would take 32 GB.
SHARDED_FROM = 2_000_000
#: IVF-PQ candidates re-scored with their float16 vectors from the shards before the top k is kept:
#: product quantisation alone cannot tell near-duplicates apart (benchmarks/bench_dense_scale.py).
RERANK_DEPTH = 100
DENSE_FORMAT_VERSION = 1
META_FILE = "explorer-dense.json"
EMBEDDINGS_FILE = "embeddings.npy"
FAISS_PIN = "faiss-cpu==1.15.1"
#: faiss threads for a single-query search. One query at a time gains little from splitting its few
#: probed cells across threads, and on a busy machine the threads wait for each other (measured in
#: benchmarks/results/dense.md); building an index still uses every core.
SEARCH_THREADS = 1
QUERY_CACHE = 4096  # query vectors kept: evaluations and DR-RAG's stage-2 queries repeat the same texts
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DenseParams:
    """How the passage matrix is searched (the matrix itself does not depend on these)."""

    index: str = "auto"  # auto: exact up to exact_limit passages, else faiss IVF
    exact_limit: int = 200_000
    nlist: int = 0  # IVF cells; 0: about sqrt(N)
    nprobe: int = 32  # IVF cells scanned per query
    hnsw_m: int = 32
    batch_size: int = 64  # passages per encoder batch while building

    def __post_init__(self) -> None:
        if self.index not in INDEX_KINDS:
            raise ConfigError(f"unknown dense index {self.index!r}", where="index",
                              fix=f"use one of {', '.join(INDEX_KINDS)}")
        for name in ("exact_limit", "nprobe", "hnsw_m", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}", where=name)
        if self.nlist < 0:
            raise ConfigError(f"nlist must be 0 (automatic) or more, got {self.nlist}", where="nlist")


def dense_key(corpus: Corpus, encoder: TextEncoder) -> str:
    """What the passage matrix depends on, and nothing else: the texts as they are embedded (in order), the
    model's files and how texts are fed to it.

    Not the corpus's name, file or passage ids: the same passages pooled by ``retrieval-metrics`` and
    written by ``corpus build`` (or copied to another folder) are one matrix, embedded once."""
    texts = blake2b(digest_size=16)
    for passage in corpus.passages:
        piece = passage.as_context().encode("utf-8")
        texts.update(len(piece).to_bytes(8, "little"))
        texts.update(piece)
    payload = json.dumps({"texts": texts.hexdigest(), "passages": len(corpus),
                          "model": model_fingerprint(encoder.path), "prompts": encoder.prompts(),
                          "max_seq_length": encoder.max_seq_length, "format": DENSE_FORMAT_VERSION}, sort_keys=True)
    return blake2b(payload.encode(), digest_size=12).hexdigest()


def dense_dir_for(corpus: Corpus, key: str) -> Path:
    """``<cache>/indexes/dense-<key>``: named by content alone (:func:`dense_key`), beside the BM25 indexes,
    whose clean-up never takes it for one of its own."""
    return cache_dir("indexes") / f"dense-{key}"


def _prune_replaced(final: Path, source: str) -> None:
    """Remove the matrices stored for earlier contents of the same corpus file (another key, same source)."""
    for other in final.parent.glob("dense-*"):
        if other == final or not other.is_dir():
            continue
        try:
            meta = json.loads((other / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # another process is writing it, or a leftover the loader clears
        if meta.get("source") == source:
            shutil.rmtree(other, ignore_errors=True)


def sharded_dir_for(corpus: Corpus, key: str) -> Path:
    """The folder of a corpus's embedding shards and IVF-PQ index (beside the in-memory path's folder)."""
    folder = dense_dir_for(corpus, key)
    return folder.with_name(f"{folder.name}-shards")


def embed_passages(passages: list[Passage], encoder: TextEncoder, *, batch_size: int = 64,
                   show_progress: bool = False) -> np.ndarray:
    """The (N, dim) float32 matrix of unit passage vectors, computed in length-sorted chunks.

    Sorting by length keeps padding (wasted work) small; each chunk is written back to its
    passages' rows, so row i is passage i. A chunk is one encoder batch, so the progress bar moves
    every ``batch_size`` passages (a few seconds on a busy CPU), not once a minute."""
    from tqdm import tqdm

    texts = [p.as_context() for p in passages]
    out = np.empty((len(texts), encoder.dim), dtype=np.float32)
    order = np.argsort([len(t) for t in texts], kind="stable")
    chunk = batch_size
    with tqdm(total=len(texts), desc="embedding", unit=" passages", disable=not show_progress, leave=False,
              delay=0.5) as bar:
        for start in range(0, len(texts), chunk):
            rows = order[start:start + chunk]
            out[rows] = encoder.encode_passages([texts[i] for i in rows], batch_size=batch_size)
            bar.update(len(rows))
    return out


class DenseRetriever:
    """The Retriever protocol over one corpus's passage embeddings (exact or faiss search)."""

    kind = "dense"

    def __init__(self, corpus: Corpus, encoder: TextEncoder, *, params: DenseParams | None = None,
                 use_cache: bool = True, progress: Progress | None = None) -> None:
        self.corpus = corpus
        self.name = corpus.name
        self.encoder = encoder
        self.params = params or DenseParams()
        self._n = len(corpus)
        self.index_kind = self._choose_index()  # before any work: a corpus too large fails at once
        self.key = dense_key(corpus, encoder)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._queries_lock = threading.Lock()
        if self.index_kind == "ivfpq":
            self._open_sharded(use_cache, progress)
            return
        self.index_path: Path | None = dense_dir_for(corpus, self.key) if use_cache else None
        self.index_built = False
        self.embed_seconds = 0.0
        started = time.perf_counter()
        matrix = self._load_cached() if self.index_path else None
        if matrix is None:
            if progress:
                progress(f"embedding {self._n:,} passages of '{self.name}' with {encoder.name} (once; cached after)")
            t0 = time.perf_counter()
            matrix = embed_passages(corpus.passages, encoder, batch_size=self.params.batch_size,
                                    show_progress=progress is not None)
            self.embed_seconds = time.perf_counter() - t0
            self.index_built = True
            if self.index_path:
                self._store(matrix)
        self.matrix = matrix
        self._faiss_index = None
        self._shards = None
        self.index_type = "exact (one matrix product, numpy)"
        if self.index_kind != "exact":
            self._faiss_index, self.index_type = self._faiss(progress)
        self.index_seconds = time.perf_counter() - started

    # --- the sharded path: embeddings in shards, an on-disk IVF-PQ index -------------------------

    def _open_sharded(self, use_cache: bool, progress: Progress | None) -> None:
        """Embed the missing shards (resumable), build the IVF-PQ index once, open it memory-mapped."""
        import tempfile

        from explorer.retrieval import dense_shards as shards

        started = time.perf_counter()
        if use_cache:
            folder = sharded_dir_for(self.corpus, self.key)
        else:
            folder = Path(tempfile.mkdtemp(prefix="explorer-dense-"))
        self.index_path = folder
        plan = shards.ShardPlan(self._n)
        before = shards.missing_shards(folder, plan, self.encoder.dim)
        embed = shards.local_embedder(self.corpus.store, self.encoder, plan, self.params.batch_size)
        manifest = shards.build_shards(folder, self.corpus.store, self.encoder.dim, self.key, embed, plan=plan,
                                       progress=progress)
        self.index_built = bool(before)
        self.embed_seconds = float(manifest.get("seconds") or 0.0) if before else 0.0
        (folder / META_FILE).write_text(json.dumps(self._meta()), encoding="utf-8")  # what cache pruning reads
        index_file = shards.build_ivfpq(folder, plan, self.encoder.dim, self.key, nlist=self.params.nlist,
                                        progress=progress)
        faiss = faiss_module()
        assert faiss is not None
        faiss.omp_set_num_threads(SEARCH_THREADS)
        self._faiss_index = shards.open_ivfpq(index_file, self.params.nprobe)
        self._plan, self._shards = plan, shards.open_shards(folder, plan)
        ivf = faiss.downcast_index(faiss.extract_index_ivf(self._faiss_index))
        self.matrix = None
        self.index_type = (f"faiss IVF-PQ nlist={ivf.nlist} nprobe={ivf.nprobe} m={ivf.pq.M} bits={ivf.pq.nbits} "
                           f"on disk, memory-mapped, top {RERANK_DEPTH} re-ranked by the stored vectors (approximate)")
        self.index_seconds = time.perf_counter() - started

    # --- choosing and building the index -----------------------------------------------------

    def _choose_index(self) -> str:
        p = self.params
        kind = p.index
        if kind == "auto":
            kind = "exact" if self._n <= p.exact_limit else "ivf" if self._n <= SHARDED_FROM else "ivfpq"
        if kind == "exact" and self._n > p.exact_limit:
            raise ConfigError(f"'{self.name}' has {self._n:,} passages, more than exact search is allowed "
                              f"({p.exact_limit:,})", where="index",
                              fix="use index=auto or ivf (faiss), or raise exact_limit")
        if kind != "exact" and faiss_module() is None:
            why = (f"'{self.name}' has {self._n:,} passages, too many for exact search (exact_limit "
                   f"{p.exact_limit:,}), and faiss is not installed" if p.index == "auto"
                   else f"index={kind} needs faiss, which is not installed")
            raise CorpusError(why, where="dense retriever",
                              fix=f"pip install {FAISS_PIN} (listed in requirements.txt), or raise the limit with "
                                  "--retriever-set exact_limit=N (each query then scans all N passages)")
        return kind

    def _faiss(self, progress: Progress | None) -> tuple[Any, str]:
        faiss = faiss_module()
        assert faiss is not None
        p, dim, n = self.params, self.matrix.shape[1], self._n
        if self.index_kind == "flat":
            label, build = "faiss IndexFlatIP (exact)", lambda: _flat(faiss, self.matrix)
            name = "faiss-flat.index"
        elif self.index_kind == "hnsw":
            label = f"faiss IndexHNSWFlat M={p.hnsw_m} (approximate)"
            build, name = (lambda: _hnsw(faiss, self.matrix, p.hnsw_m)), f"faiss-hnsw{p.hnsw_m}.index"
        else:
            nlist = p.nlist or max(1, int(round(math.sqrt(n))))
            nlist = max(1, min(nlist, n // 39 or 1))  # faiss wants ~39 training points per cell
            label = f"faiss IndexIVFFlat nlist={nlist} nprobe={min(p.nprobe, nlist)} (approximate)"
            build, name = (lambda: _ivf(faiss, self.matrix, nlist)), f"faiss-ivf{nlist}.index"
        index = None
        target = self.index_path / name if self.index_path else None
        if target is not None and target.is_file():
            try:
                index = faiss.read_index(str(target))
                if index.ntotal != n or index.d != dim:
                    raise ValueError("the stored faiss index belongs to other vectors")
            except Exception as exc:  # damaged: rebuild
                log.warning("rebuilding the faiss index %s (%s)", target, exc)
                index = None
        if index is None:
            if progress:
                progress(f"building the {label} over {n:,} vectors")
            faiss.omp_set_num_threads(os.cpu_count() or 1)
            try:
                index = build()
            finally:
                faiss.omp_set_num_threads(SEARCH_THREADS)
            if target is not None:
                tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
                try:
                    faiss.write_index(index, str(tmp))
                    os.replace(tmp, target)
                except (OSError, RuntimeError) as exc:
                    log.warning("could not store the faiss index in %s: %s", target, exc)
                    tmp.unlink(missing_ok=True)
        faiss.omp_set_num_threads(SEARCH_THREADS)
        if self.index_kind == "ivf":
            index.nprobe = min(p.nprobe, index.nlist)
        elif self.index_kind == "hnsw":
            index.hnsw.efSearch = max(64, index.hnsw.efSearch)
        return index, label

    # --- the cache on disk -----------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return {"format": DENSE_FORMAT_VERSION, "key": self.key, "fingerprint": self.corpus.fingerprint,
                "passages": self._n, "dimension": self.encoder.dim, "embedder": self.encoder.name,
                "embedder_path": str(self.encoder.path), "source": str(self.corpus.source), "created": time.time()}

    def _store(self, matrix: np.ndarray) -> None:
        """Keep the matrix in the cache the way the BM25 index is kept (explorer.retrieval.index_cache)."""
        assert self.index_path is not None

        def write(tmp: Path) -> None:
            tmp.mkdir(parents=True)
            np.save(tmp / EMBEDDINGS_FILE, matrix)

        meta = {**self._meta(), "embed_seconds": round(self.embed_seconds, 2)}
        if store_folder(self.index_path, write, meta, META_FILE, "passage embeddings"):
            _prune_replaced(self.index_path, str(self.corpus.source))

    def _load_cached(self) -> np.ndarray | None:
        assert self.index_path is not None

        def read(meta: dict) -> np.ndarray:
            if meta.get("key") != self.key:
                raise ValueError("the stored embeddings belong to other passages or another model")
            matrix = np.load(self.index_path / EMBEDDINGS_FILE, allow_pickle=False)
            if matrix.dtype != np.float32 or matrix.shape != (self._n, self.encoder.dim):
                raise ValueError(f"stored matrix is {matrix.dtype} {matrix.shape}, expected "
                                 f"float32 {(self._n, self.encoder.dim)}")
            return matrix

        return load_stored(self.index_path, META_FILE, "passage embeddings", read)

    # --- the Retriever protocol ----------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def encode_query(self, query: str) -> np.ndarray:
        """The query's unit vector; the last few thousand are kept, since the same query text comes
        back often (every k of a metrics run, every method of an evaluation, DR-RAG's q + d)."""
        with self._queries_lock:
            vector = self._queries.get(query)
            if vector is not None:
                self._queries.move_to_end(query)
                return vector
        vector = self.encoder.encode_queries([query])[0]
        with self._queries_lock:
            self._queries[query] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def search(self, query: str, k: int) -> list[Hit]:
        """The k passages whose embeddings are closest to the query's (cosine), best first."""
        if k < 1 or not query.strip():
            return []
        return self.search_vector(self.encode_query(query), k)

    def search_vector(self, vector: np.ndarray, k: int) -> list[Hit]:
        """Search with a ready unit query vector (benchmarks time this part alone)."""
        k = min(k, self._n)
        if k < 1:
            return []
        if self._faiss_index is None:
            scores = self.matrix @ np.asarray(vector, dtype=np.float32)
            top = np.argpartition(-scores, k - 1)[:k] if k < self._n else np.arange(self._n)
            values = scores[top]
            order = np.lexsort((top, -values))  # best first; equal scores in corpus order
            rows, values = top[order], values[order]
        elif self._shards is not None:  # IVF-PQ candidates re-ranked by their stored vectors
            from explorer.retrieval.dense_shards import gather

            query = np.asarray(vector, dtype=np.float32)
            _, ids = self._faiss_index.search(query.reshape(1, -1), max(k, RERANK_DEPTH))
            rows = ids[0][ids[0] >= 0]
            values = gather(self._shards, self._plan, rows) @ query if len(rows) else np.zeros(0, np.float32)
            order = np.lexsort((rows, -values))[:k]
            rows, values = rows[order], values[order]
        else:
            found, ids = self._faiss_index.search(np.asarray(vector, dtype=np.float32).reshape(1, -1), k)
            keep = ids[0] >= 0
            rows, values = ids[0][keep], found[0][keep]
        passages = self.corpus.passages_at(rows)
        return [Hit(passage=p, score=float(s), rank=r)
                for r, (p, s) in enumerate(zip(passages, values, strict=True), start=1)]

    def passage(self, passage_id: str) -> Passage | None:
        return self.corpus.passage(passage_id)

    def describe(self) -> dict:
        """What a trace records: the corpus, the embedding model (name, folder, content hash), the index."""
        faiss = faiss_module() if self._faiss_index is not None else None
        engine = "numpy" if faiss is None else f"faiss {faiss.__version__}"
        return {"retriever": "dense", "name": self.name, "source": portable_path(self.corpus.source),
                "format": self.corpus.format, "passages": self._n, "documents": self.corpus.documents,
                "fingerprint": self.corpus.fingerprint, "engine": engine, "embedder": self.encoder.name,
                "embedder_path": portable_path(self.encoder.path),
                "embedder_fingerprint": model_fingerprint(self.encoder.path),
                "dimension": self.encoder.dim, "similarity": "cosine", "index_type": self.index_type,
                "index_fingerprint": self.key, "index": portable_path(self.index_path) if self.index_path else None,
                "dense": asdict(self.params)}

    def __repr__(self) -> str:
        return f"DenseRetriever({self.name!r}, {self._n:,} passages, {self.encoder.name}, {self.index_kind})"


def _flat(faiss: Any, matrix: np.ndarray) -> Any:
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    return index


def _ivf(faiss: Any, matrix: np.ndarray, nlist: int) -> Any:
    """IVF over inner products, k-means trained on a fixed sample (same vectors, same index)."""
    quantizer = faiss.IndexFlatIP(matrix.shape[1])
    index = faiss.IndexIVFFlat(quantizer, matrix.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    n = matrix.shape[0]
    sample = min(n, nlist * 64)
    rows = np.sort(np.random.default_rng(0).choice(n, size=sample, replace=False)) if sample < n else slice(None)
    index.cp.seed = 0
    index.train(np.ascontiguousarray(matrix[rows]))
    index.add(matrix)
    return index


def _hnsw(faiss: Any, matrix: np.ndarray, m: int) -> Any:
    index = faiss.IndexHNSWFlat(matrix.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 80
    index.add(matrix)
    return index
