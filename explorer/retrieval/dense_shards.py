"""Dense retrieval at Wikipedia scale: passage embeddings written in shards, and an on-disk IVF-PQ index.

The in-memory dense path (:mod:`explorer.retrieval.dense`) keeps one float32 matrix; at DPR's 21M
passages that is 32 GB, and embedding it takes about 12 days on 2 CPU cores. Above
:data:`~explorer.retrieval.dense.SHARDED_FROM` passages (or with ``index=ivfpq``) the dense
retriever uses this module instead:

- **Shards.** Passages are embedded :data:`SHARD_ROWS` at a time, each shard written to its own
  ``shard-NNNNN.npy`` (float16: half the disk, and far more precise than product quantisation
  needs) under a temporary name and renamed into place. A killed build resumes by embedding only
  the shards that are missing; ``shards.json``, written last, marks the set complete.
- **Workers.** Shards can be embedded by Ray workers (GPU where present): the driver reads each
  shard's texts from the passage store, sends them to a worker holding the model, and writes the
  vectors it gets back, so workers need no shared disk (:func:`embed_on_ray`).
- **Index.** A faiss IVF-PQ index (inverted lists over ~4 sqrt(N) k-means cells, each vector
  compressed to ``m`` bytes) is trained on a sample spread over the shards, filled shard by shard,
  written to disk, and opened memory-mapped (``faiss.IO_FLAG_MMAP``): 21M passages take about
  1 GB of codes, paged in as queries touch them.

The recall of IVF-PQ against exact search is measured in benchmarks/bench_dense_scale.py
(results in BENCHMARKS.md).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import ConfigError
from explorer.retrieval.building import check_disk, human_bytes, progress_bar, read_json, write_json_atomic

Progress = Callable[[str], None]
SHARD_ROWS = 65_536
SHARDS_MANIFEST = "shards.json"
IVFPQ_FILE = "faiss-ivfpq.index"
IVFPQ_MANIFEST = "faiss-ivfpq.json"
TRAIN_PER_CELL = 40  # k-means training vectors per IVF cell
SEED = 0


class ShardPlan:
    """Which rows each shard holds: shard i is rows [i * rows, min(n, (i + 1) * rows))."""

    def __init__(self, n: int, rows: int | None = None) -> None:
        rows = SHARD_ROWS if rows is None else rows
        if rows < 1:
            raise ConfigError(f"shard size must be at least 1, got {rows}", where="shard_rows")
        self.n, self.rows = n, rows

    @property
    def count(self) -> int:
        return -(-self.n // self.rows)

    def span(self, i: int) -> tuple[int, int]:
        return i * self.rows, min(self.n, (i + 1) * self.rows)


def shard_path(folder: Path, i: int) -> Path:
    return folder / f"shard-{i:05d}.npy"


def _shard_ok(path: Path, rows: int, dim: int) -> bool:
    try:
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    return matrix.shape == (rows, dim) and matrix.dtype == np.float16


def missing_shards(folder: Path, plan: ShardPlan, dim: int) -> list[int]:
    """Shards not yet written whole (a torn or foreign file counts as missing)."""
    out = []
    for i in range(plan.count):
        start, stop = plan.span(i)
        if not _shard_ok(shard_path(folder, i), stop - start, dim):
            out.append(i)
    return out


def write_shard(folder: Path, i: int, matrix: np.ndarray) -> None:
    target = shard_path(folder, i)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}.npy")
    np.save(tmp, np.asarray(matrix, dtype=np.float16))
    os.replace(tmp, target)


def shard_texts(store: Any, plan: ShardPlan, i: int) -> list[str]:
    """What the encoder sees of each passage of shard i: ``title: text``."""
    return [p.as_context() for p in store.iter_range(*plan.span(i))]


def embed_texts(encoder: Any, texts: list[str], batch_size: int) -> np.ndarray:
    """Unit vectors of passages, in length-sorted chunks (little padding), rows in the texts' order."""
    out = np.empty((len(texts), encoder.dim), dtype=np.float32)
    order = np.argsort([len(t) for t in texts], kind="stable")
    step = max(256, batch_size * 16)
    for start in range(0, len(texts), step):
        rows = order[start:start + step]
        out[rows] = encoder.encode_passages([texts[r] for r in rows], batch_size=batch_size)
    return out


EmbedShards = Callable[[list[int]], Iterator[tuple[int, np.ndarray]]]


def local_embedder(store: Any, encoder: Any, plan: ShardPlan, batch_size: int) -> EmbedShards:
    """Shards embedded in this process, one after another."""

    def run(todo: list[int]) -> Iterator[tuple[int, np.ndarray]]:
        for i in todo:
            yield i, embed_texts(encoder, shard_texts(store, plan, i), batch_size)

    return run


def build_shards(folder: Path, store: Any, dim: int, key: str, embed: EmbedShards, *, plan: ShardPlan,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Every shard of the store's passages under ``folder`` (only the missing ones are embedded);
    returns the shard manifest, written once all are there."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_json(folder / SHARDS_MANIFEST)
    if manifest is not None and manifest.get("key") == key and manifest.get("passages") == plan.n:
        return manifest
    todo = missing_shards(folder, plan, dim)
    check_disk(folder, len(todo) * plan.rows * dim * 2 + (16 << 20), "passage embeddings")
    done_rows = plan.n - sum(plan.span(i)[1] - plan.span(i)[0] for i in todo)
    if progress:
        progress(f"embedding {plan.n - done_rows:,} passages in {len(todo)} shards of {plan.rows:,}"
                 + (f" ({plan.count - len(todo)} shards already written)" if done_rows else ""))
    started = time.perf_counter()
    bar = progress_bar(plan.n, "embedding", " passages", enabled=progress is not None, initial=done_rows)
    try:
        for i, matrix in embed(todo):
            start, stop = plan.span(i)
            if matrix.shape != (stop - start, dim):
                raise ValueError(f"shard {i} came back with shape {matrix.shape}, expected {(stop - start, dim)}")
            write_shard(folder, i, matrix)
            bar.update(stop - start)
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    embedded = plan.n - done_rows
    manifest = {"key": key, "passages": plan.n, "dimension": dim, "shard_rows": plan.rows, "shards": plan.count,
                "dtype": "float16", "seconds": round(seconds, 2),
                "passages_per_second": round(embedded / seconds, 2) if seconds > 0 and embedded else None}
    write_json_atomic(folder / SHARDS_MANIFEST, manifest)
    return manifest


def open_shards(folder: Path, plan: ShardPlan) -> list[np.ndarray]:
    return [np.load(shard_path(folder, i), mmap_mode="r", allow_pickle=False) for i in range(plan.count)]


def training_rows(plan: ShardPlan, count: int) -> np.ndarray:
    """``count`` rows spread evenly over the corpus (every shard contributes), sorted."""
    if count >= plan.n:
        return np.arange(plan.n)
    return np.unique(np.linspace(0, plan.n - 1, count).round().astype(np.int64))


def gather(shards: list[np.ndarray], plan: ShardPlan, rows: np.ndarray) -> np.ndarray:
    out = np.empty((len(rows), shards[0].shape[1]), dtype=np.float32)
    which = rows // plan.rows
    for i in np.unique(which).tolist():
        picked = which == i
        out[picked] = shards[i][rows[picked] - i * plan.rows]
    return out


def ivfpq_shape(n: int, dim: int, nlist: int = 0) -> tuple[int, int, int]:
    """(cells, sub-quantisers, bits each): ~4 sqrt(N) cells with enough training vectors each, 48 (or the
    largest divisor of the dimension up to 64) one-byte codes a vector, fewer bits for tiny corpora
    (a sub-quantiser needs more training vectors than it has centroids)."""
    cells = nlist or int(4 * math.sqrt(n))
    cells = max(1, min(cells, n // TRAIN_PER_CELL or 1, 65_536))
    m = 48 if dim % 48 == 0 else max(c for c in range(1, min(64, dim) + 1) if dim % c == 0)
    bits = 8 if n >= 1 << 12 else max(2, min(8, int(math.log2(max(4, n // 4)))))
    return cells, m, bits


def build_ivfpq(folder: Path, plan: ShardPlan, dim: int, key: str, *, nlist: int = 0,
                progress: Progress | None = None) -> Path:
    """The IVF-PQ index of the shards in ``folder`` (kept if built before for the same key)."""
    from explorer.retrieval.faiss_loader import faiss_module

    faiss = faiss_module()
    target = folder / IVFPQ_FILE
    cells, m, bits = ivfpq_shape(plan.n, dim, nlist)
    wanted = {"key": key, "passages": plan.n, "nlist": cells, "m": m, "bits": bits}
    held = read_json(folder / IVFPQ_MANIFEST)
    if held is not None and {k: held.get(k) for k in wanted} == wanted and target.is_file():
        return target
    shards = open_shards(folder, plan)
    sample = gather(shards, plan, training_rows(plan, max(cells * TRAIN_PER_CELL, 256 * 40)))
    if progress:
        progress(f"training IVF-PQ ({cells:,} cells, {m} codes of {bits} bits a vector) on {len(sample):,} vectors")
    started = time.perf_counter()
    faiss.omp_set_num_threads((os.cpu_count() or 1) if plan.n >= 100_000 else 1)  # threads only pay off at scale
    try:
        index = faiss.index_factory(dim, f"IVF{cells},PQ{m}x{bits}", faiss.METRIC_INNER_PRODUCT)
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
        ivf.cp.seed = SEED
        ivf.pq.cp.seed = SEED
        ivf.do_polysemous_training = False  # an annealing of the codes' order: minutes, and unused by search
        index.train(sample)
        del sample
        bar = progress_bar(plan.n, "IVF-PQ adding", " vectors", enabled=progress is not None)
        for shard in shards:
            index.add(np.ascontiguousarray(shard, dtype=np.float32))  # ids are rows, in order
            bar.update(len(shard))
        bar.close()
    finally:
        faiss.omp_set_num_threads(1)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, target)
    write_json_atomic(folder / IVFPQ_MANIFEST, {**wanted, "seconds": round(time.perf_counter() - started, 2),
                                                "bytes": target.stat().st_size})
    if progress:
        progress(f"IVF-PQ index written ({human_bytes(target.stat().st_size)})")
    return target


def open_ivfpq(path: Path, nprobe: int) -> Any:
    """The index opened memory-mapped (its inverted lists stay on disk until a query reads them)."""
    from explorer.retrieval.faiss_loader import faiss_module

    faiss = faiss_module()
    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = min(nprobe, ivf.nlist)
    return index


# --- embedding on Ray workers ---------------------------------------------------------------------


class EmbedWorker:
    """A Ray actor's body: the sentence encoder, loaded once on the worker's device."""

    def __init__(self, embedder: str | None, device: str, threads: int) -> None:
        import torch

        from explorer.retrieval.embeddings import TextEncoder, resolve_embedder

        torch.set_num_threads(max(1, threads))
        name, path = resolve_embedder(embedder)
        self.encoder = TextEncoder(path, name=name)
        if device != "cpu":
            self.encoder._model.to(device)
        self.device = device

    def describe(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "device": self.device, "dim": self.encoder.dim}

    def embed(self, texts: list[str], batch_size: int) -> np.ndarray:
        return embed_texts(self.encoder, texts, batch_size).astype(np.float16)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("embedding on workers needs Ray, which is not installed", where="--embed-workers",
                          fix="pip install ray==2.60.0 (listed in requirements.txt)") from exc
    return ray


def embed_on_ray(store: Any, plan: ShardPlan, *, embedder: str | None, batch_size: int, workers: int,
                 gpus: float = 0.0, address: str | None = None, threads: int = 1) -> EmbedShards:
    """Shards embedded by ``workers`` Ray actors (``gpus`` each; on a local instance unless ``address``).

    Each actor holds two shards at a time; shards come back in any order and are written as they
    come, so a driver stopped half-way leaves only whole shards, and the next run embeds the rest."""

    def run(todo: list[int]) -> Iterator[tuple[int, np.ndarray]]:
        ray = _import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            import logging

            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     **({} if address else {"num_cpus": max(workers * threads, 1)}))
        actor = ray.remote(num_cpus=threads, num_gpus=gpus)(EmbedWorker)
        device = "cuda" if gpus > 0 else "cpu"
        pool = [actor.remote(embedder, device, threads) for _ in range(max(1, workers))]
        try:
            queue = list(todo)
            pending: dict[Any, tuple[int, Any]] = {}

            def submit(worker: Any) -> None:
                if queue:
                    i = queue.pop(0)
                    pending[worker.embed.remote(shard_texts(store, plan, i), batch_size)] = (i, worker)

            for worker in pool:
                submit(worker)
                submit(worker)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i, worker = pending.pop(ready[0])
                matrix = ray.get(ready[0])
                submit(worker)
                yield i, matrix
        finally:
            for worker in pool:
                ray.kill(worker)
            if started_here:
                ray.shutdown()

    return run


def describe_shards(folder: Path) -> dict[str, Any]:
    """The shard set's and the index's manifests (what a trace records of a sharded dense index)."""
    return {"shards": read_json(folder / SHARDS_MANIFEST) or {}, "ivfpq": read_json(folder / IVFPQ_MANIFEST) or {}}
