"""Dense retrieval at scale: passage embeddings in shards that survive a failed build, and the on-disk
IVF-PQ index the dense retriever opens memory-mapped for large corpora (``index=ivfpq``).

Real embeddings of 40 demo passages (the bundled all-MiniLM-L6-v2), in shards of 10 so that a build
has four of them to lose and resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from explorer.retrieval import dense_shards
from explorer.retrieval.corpora import DEMO_PASSAGES, load_corpus
from explorer.retrieval.dense import DenseParams, DenseRetriever, dense_key, sharded_dir_for
from explorer.retrieval.embeddings import get_encoder

QUESTIONS = ["What is the seating capacity of the arena where the Lewiston Maineiacs played?",
             "Who lived longer, Alejandro Jodorowsky or Philip Saville?", "the performer of the album Green",
             "Which actress from SuperMansion had a recurring role on Workaholics?", "a river in Maine"]


def test_shards_resume_after_a_failure_and_feed_an_on_disk_ivfpq_index(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(dense_shards, "SHARD_ROWS", 10)
    path = tmp_path / "small.jsonl"
    lines = DEMO_PASSAGES.read_text(encoding="utf-8").splitlines()[:40]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = load_corpus(path)
    encoder = get_encoder()
    plan = dense_shards.ShardPlan(len(corpus))
    assert plan.count == 4
    folder = sharded_dir_for(corpus, dense_key(corpus, encoder))
    later = [p.as_context() for p in corpus.passages[20:]]  # the rows of the shards the failed build leaves

    def fails_on_the_third(todo: list[int]):
        for n, i in enumerate(todo):
            if n == 2:
                raise RuntimeError("the worker was lost")
            yield i, dense_shards.embed_texts(encoder, dense_shards.shard_texts(corpus.store, plan, i), 16)

    with pytest.raises(RuntimeError, match="worker was lost"):
        dense_shards.build_shards(folder, corpus.store, encoder.dim, "k", fails_on_the_third, plan=plan)
    assert dense_shards.missing_shards(folder, plan, encoder.dim) == [2, 3]
    assert not (folder / dense_shards.SHARDS_MANIFEST).exists()
    dense_shards.shard_path(folder, 2).write_bytes(b"\x93NUMPY torn")  # a shard cut short counts as missing

    messages: list[str] = []
    dense = DenseRetriever(corpus, encoder, params=DenseParams(index="ivfpq", nprobe=8), progress=messages.append)
    assert any("20 passages in 2 shards of 10 (2 shards already written)" in m for m in messages), messages
    stored = np.concatenate([np.asarray(s, dtype=np.float32) for s in dense_shards.open_shards(folder, plan)])
    expected = dense_shards.embed_texts(encoder, later, 16)
    assert np.allclose(stored[20:], expected, atol=2e-3), "resumed shards must hold their own passages' vectors"
    assert dense.matrix is None and "IVF-PQ" in dense.index_type and dense.index_path == folder
    manifest = json.loads((folder / dense_shards.SHARDS_MANIFEST).read_text())
    assert manifest["passages"] == 40 and manifest["shards"] == 4 and manifest["dtype"] == "float16"

    recalls = []
    for question in QUESTIONS:
        exact = np.argsort(-(stored @ encoder.encode_queries([question])[0]), kind="stable")[:10]
        hits = dense.search(question, 10)
        assert len(hits) == 10 and [h.rank for h in hits] == list(range(1, 11))
        found = {corpus.row_of(h.passage.id) for h in hits}
        recalls.append(len(found & set(exact.tolist())) / 10)
    assert np.mean(recalls) >= 0.6, recalls
    again = DenseRetriever(corpus, encoder, params=DenseParams(index="ivfpq", nprobe=8))
    assert not again.index_built and [h.passage.id for h in again.search(QUESTIONS[0], 5)] == \
        [h.passage.id for h in dense.search(QUESTIONS[0], 5)]
