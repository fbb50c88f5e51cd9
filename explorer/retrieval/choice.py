"""Which retriever a run uses: BM25, dense or hybrid, with its embedding model and settings.

One typed config (:class:`RetrieverConfig`) holds the choice, so the command line
(``--retriever``, ``--embedder``, ``--retriever-set name=value``), the web app, the evaluation
runner and the trace all speak of the same fields, validated the same way. Only the fields that
matter for the chosen kind are recorded (:meth:`RetrieverConfig.recorded`): a BM25 run's
evaluation identity does not change when someone edits a dense-only default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from explorer.config import Config, param, parse_assignments
from explorer.errors import ConfigError
from explorer.retrieval.dense import INDEX_KINDS, DenseParams

KINDS = ("bm25", "dense", "hybrid")
DENSE_FIELDS = ("embedder", "index", "exact_limit", "nlist", "nprobe", "hnsw_m", "batch_size")
HYBRID_FIELDS = ("rrf_k", "bm25_weight", "dense_weight", "depth")


@dataclass
class RetrieverConfig(Config):
    """The retriever of a run. BM25 is the papers' default (DRAGIN, SEAKR); DR-RAG's SM is dense."""

    kind: str = param("bm25", choices=KINDS, help="bm25 (lexical), dense (sentence embeddings) or hybrid (both, "
                                                  "reciprocal-rank fusion)")
    embedder: str = param("embedded", help="dense/hybrid: a sentence-transformers model folder or cached hub name "
                                           "('embedded': the bundled all-MiniLM-L6-v2)")
    index: str = param("auto", choices=INDEX_KINDS, help="dense search: exact (numpy), flat, ivf, hnsw or ivfpq "
                                                         "(faiss; ivfpq: embeddings in shards, index on disk); auto: "
                                                         "exact up to exact_limit passages, ivf up to 2M, else ivfpq")
    exact_limit: int = param(200_000, lo=1, hi=10**9, help="most passages searched exactly (a full scan per query)")
    nlist: int = param(0, lo=0, hi=1 << 20, help="IVF cells (0: about the square root of the passage count)")
    nprobe: int = param(32, lo=1, hi=1 << 20, help="IVF cells scanned per query (more: slower, closer to exact)")
    hnsw_m: int = param(32, lo=4, hi=256, help="HNSW graph degree")
    batch_size: int = param(64, lo=1, hi=4096, help="passages per encoder batch while embedding the corpus")
    rrf_k: int = param(60, lo=0, hi=100_000, help="hybrid: the k of reciprocal-rank fusion, 1/(k + rank)")
    bm25_weight: float = param(1.0, lo=0.0, hi=100.0, help="hybrid: weight of the BM25 ranking")
    dense_weight: float = param(1.0, lo=0.0, hi=100.0, help="hybrid: weight of the dense ranking")
    depth: int = param(100, lo=1, hi=100_000, help="hybrid: results taken from each retriever before fusing")

    def check(self) -> None:
        if self.kind == "hybrid" and self.bm25_weight + self.dense_weight <= 0:
            raise ConfigError("both fusion weights are 0", where="RetrieverConfig.bm25_weight",
                              fix="give at least one of bm25_weight and dense_weight a positive value")
        if not self.embedder.strip():
            self.embedder = "embedded"

    def dense_params(self) -> DenseParams:
        return DenseParams(index=self.index, exact_limit=self.exact_limit, nlist=self.nlist, nprobe=self.nprobe,
                           hnsw_m=self.hnsw_m, batch_size=self.batch_size)

    def recorded(self) -> dict[str, Any]:
        """The fields that shape this kind's results (what traces and evaluations keep)."""
        values = self.to_dict()
        keep = ("kind",) + ((*DENSE_FIELDS,) if self.kind != "bm25" else ()) + (
            HYBRID_FIELDS if self.kind == "hybrid" else ())
        return {k: values[k] for k in keep if k != "batch_size"}

    @property
    def label(self) -> str:
        """Short text for names and views: ``bm25``, ``dense(all-MiniLM-L6-v2)``."""
        if self.kind == "bm25":
            return "bm25"
        name = self.embedder if self.embedder != "embedded" else "all-MiniLM-L6-v2"
        return f"{self.kind}({name.rstrip('/').rsplit('/', 1)[-1]})"


def retriever_config(kind: str | RetrieverConfig | None = None, embedder: str | None = None,
                     options: dict[str, Any] | None = None) -> RetrieverConfig:
    """A validated config from the loose pieces callers have (a kind, an embedder, name=value options)."""
    if isinstance(kind, RetrieverConfig):
        if embedder is None and not options:
            return kind
        values = kind.to_dict()
    else:
        values = {}
        if kind is not None:
            values["kind"] = str(kind).strip().lower()
    values.update(dict(options or {}))
    if embedder is not None and str(embedder).strip():
        values["embedder"] = str(embedder).strip()
    return RetrieverConfig.from_dict(values)


def add_retriever_arguments(parser: argparse.ArgumentParser, *, default: str = "bm25") -> None:
    """``--retriever``, ``--embedder`` and ``--retriever-set`` on a command."""
    parser.add_argument("--retriever", default=default, metavar="|".join(KINDS),
                        help=f"bm25, dense or hybrid (default {default})")
    parser.add_argument("--embedder", default=None, metavar="PATH",
                        help="dense/hybrid: a sentence-transformers model folder, or a hub name already in the local "
                             "cache (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--retriever-set", dest="retriever_settings", action="append", default=[],
                        metavar="NAME=VALUE",
                        help="a retriever setting, e.g. --retriever-set rrf_k=60 or dense_weight=2 or index=ivf "
                             "(repeatable)")


def config_from_args(args: argparse.Namespace) -> RetrieverConfig:
    """The retriever config a command's arguments ask for (a bad value raises its ConfigError)."""
    options = parse_assignments(getattr(args, "retriever_settings", []) or [])
    if "kind" in options:
        raise ConfigError("set the retriever with --retriever, not --retriever-set kind=...",
                          where="--retriever-set")
    return retriever_config(getattr(args, "retriever", "bm25"), getattr(args, "embedder", None), options)
