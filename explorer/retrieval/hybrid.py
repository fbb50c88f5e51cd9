"""Hybrid retrieval: BM25 and dense results merged by weighted reciprocal-rank fusion.

For each passage found by either retriever within its first ``depth`` results,

    score(d) = bm25_weight / (rrf_k + rank_bm25(d)) + dense_weight / (rrf_k + rank_dense(d))

(a retriever that did not return d adds nothing). Ranks, not scores, are fused because BM25
scores are unbounded and cosine similarities are not, so no normalisation has to be guessed;
``rrf_k = 60`` is the value of Cormack et al.'s original study and what most search engines ship.
Ties go to the passage with the better single rank, then to corpus order, so results are
deterministic.
"""

from __future__ import annotations

from typing import Any

from explorer.errors import ConfigError
from explorer.retrieval.base import Hit, Passage
from explorer.retrieval.bm25 import BM25Retriever
from explorer.retrieval.dense import DenseRetriever


class HybridRetriever:
    """The Retriever protocol over a BM25 and a dense retriever of the same corpus."""

    kind = "hybrid"

    def __init__(self, bm25: BM25Retriever, dense: DenseRetriever, *, rrf_k: int = 60, bm25_weight: float = 1.0,
                 dense_weight: float = 1.0, depth: int = 100) -> None:
        if bm25.corpus.fingerprint != dense.corpus.fingerprint:
            raise ConfigError("the BM25 and dense retrievers index different passages", where="hybrid retriever",
                              fix="open both over the same corpus")
        if rrf_k < 0 or depth < 1 or bm25_weight < 0 or dense_weight < 0 or bm25_weight + dense_weight <= 0:
            raise ConfigError(f"invalid fusion settings (rrf_k={rrf_k}, depth={depth}, weights {bm25_weight}, "
                              f"{dense_weight})", where="hybrid retriever",
                              fix="rrf_k >= 0, depth >= 1, weights >= 0 and not both 0")
        self.bm25, self.dense = bm25, dense
        self.corpus = bm25.corpus
        self.name = bm25.name
        self.rrf_k, self.bm25_weight, self.dense_weight, self.depth = rrf_k, bm25_weight, dense_weight, depth

    def __len__(self) -> int:
        return len(self.bm25)

    def search(self, query: str, k: int) -> list[Hit]:
        """The k passages with the highest fused score, best first, ranks from 1."""
        if k < 1 or not query.strip():
            return []
        n = max(self.depth, k)
        fused: dict[str, list[Any]] = {}  # id -> [score, best single rank, passage]
        for weight, hits in ((self.bm25_weight, self.bm25.search(query, n) if self.bm25_weight else []),
                             (self.dense_weight, self.dense.search(query, n) if self.dense_weight else [])):
            for h in hits:
                entry = fused.setdefault(h.passage.id, [0.0, h.rank, h.passage])
                entry[0] += weight / (self.rrf_k + h.rank)
                entry[1] = min(entry[1], h.rank)
        position = self.corpus.row_of  # looked up for the fused passages only: a corpus may hold millions
        order = sorted(fused.items(), key=lambda kv: (-kv[1][0], kv[1][1], position(kv[0]) or 0))
        return [Hit(passage=entry[2], score=float(entry[0]), rank=r) for r, (_, entry) in enumerate(order[:k], start=1)]

    def passage(self, passage_id: str) -> Passage | None:
        return self.corpus.passage(passage_id)

    def describe(self) -> dict:
        dense = self.dense.describe()
        bm25 = self.bm25.describe()
        fusion = {"method": "reciprocal-rank fusion", "rrf_k": self.rrf_k, "bm25_weight": self.bm25_weight,
                  "dense_weight": self.dense_weight, "depth": self.depth}
        return {**dense, "retriever": "hybrid", "engine": f"{bm25['engine']} + {dense['engine']}",
                "fusion": fusion, "bm25": {k: bm25[k] for k in ("scoring", "tokenizer", "vocabulary", "index",
                                                                "index_fingerprint")},
                "index_fingerprint": f"{bm25['index_fingerprint']}+{dense['index_fingerprint']}",
                "index_type": f"BM25 + {dense['index_type']}"}

    def __repr__(self) -> str:
        return f"HybridRetriever({self.name!r}, rrf_k={self.rrf_k}, weights {self.bm25_weight}/{self.dense_weight})"
