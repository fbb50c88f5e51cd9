"""Opening retrievers by name or path, the benchmark corpus, and the retrieve / corpus commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.errors import CorpusError
from explorer.paths import PROJECT_ROOT
from explorer.retrieval.registry import clear_cache, open_retriever


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "explorer", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXPLORER_CACHE", str(cache))
    clear_cache()
    yield cache
    clear_cache()


# --- open_retriever -------------------------------------------------------------------------------


def test_demo_is_opened_once_per_process() -> None:
    first = open_retriever("demo")
    assert open_retriever("demo") is first
    assert len(first) == 174 and first.name == "demo"


def test_path_corpus_and_reopen_after_change(tmp_path: Path, isolated_cache: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": "a", "title": "Alpha", "text": "Alpha is first."}) + "\n", encoding="utf-8")
    first = open_retriever(str(path))
    assert open_retriever(str(path)) is first
    assert first.search("alpha", 1)[0].passage.id == "a"
    path.write_text(json.dumps({"id": "b", "title": "Beta", "text": "Beta is second."}) + "\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse file systems
    second = open_retriever(str(path))
    assert second is not first and second.search("beta", 1)[0].passage.id == "b"


def test_progress_messages_when_building(tmp_path: Path, isolated_cache: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "some words"}) + "\n", encoding="utf-8")
    messages: list[str] = []
    open_retriever(str(path), progress=messages.append)
    assert any("building the BM25 index" in m for m in messages)


def test_unknown_name_or_missing_path(tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as info:
        open_retriever("wikipedia-2030")
    assert "'demo'" in str(info.value) and "Fix:" in str(info.value)
    with pytest.raises(CorpusError):
        open_retriever(str(tmp_path / "absent.jsonl"))
    with pytest.raises(CorpusError):
        open_retriever("")


def test_benchmark_without_data_fails_clearly(tmp_path: Path, isolated_cache: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_DATA", str(tmp_path / "no-data-here"))
    with pytest.raises(CorpusError) as info:
        open_retriever("benchmark")
    message = str(info.value)
    assert "no-data-here" in message and "demo" in message


# --- the benchmark corpus -------------------------------------------------------------------------


@pytest.fixture()
def benchmark(benchmark_retriever):
    return benchmark_retriever


@pytest.mark.shared_data
def test_benchmark_corpus_size_and_passage_length(benchmark) -> None:
    # 12,545 distinct paragraphs; those over 100 words are cut, giving ~15,500 passages (the data
    # README's "about 19,000" overestimates: counting by the README's own recipe gives 15,555).
    assert 15_000 <= len(benchmark) <= 16_500
    assert all(len(p.text.split()) <= 100 for p in benchmark.corpus.passages)
    assert len({p.id for p in benchmark.corpus.passages}) == len(benchmark)


@pytest.mark.shared_data
def test_every_gold_paragraph_is_in_the_benchmark_corpus(benchmark, shared_data: Path) -> None:
    from explorer.eval.benchmark_gold import load_benchmark_gold
    from explorer.eval.datasets import load_dataset

    gold = load_benchmark_gold()
    for name, rel in (("hotpotqa", "hotpotqa/dev_distractor_100.json"), ("musique", "musique/dev_100.json"),
                      ("nq", "nq/nq_open_dev_oracle_2655.jsonl.gz"),
                      ("2wiki", "2wikimultihopqa/dev_2_with_context.json")):
        questions = load_dataset(name, path=shared_data / rel)
        assert len(gold[name]) == len(questions), f"{name}: every question should have gold passages"
        for q in questions:
            assert q.gold_passages == gold[name][q.id]
            missing = [g for g in q.gold_passages if benchmark.passage(g) is None]
            assert not missing, f"{name} {q.id}: gold {missing} not in the benchmark corpus"


@pytest.mark.shared_data
def test_hotpotqa_gold_titles_are_the_supporting_facts(benchmark, shared_data: Path) -> None:
    raw = json.loads((shared_data / "hotpotqa/dev_distractor_100.json").read_text(encoding="utf-8"))
    from explorer.eval.datasets import load_dataset

    for item, q in zip(raw, load_dataset("hotpotqa"), strict=True):
        titles = {benchmark.passage(g).title for g in q.gold_passages}
        assert titles == {title for title, _ in item["supporting_facts"]}


@pytest.mark.shared_data
def test_benchmark_retrieval_finds_gold_for_most_nq_questions(benchmark) -> None:
    from explorer.eval.datasets import load_dataset
    from explorer.eval.metrics import passage_recall

    questions = load_dataset("nq", limit=200)
    recall = [passage_recall(q.gold_passages, [h.passage.id for h in benchmark.search(q.question, 10)])
              for q in questions]
    assert sum(recall) / len(recall) > 0.7  # BM25 reaches the gold of most factoid questions in the top 10


# --- the command line -----------------------------------------------------------------------------


def test_cli_retrieve_demo_puts_the_arena_first() -> None:
    result = run_cli("retrieve", "--corpus", "demo", "Lewiston Maineiacs arena seating capacity")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["rank", "score", "id"]
    assert lines[1].split()[0] == "1" and "demo-0002" in lines[1] and "Androscoggin Bank Colisée" in lines[1]
    assert "multi-purpose arena" in lines[2], "the snippet line follows each hit"


def test_cli_retrieve_json_and_k() -> None:
    result = run_cli("retrieve", "--corpus", "demo", "-k", "3", "--json", "Steve Hillage album Green")
    assert result.returncode == 0, result.stderr
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]


def test_cli_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    result = run_cli("retrieve", "--corpus", str(tmp_path / "missing.jsonl"), "query")
    assert result.returncode == 1
    # A busy machine adds one line first, the thread count chosen for it; the error itself is one line.
    lines = [line for line in result.stderr.strip().splitlines() if "torch thread" not in line]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "text": "ok"}\n{"id": 2\n', encoding="utf-8")
    result = run_cli("corpus", "info", str(bad))
    assert result.returncode == 1 and f"{bad}:2" in result.stderr and "Traceback" not in result.stderr


def test_cli_corpus_info_and_convert(tmp_path: Path) -> None:
    src = tmp_path / "hotpot.json"
    src.write_text(json.dumps([{"_id": "q", "question": "?", "answer": "a", "supporting_facts": [],
                                "context": [["Long", [" ".join(["word"] * 150)]], ["Short", ["Tiny."]]]}]),
                   encoding="utf-8")
    info = run_cli("corpus", "info", str(src))
    assert info.returncode == 0, info.stderr
    assert "hotpotqa (detected)" in info.stdout
    assert "3 (2 are pieces of longer documents)" in info.stdout
    out = tmp_path / "out.jsonl"
    converted = run_cli("corpus", "convert", str(src), str(out))
    assert converted.returncode == 0, converted.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["title"] for r in rows] == ["Long", "Long", "Short"] and set(rows[0]) == {"id", "title", "text"}
    again = run_cli("corpus", "convert", str(src), str(out))
    assert again.returncode == 1 and "--force" in again.stderr


def test_cli_corpus_index_and_health_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A file named like DPR's dump is checked against its known size; the health rows follow the index."""
    from explorer.cli import main

    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    dpr = tmp_path / "psgs_w100.tsv"
    dpr.write_text("id\ttext\ttitle\n1\t\"Aaron was a prophet.\"\tAaron\n2\t\"Lewiston is in Maine.\"\tLewiston\n"
                   "3\t\"The arena seats 3,677.\"\tColisee\n", encoding="utf-8")
    assert main(["corpus", "info", str(dpr)]) == 0
    info = capsys.readouterr().out
    assert "not built yet" in info and "3 but expected 21,015,324" in info
    assert main(["corpus", "index", str(dpr), "--memory-budget", "32MB"]) == 0
    built = capsys.readouterr().out
    assert "3 but expected 21,015,324 (truncated or another file?)" in built
    assert "distinct queries  ok (3 distinct result lists for 3 answered of 3 queries)" in built
    assert "index size" in built and "BM25 index" in built


def test_a_method_name_is_registered_once() -> None:
    from explorer.errors import ConfigError
    from explorer.methods.base import METHODS, Method, method_names, register

    assert method_names()[:3] == ["wo", "sr", "fl"]

    class Impostor(Method):
        name = "dragin"
        title = "another DRAGIN"

    with pytest.raises(ConfigError, match="already registered"):
        register(Impostor)
    assert METHODS["dragin"].__name__ == "Dragin"
