"""The corpus at scale: a streaming BM25 build with bounded memory, killed and resumed, the same answers
as bm25s in memory, and clear refusals (no disk space, a damaged or half-written index).

The DPR-format corpus is generated here, from a seeded generator: 200,000 passages with short texts
(the build's machinery, chunks, ranges, checkpoints and worker processes, does not depend on the
passages' length, and short ones keep the test fast). A budget of 16 MB makes the build work in
more than ten chunks and several posting ranges, with postings larger than the memory the build
may hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from explorer.errors import CorpusError
from explorer.retrieval import bm25 as bm25_module
from explorer.retrieval import bm25_kernel
from explorer.retrieval.bm25 import BM25Retriever, bm25s_in_memory
from explorer.retrieval.bm25_index import MANIFEST_FILE, BM25Index, full_top_k
from explorer.retrieval.corpora import load_corpus

ROOT = Path(__file__).resolve().parent.parent
PASSAGES = 200_000
BUDGET = 16 << 20
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "bo", "da", "fe", "gu", "hi", "ja", "pe"]


def write_dpr_tsv(path: Path, n: int, seed: int = 0) -> None:
    """n passages in the psgs_w100.tsv layout: ids 1..n, quoted texts of 6-20 Zipf-distributed words, titles."""
    rng = np.random.default_rng(seed)
    vocab = np.array([a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES] +
                     ["the", "of", "and", "in", "was", "Colisée", "Straße", "1958", "A"], dtype=object)
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    cumulative = np.cumsum(ranks ** -1.05 / (ranks ** -1.05).sum())
    lengths = rng.integers(6, 21, size=n)
    words = vocab[np.minimum(np.searchsorted(cumulative, rng.random(int(lengths.sum()))), len(vocab) - 1)]
    ends = np.cumsum(lengths)
    titles = vocab[rng.integers(0, 400, size=n)]
    with open(path, "w", encoding="utf-8") as out:
        out.write("id\ttext\ttitle\n")
        out.writelines(f'{i + 1}\t"{" ".join(words[end - size:end])}"\t{titles[i].capitalize()}\n'
                       for i, (end, size) in enumerate(zip(ends.tolist(), lengths.tolist(), strict=True)))


@pytest.fixture(scope="module")
def dpr_tsv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dpr") / "psgs_synthetic.tsv"
    write_dpr_tsv(path, PASSAGES)
    return path


def index_command(corpus: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "EXPLORER_CACHE": str(cache), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "explorer", "corpus", "index", str(corpus), "--memory-budget",
                             f"{BUDGET >> 20}MB"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_streaming_build_bounded_memory_killed_and_resumed(dpr_tsv: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 1. A build in a process that is killed (SIGKILL) after its third chunk of terms.
    killed_cache = tmp_path / "killed"
    process = index_command(dpr_tsv, killed_cache)
    deadline = time.monotonic() + 240
    third = None
    while time.monotonic() < deadline and process.poll() is None:
        third = next(killed_cache.glob("indexes/.building-*/chunks/000002/meta.json"), None)
        if third is not None:
            break
        time.sleep(0.02)
    assert third is not None and process.poll() is None, process.communicate()[0].decode()[-2000:]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    building = third.parents[2]
    final = building.with_name(building.name[len(".building-"):])
    assert not (final / MANIFEST_FILE).exists()
    # a half-written index is never opened: what, where and how to fix it
    with pytest.raises(CorpusError) as refused:
        BM25Index(final)
    assert "incomplete" in refused.value.what and "interrupted" in refused.value.what
    assert refused.value.where == str(final) and "corpus index" in refused.value.fix

    # 2. The same build uninterrupted, in this process and without worker processes (the command uses one).
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "whole"))
    corpus = load_corpus(dpr_tsv)
    assert len(corpus) == PASSAGES and corpus.format == "dpr"
    whole = BM25Retriever(corpus, memory_budget=BUDGET, workers=0)
    build = whole.index.manifest["build"]
    assert build["ledger_peak_bytes"] <= BUDGET, build["ledger_at_peak"]
    assert build["chunks"] >= 10 and build["ranges"] >= 2, build
    postings_bytes = 8 * whole.index.manifest["postings"]
    assert postings_bytes > BUDGET, "the postings alone should take more than the memory the build may hold"

    # 3. The killed build resumed (its own process again): the same index, byte for byte.
    process = index_command(dpr_tsv, killed_cache)
    output = process.communicate(timeout=300)[0].decode()
    assert process.returncode == 0, output[-2000:]
    resumed = BM25Index(final)
    assert resumed.manifest["build"]["resumed"] is True and resumed.manifest["build"]["sessions"] == 2
    assert resumed.fingerprint == whole.index.fingerprint
    assert resumed.manifest["build"]["ledger_peak_bytes"] <= BUDGET
    resumed.verify()
    for query in ("kalomi nesaru", "Colisee 1958", "straße toviza"):
        ids = whole._term_ids(query)
        assert ids, query
        expected = whole.index.top_k(ids, 10, strategy="full")
        for strategy in ("accumulate", "maxscore"):
            rows, scores = resumed.top_k(ids, 10, strategy=strategy)
            assert rows.tolist() == expected[0].tolist() and scores.tolist() == expected[1].tolist(), strategy
        assert [h.passage.id for h in whole.search(query, 10)] == [str(r + 1) for r in rows.tolist()]


def test_a_disk_without_room_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    cache = tmp_path / "cache"
    monkeypatch.setenv("EXPLORER_CACHE", str(cache))
    huge = tmp_path / "psgs_w100.tsv"
    with open(huge, "wb") as stream:  # a sparse file larger than the free space of its disk
        stream.truncate(shutil.disk_usage(tmp_path).free * 2 + (1 << 30))
    with pytest.raises(CorpusError) as refused:
        load_corpus(huge)
    error = refused.value
    assert "not enough free disk space" in error.what and "passage store" in error.what
    assert error.where is not None and error.where.startswith(str(cache))
    assert "EXPLORER_CACHE" in error.fix
    written = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert written == 0, "nothing is written before the refusal"


def test_a_damaged_index_is_refused_for_a_large_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": f"word{i} shared text {i}"}) + "\n"
                            for i in range(50)), encoding="utf-8")
    retriever = BM25Retriever(load_corpus(path))
    folder = retriever.index_path
    docs = folder / "post_docs.i32"
    docs.write_bytes(docs.read_bytes()[:-4])  # a copy cut short
    with pytest.raises(CorpusError) as refused:
        BM25Index(folder)
    assert "post_docs.i32" in refused.value.what and "damaged" in refused.value.what
    assert refused.value.where == str(docs) and str(folder) in refused.value.fix
    monkeypatch.setattr(bm25_module, "REBUILD_DAMAGED_UP_TO", 10)  # as if the corpus took an hour to index
    with pytest.raises(CorpusError, match="post_docs.i32"):
        BM25Retriever(load_corpus(path))
    monkeypatch.setattr(bm25_module, "REBUILD_DAMAGED_UP_TO", 1000)  # small: rebuilt, with a warning
    assert BM25Retriever(load_corpus(path)).index_built
    (folder / MANIFEST_FILE).write_text(json.dumps({**json.loads((folder / MANIFEST_FILE).read_text()),
                                                    "postings": 1}), encoding="utf-8")
    with pytest.raises(CorpusError, match="damaged"):
        BM25Index(folder)


@pytest.mark.shared_data
def test_same_top10_as_bm25s_in_memory_on_the_benchmark_pool(benchmark_retriever) -> None:
    from explorer.eval.datasets import resolve_sources

    retriever = benchmark_retriever
    reference = bm25s_in_memory(retriever.corpus, retriever.tokenizer, retriever.params)
    questions = [q.question for source in resolve_sources(["hotpotqa", "musique", "nq", "2wiki"])
                 for q in source.load(150)]
    assert len(questions) >= 450
    agree = 0
    for question in questions:
        ids = [reference.vocab_dict[t] for t in retriever.tokenizer.terms(question) if t in reference.vocab_dict]
        expected = full_top_k(reference.get_scores_from_ids(ids), 10) if ids else (np.zeros(0), np.zeros(0))
        mine = retriever._term_ids(question)
        same = True
        for strategy in ("full", "accumulate", "maxscore"):
            rows, scores = retriever.index.top_k(mine, 10, strategy=strategy)
            same &= rows.tolist() == expected[0].tolist() and scores.tolist() == expected[1].tolist()
        agree += same
    assert agree / len(questions) == 1.0


def test_batch_analysis_finds_the_words_the_query_tokenizer_finds() -> None:
    """The build analyses thousands of passages as one string; every text must still give exactly the words
    ``Tokenizer.words`` gives it alone (final sigma, dotted I, ligatures, full-width forms, combining accents,
    fractions, scripts without case, control characters, and random characters from many blocks)."""
    import random

    from explorer.retrieval.bm25_analysis import SENTINEL_BYTES, words_of_batch
    from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings

    texts = ["ΟΔΟΣ Σ aΣ b ΑΣ.", "İstanbul İ", "½ ¹ ² ③ ⅷ", "cafe\u0301s café", "ＦＵＬＬ ｗｉｄｔｈ！",
             "under_score __x__", "ﬁnance ﬀ", "Straße STRASSE", "x\x1fy\x1ez", "日本語のテキスト 中文",
             "Ǆemal ǅ", "ʼn ΐ ſ K µ", "tab\there"]
    rng = random.Random(0)
    pool = [chr(c) for c in range(0x20, 0x3000) if chr(c).isprintable()]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    tokens = words_of_batch(texts, TokenizerSettings())
    assert tokens is not None
    found: list[list[str]] = [[]]
    for token in tokens:
        if token == SENTINEL_BYTES:
            found.append([])
        else:
            found[-1].append(token.decode())
    tokenizer = Tokenizer()
    assert found == [tokenizer.words(t) for t in texts]


def test_every_trace_records_the_corpus_health(demo_retriever) -> None:
    from explorer.runtime import corpus_facts

    health = corpus_facts(demo_retriever, "demo")["health"]
    assert health["passages"] == len(demo_retriever) == 174 and health["expected_passages"] is None
    assert health["count_ok"] and health["ok"] and health["index_bytes"] > 0 and health["store_bytes"] > 0
    probe = health["distinct_queries"]
    assert probe["queries"] == 5 and probe["distinct"] == probe["answered"] == 5


@pytest.mark.skipif(not bm25_kernel.available(), reason="numba is not installed (requirements.txt installs it)")
@pytest.mark.parametrize("block", [64, 4096, 1 << 18])
def test_the_compiled_search_block_by_block_and_split_over_threads_equals_full_scoring(block: int) -> None:
    """Postings spread over many blocks (and repeated query terms) give the full scoring's k best and sums,
    in one range or split over threads; a search leaves its buffers clean for the next one."""
    rng = np.random.default_rng(block)
    n, terms = 50_000, 6
    lists = [np.sort(rng.choice(n, size=size, replace=False)).astype(np.int32)
             for size in (5, 300, 4_000, 20_000, 49_999, 1)]
    values = [rng.integers(1, 40, size=len(docs)).astype(np.float32) / 8 for docs in lists]  # ties aplenty
    docs, scores = np.concatenate(lists), np.concatenate(values)
    ends = np.cumsum([len(d) for d in lists]).astype(np.int64)
    starts = ends - np.asarray([len(d) for d in lists], dtype=np.int64)
    for query in ([0, 1, 2], [3, 2, 3, 4], [5], list(range(terms)), [4, 4]):
        distinct = list(dict.fromkeys(query))  # as the index passes them: each list once, then the query order
        order = np.asarray([distinct.index(t) for t in query], dtype=np.int64)
        full = np.zeros(n, dtype=np.float32)
        for t in query:
            full[lists[t]] += values[t]
        for k in (1, 10, 200):
            expected = full_top_k(full, k)
            for parts in (1, 2, 3, 1):
                rows, got = bm25_kernel.top_k(docs, scores, starts[distinct], ends[distinct], order, n, k,
                                              parts=parts, block=block)
                assert rows.tolist() == expected[0].tolist(), (query, k, parts)
                assert got.tolist() == expected[1].tolist(), (query, k, parts)


@pytest.mark.skipif(not bm25_kernel.available(), reason="numba is not installed (requirements.txt installs it)")
def test_the_compiled_search_loads_at_open_for_the_types_a_mapped_index_passes(demo_retriever) -> None:
    """The warm-up at open loads the specialisation an index's searches use (read-only mapped postings), so
    the first search adds none of its own, and it starts once per process."""
    thread = bm25_kernel.warm_in_background()
    assert thread is not None and bm25_kernel.warm_in_background() is thread
    thread.join()
    compiled = bm25_kernel._compiled
    assert compiled is not None
    loaded = len(compiled.signatures)
    index = demo_retriever.index
    ids = demo_retriever._term_ids("Lewiston Maineiacs arena")
    rows, scores = index.top_k(ids, 5, strategy="accumulate")
    assert len(compiled.signatures) == loaded, "a real search compiled another specialisation than the warm-up's"
    expected = index.top_k(ids, 5, strategy="full")
    assert rows.tolist() == expected[0].tolist() and scores.tolist() == expected[1].tolist()
