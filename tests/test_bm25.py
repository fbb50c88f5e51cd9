"""BM25: scores against a plain recomputation of the formula, the analysis, edge-case queries,
concurrent searches, and the on-disk index cache (reuse, rebuild on change, recovery from damage)."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from explorer.errors import ConfigError, CorpusError
from explorer.retrieval.base import Retriever
from explorer.retrieval.bm25 import META_FILE, BM25Params, BM25Retriever
from explorer.retrieval.corpora import load_corpus
from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings

PASSAGES = [
    {"id": "p1", "title": "Lewiston, Maine", "text": "Lewiston is a city in Maine on the Androscoggin River."},
    {"id": "p2", "title": "Colisée", "text": "The Colisée is an arena in Lewiston. The arena seats 3,677 people; "
                                             "the arena also hosts concerts."},
    {"id": "p3", "title": "Hockey", "text": "Ice hockey is played in an arena by two teams of skaters."},
    {"id": "p4", "title": "River", "text": "A river is a natural flowing watercourse, usually freshwater."},
    {"id": "p5", "title": "Maine", "text": "Maine is the northernmost state in New England. Its largest city is "
                                           "Portland, and Lewiston is its second largest city."},
    {"id": "p6", "title": "Concerts", "text": "Concerts are live performances of music before an audience."},
]
QUERIES = ["Lewiston arena seating", "river in Maine", "concerts arena", "largest city of Maine", "hockey skaters",
           "Colisee capacity 3,677"]


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXPLORER_CACHE", str(cache))
    return cache


def write_corpus(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def small(tmp_path: Path, isolated_cache: Path) -> BM25Retriever:
    return BM25Retriever(load_corpus(write_corpus(tmp_path / "small.jsonl", PASSAGES)))


def reference_scores(retriever: BM25Retriever, query: str) -> list[float]:
    """Lucene BM25 written out: idf = ln(1 + (N - df + .5) / (df + .5)),
    tf part = f / (f + k1 (1 - b + b |d| / avgdl)), summed over query terms."""
    tok, k1, b = retriever.tokenizer, retriever.params.k1, retriever.params.b
    docs = [tok.terms(f"{p.title} {p.text}") for p in retriever.corpus.passages]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d in docs:
        tf, score = Counter(d), 0.0
        for term in tok.terms(query):
            if term in df:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] / (tf[term] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(score)
    return out


# --- scores ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", QUERIES)
def test_scores_match_the_formula(small: BM25Retriever, query: str) -> None:
    expected = reference_scores(small, query)
    assert np.allclose(small.scores(query), expected, rtol=1e-5, atol=1e-6)
    hits = small.search(query, 10)
    order = sorted((i for i, s in enumerate(expected) if s > 0), key=lambda i: (-expected[i], i))
    assert [h.passage.id for h in hits] == [PASSAGES[i]["id"] for i in order]
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(isinstance(h.score, float) for h in hits)


def test_other_parameters_change_scores_as_the_formula_says(tmp_path: Path, isolated_cache: Path) -> None:
    corpus = load_corpus(write_corpus(tmp_path / "c.jsonl", PASSAGES))
    flat = BM25Retriever(corpus, params=BM25Params(k1=2.0, b=0.0))
    assert np.allclose(flat.scores("arena Lewiston"), reference_scores(flat, "arena Lewiston"), rtol=1e-5)
    with pytest.raises(ConfigError):
        BM25Params(b=1.5)


def test_repeated_query_terms_count_twice(small: BM25Retriever) -> None:
    once, twice = small.scores("arena"), small.scores("arena arena")
    assert np.allclose(twice, 2 * once)


def test_title_is_searchable(small: BM25Retriever) -> None:
    assert small.search("Colisée", 1)[0].passage.id == "p2"


def test_accents_fold_in_query_and_passage(small: BM25Retriever) -> None:
    assert [h.passage.id for h in small.search("colisee", 3)] == [h.passage.id for h in small.search("COLISÉE", 3)]


# --- edge cases -----------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   ", "the of and", "?!...", "a", "zzzunknownzzz"])
def test_queries_with_nothing_searchable_return_nothing(small: BM25Retriever, query: str) -> None:
    assert small.search(query, 5) == []


def test_k_larger_than_the_corpus_returns_every_match(small: BM25Retriever) -> None:
    hits = small.search("arena Lewiston river Maine concerts hockey", 1000)
    assert len(hits) == len(small) == 6
    assert small.search("arena", 0) == []


def test_k_smaller_than_the_matches_keeps_the_best(small: BM25Retriever) -> None:
    full = small.search("arena Lewiston Maine", 10)
    assert small.search("arena Lewiston Maine", 2) == full[:2]


def test_ties_are_broken_by_corpus_order(tmp_path: Path, isolated_cache: Path) -> None:
    rows = [{"id": f"t{i}", "title": "Same", "text": "identical words here"} for i in range(5)]
    rows.insert(2, {"id": "other", "title": "Else", "text": "unrelated text entirely"})
    retriever = BM25Retriever(load_corpus(write_corpus(tmp_path / "ties.jsonl", rows)))
    assert [h.passage.id for h in retriever.search("identical", 3)] == ["t0", "t1", "t2"]
    assert [h.passage.id for h in retriever.search("identical", 10)] == ["t0", "t1", "t2", "t3", "t4"]


def test_stopword_only_corpus_is_refused(tmp_path: Path, isolated_cache: Path) -> None:
    corpus = load_corpus(write_corpus(tmp_path / "s.jsonl", [{"id": "1", "text": "the of and"}]))
    with pytest.raises(CorpusError, match="no passage has a searchable word"):
        BM25Retriever(corpus)


def test_protocol_and_describe(small: BM25Retriever) -> None:
    assert isinstance(small, Retriever)
    info = small.describe()
    assert info["passages"] == 6 and info["fingerprint"] == small.corpus.fingerprint
    assert info["engine"].startswith("explorer on-disk BM25")
    assert info["scoring"] == {"variant": "lucene", "k1": 1.2, "b": 0.75}
    assert info["tokenizer"]["stemmer"] == "english" and info["tokenizer"]["stopwords"] == "en"
    json.dumps(info)  # traces store it as JSON
    assert small.passage("p3").title == "Hockey" and small.passage("nope") is None


def test_concurrent_searches_agree_with_sequential_ones(small: BM25Retriever) -> None:
    expected = {q: [(h.passage.id, h.score) for h in small.search(q, 4)] for q in QUERIES}
    failures: list[str] = []

    def worker(seed: int) -> None:
        for i in range(300):
            query = QUERIES[(seed + i) % len(QUERIES)]
            got = [(h.passage.id, h.score) for h in small.search(query, 4)]
            if got != expected[query]:
                failures.append(f"{query}: {got}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


# --- tokenizer ------------------------------------------------------------------------------------


def test_tokenizer_analysis() -> None:
    tok = Tokenizer()
    assert tok.terms("The Androscoggin Bank Colisée's seating capacity") == ["androscoggin", "bank", "colise",
                                                                              "seat", "capac"]
    assert tok.terms("World War 2 and a B-52") == ["world", "war", "2", "52"]
    plain = Tokenizer(TokenizerSettings(stemmer=None, stopwords="none", fold_accents=False, min_length=1))
    assert plain.terms("The Colisée a") == ["the", "colisée", "a"]
    with pytest.raises(ConfigError):
        Tokenizer(TokenizerSettings(stemmer="klingon"))


def test_stemmer_is_safe_across_threads() -> None:
    tok = Tokenizer()
    words = [f"running{i} connections jumped" for i in range(200)]
    expected = [tok.terms(w) for w in words]
    results: list[bool] = []

    def worker() -> None:
        results.append(all(tok.terms(w) == e for w, e in zip(words, expected, strict=True)))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 6


# --- the index cache ------------------------------------------------------------------------------


def test_second_open_reuses_the_stored_index(tmp_path: Path, isolated_cache: Path) -> None:
    path = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    first = BM25Retriever(load_corpus(path))
    assert first.index_built and first.index_path is not None and first.index_path.is_relative_to(isolated_cache)
    stamp = (first.index_path / META_FILE).stat().st_mtime_ns
    second = BM25Retriever(load_corpus(path))
    assert not second.index_built
    assert second.index_path == first.index_path
    assert (second.index_path / META_FILE).stat().st_mtime_ns == stamp
    for query in QUERIES:
        assert second.search(query, 5) == first.search(query, 5)


def test_changed_corpus_rebuilds_and_drops_the_stale_index(tmp_path: Path, isolated_cache: Path) -> None:
    path = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    old = BM25Retriever(load_corpus(path))
    write_corpus(path, PASSAGES + [{"id": "p7", "title": "Arena football", "text": "Arena football is indoor."}])
    new = BM25Retriever(load_corpus(path))
    assert new.index_built and new.index_path != old.index_path
    assert not old.index_path.exists(), "the index of the old content should be removed"
    assert "p7" in [h.passage.id for h in new.search("arena football", 3)]


def test_other_tokenizer_settings_get_their_own_index(tmp_path: Path, isolated_cache: Path) -> None:
    corpus = load_corpus(write_corpus(tmp_path / "c.jsonl", PASSAGES))
    stemmed = BM25Retriever(corpus)
    plain = BM25Retriever(corpus, settings=TokenizerSettings(stemmer=None))
    assert plain.index_built and plain.index_path != stemmed.index_path
    assert stemmed.index_path.is_dir(), "an index of the same passages under other settings is still valid"
    assert not BM25Retriever(corpus).index_built
    assert plain.search("seating", 3) == []  # "seats" only matches "seating" through the stemmer
    assert stemmed.search("seating", 3)[0].passage.id == "p2"


@pytest.mark.parametrize("damage", ["truncate", "delete", "meta"])
def test_damaged_index_is_rebuilt(tmp_path: Path, isolated_cache: Path, damage: str) -> None:
    path = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    first = BM25Retriever(load_corpus(path))
    expected = first.search("Lewiston arena seating", 3)  # before the damage: the index is read from its files
    data = first.index_path / "post_scores.f32"
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:20])
    elif damage == "delete":
        data.unlink()
    else:
        (first.index_path / META_FILE).write_text("{not json", encoding="utf-8")
    again = BM25Retriever(load_corpus(path))
    assert again.index_built
    assert again.search("Lewiston arena seating", 3) == expected
    assert not BM25Retriever(load_corpus(path)).index_built, "the rebuilt index should be stored again"


def test_no_temporary_folders_are_left_behind(tmp_path: Path, isolated_cache: Path) -> None:
    BM25Retriever(load_corpus(write_corpus(tmp_path / "c.jsonl", PASSAGES)))
    leftovers = [p.name for p in (isolated_cache / "indexes").iterdir() if p.name.startswith(".tmp")]
    assert not leftovers


# --- the demo corpus through the shipped retriever ------------------------------------------------


def test_demo_arena_first(demo_retriever) -> None:
    top = demo_retriever.search("Lewiston Maineiacs arena seating capacity", 3)
    assert top[0].passage.id == "demo-0002" and top[0].passage.title == "Androscoggin Bank Colisée"


def test_demo_case_studies_reach_a_gold_passage(demo_retriever) -> None:
    from explorer.eval.datasets import load_dataset

    cases = [q for q in load_dataset("demo") if q.extra.get("case_study")]
    assert len(cases) == 4
    for q in cases:
        found = {h.passage.id for h in demo_retriever.search(q.question, 5)}
        assert found & set(q.gold_passages), f"{q.extra['case_study']}: no gold passage in the top 5"
