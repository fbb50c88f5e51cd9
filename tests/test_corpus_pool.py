"""The {title: [sentences]} and {title: text} corpus layouts, and `corpus build` pooling a user's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.errors import CorpusError
from explorer.eval.datasets import resolve_source, resolve_sources
from explorer.retrieval.corpora import load_corpus
from explorer.retrieval.pool import CorpusSource, build_pool
from explorer.retrieval.splitter import join_sentences, paragraph_passage_ids


def as_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


LONG = " ".join(f"w{i}" for i in range(150))


def test_title_to_sentences_and_title_to_text(tmp_path: Path) -> None:
    sentences = as_json(tmp_path / "hippo.json", {"Colisee": ["The Colisee is an arena.", "It seats 3,677."],
                                                  "Long": [LONG], "Empty": []})
    corpus = load_corpus(sentences)
    assert corpus.format == "title-sentences" and corpus.documents == 3 and corpus.skipped == 1
    colisee = [p for p in corpus.passages if p.title == "Colisee"]
    assert [p.text for p in colisee] == ["The Colisee is an arena. It seats 3,677."]
    assert colisee[0].id == paragraph_passage_ids("Colisee", join_sentences(["The Colisee is an arena.",
                                                                             "It seats 3,677."]))[0]
    assert len([p for p in corpus.passages if p.title == "Long"]) == 2  # cut into pieces of at most 100 words
    texts = as_json(tmp_path / "texts.json", {"Colisee": "The Colisee is an arena. It seats 3,677."})
    by_text = load_corpus(texts)
    assert by_text.format == "title-text" and by_text.passages[0].id == colisee[0].id  # the same paragraph, same id
    assert load_corpus(texts, "title-sentences").passages == by_text.passages  # a named layout reads both kinds


def test_title_map_errors_name_the_entry_and_the_fix(tmp_path: Path) -> None:
    bad = as_json(tmp_path / "bad.json", {"A": "fine", "B": 7})
    with pytest.raises(CorpusError) as info:
        load_corpus(bad)
    assert "entry 2, title 'B'" in str(info.value) and "not a text or a list of sentences" in str(info.value)
    listy = as_json(tmp_path / "listy.json", [{"text": "x"}])
    with pytest.raises(CorpusError, match="one JSON object"):
        load_corpus(listy, "title-text")
    obj = as_json(tmp_path / "obj.json", {"A": "text"})
    with pytest.raises(CorpusError, match="format 'passages' is a list of records"):
        load_corpus(obj, "passages")


HOTPOT = {"_id": "h1", "question": "Which arena?", "answer": "Colisee", "type": "bridge",
          "supporting_facts": [["Maineiacs", 0], ["Colisee", 1]],
          "context": [["Maineiacs", ["The Maineiacs played at the Colisee."]],
                      ["Colisee", ["The Colisee is an arena.", " It seats 3,677."]]]}
MUSIQUE = {"id": "2hop__1", "question": "Q?", "answer": "A",
           "paragraphs": [{"title": "P", "paragraph_text": "Para P.", "is_supporting": True},
                          {"title": "Colisee", "paragraph_text": "The Colisee is an arena. It seats 3,677.",
                           "is_supporting": True}]}


def test_pool_dedupes_by_title_and_text_and_keeps_gold_ids(tmp_path: Path) -> None:
    hotpot = as_json(tmp_path / "hotpot.json", [HOTPOT, {**HOTPOT, "_id": "h2"}])  # the same paragraphs twice
    musique = jsonl(tmp_path / "musique.jsonl", [MUSIQUE])
    bamboogle = jsonl(tmp_path / "bamboogle.jsonl", [{"idx": 1, "question": "Who?", "answer": "Ada"}])
    corpus = as_json(tmp_path / "wiki.json", {"Colisee": ["The Colisee is an arena.", " It seats 3,677."],
                                              "Ada Lovelace": "Ada Lovelace wrote the first program."})
    sources = resolve_sources([str(hotpot), str(musique), str(bamboogle)])
    pool = build_pool(sources, [CorpusSource(corpus)], tmp_path / "out")
    # Maineiacs, Colisee (in HotpotQA, MuSiQue and the corpus: once), P, Ada Lovelace
    assert pool.documents == 4 and pool.passages == 4
    assert pool.paragraphs_from[f"hotpot ({hotpot.resolve()})"] == 4 and pool.paragraphs_from[str(corpus)] == 2
    rows = [json.loads(line) for line in pool.corpus_path.read_text(encoding="utf-8").splitlines()]
    ids = {r["id"] for r in rows}
    gold = json.loads(pool.gold_path.read_text(encoding="utf-8"))
    assert set(gold) == {"hotpot", "musique", "bamboogle"} and gold["bamboogle"]["questions"] == {}
    assert gold["hotpot"]["questions"]["h1"] == resolve_source(str(hotpot)).load()[0].gold_passages
    assert all(pid in ids for entry in gold.values() for pids in entry["questions"].values() for pid in pids)
    manifest = json.loads(pool.manifest_path.read_text(encoding="utf-8"))
    assert [d["name"] for d in manifest["datasets"]] == ["hotpot", "musique", "bamboogle"]
    assert manifest["corpora"][0]["format"] == "title-sentences" and manifest["passages"] == 4
    # the pooled corpus is an ordinary corpus file: the gold ids of the question files are its passage ids
    loaded = load_corpus(pool.corpus_path)
    assert all(loaded.passage(g) for g in resolve_source(str(musique)).load()[0].gold_passages)


def test_corpus_build_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hotpot = as_json(tmp_path / "hotpot.json", [HOTPOT])
    corpus = as_json(tmp_path / "wiki.json", {"Ada": "Ada wrote programs."})
    out = tmp_path / "pool"
    assert main(["corpus", "build", "--dataset", str(hotpot), "--corpus", str(corpus), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 distinct (title, text)" in printed and "hotpot 1" in printed
    assert f"--corpus {out / 'corpus.jsonl'}" in printed  # how to evaluate on it
    assert main(["corpus", "build", "--dataset", str(hotpot), "--out", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["corpus", "build", "--dataset", str(hotpot), "--out", str(out), "--force"]) == 0
    capsys.readouterr()
    assert main(["corpus", "build", "--out", str(out)]) == 1
    assert "nothing to pool" in capsys.readouterr().err
    weird = jsonl(tmp_path / "weird.jsonl", [{"id": "1", "body": "x"}])
    assert main(["corpus", "build", "--corpus", str(weird), "--out", str(tmp_path / "o2")]) == 1
    err = capsys.readouterr().err
    assert "cannot tell the format" in err and "--corpus-format" in err


@pytest.mark.shared_data
def test_pooling_the_shared_files_gives_the_benchmark_gold(shared_data: Path, tmp_path: Path) -> None:
    sources = resolve_sources(["hotpotqa", "musique"], data_dir=shared_data)
    pool = build_pool(sources, [CorpusSource(shared_data / "2wikimultihopqa/corpus_6119.json")], tmp_path)
    gold = json.loads(pool.gold_path.read_text(encoding="utf-8"))
    assert len(gold["hotpotqa"]["questions"]) == 100 and len(gold["musique"]["questions"]) == 100
    from explorer.eval.benchmark_gold import load_benchmark_gold

    benchmark = load_benchmark_gold()
    assert gold["hotpotqa"]["questions"] == benchmark["hotpotqa"]  # the same ids the benchmark pool gives
