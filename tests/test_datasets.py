"""Question loaders: every dataset and file layout, gold passage ids, limits, and malformed files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from explorer.errors import DatasetError
from explorer.eval.datasets import Question, load_dataset
from explorer.retrieval.corpora import load_corpus
from explorer.retrieval.splitter import paragraph_passage_ids


def write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


LONG = " ".join(f"w{i}" for i in range(150))  # cut into two passages of 75 words


# --- small files ----------------------------------------------------------------------------------


def test_hotpotqa_official_gold_follows_supporting_sentences(tmp_path: Path) -> None:
    cut = LONG.index(" w100")  # sentence 1 of "Long" starts at word 100, inside the second 75-word piece
    item = {"_id": "h1", "question": "Which?", "answer": "Alpha", "type": "bridge", "level": "hard",
            "supporting_facts": [["Long", 1], ["Short", 0]],
            "context": [["Short", ["Alpha is short."]], ["Long", [LONG[:cut], LONG[cut:]]],
                        ["Other", ["Unrelated."]]]}
    [q] = load_dataset("hotpotqa", path=write_json(tmp_path / "h.json", [item]))
    long_ids = paragraph_passage_ids("Long", LONG)
    assert q.gold_passages == [long_ids[1], paragraph_passage_ids("Short", "Alpha is short.")[0]]
    assert (q.id, q.answers, q.type, q.dataset, q.extra["level"]) == ("h1", ["Alpha"], "bridge", "hotpotqa", "hard")
    # the gold ids are the ids the same file gets as a corpus
    corpus = load_corpus(tmp_path / "h.json")
    assert all(corpus.passage(g) is not None for g in q.gold_passages)


def test_hotpotqa_question_only_layouts(tmp_path: Path) -> None:
    simple = load_dataset("hotpotqa", path=write_json(tmp_path / "s.json", [{"question": "Q?", "answer": "yes",
                                                                             "type": "comparison"}]))
    assert simple == [Question(id="0", question="Q?", answers=["yes"], type="comparison", dataset="hotpotqa")]
    lines = load_dataset("hotpotqa", path=write_jsonl(tmp_path / "l.jsonl", [{"idx": 7, "question": "Q?",
                                                                              "answer": "A"}]))
    assert (lines[0].id, lines[0].type, lines[0].gold_passages) == ("7", "unknown", [])


def test_musique_aliases_and_hop_order(tmp_path: Path) -> None:
    item = {"id": "3hop1__1_2_3", "question": "Q?", "answer": "Main", "answer_aliases": ["Alias", "Main", " "],
            "answerable": True,
            "paragraphs": [{"idx": 0, "title": "A", "paragraph_text": "Para A.", "is_supporting": True},
                           {"idx": 1, "title": "B", "paragraph_text": "Para B.", "is_supporting": False},
                           {"idx": 2, "title": "C", "paragraph_text": "Para C.", "is_supporting": True}],
            "question_decomposition": [{"id": 1, "paragraph_support_idx": 2}, {"id": 2, "paragraph_support_idx": 0}]}
    [q] = load_dataset("musique", path=write_jsonl(tmp_path / "m.jsonl", [item]))
    assert q.answers == ["Main", "Alias"]
    assert q.type == "3hop"
    assert q.gold_passages == paragraph_passage_ids("C", "Para C.") + paragraph_passage_ids("A", "Para A.")


def test_nq_oracle_and_plain(tmp_path: Path) -> None:
    path = tmp_path / "oracle.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"question": "who?", "answers": ["X", "Y"], "ctxs": [
            {"title": "G", "text": "Gold text.", "isgold": True},
            {"title": "N", "text": "Not gold.", "isgold": False}]})
                + "\n")
    [q] = load_dataset("nq", path=path)
    assert q.answers == ["X", "Y"] and q.gold_passages == paragraph_passage_ids("G", "Gold text.")
    [plain] = load_dataset("nq", path=write_jsonl(tmp_path / "nq.jsonl", [{"question": "when?", "answer": ["1972"]}]))
    assert (plain.id, plain.answers, plain.gold_passages, plain.type) == ("0", ["1972"], [], "simple")


def test_strategyqa_booleans(tmp_path: Path) -> None:
    rows = [{"qid": "a", "question": "Is it?", "answer": True, "facts": ["f"], "term": "t"},
            {"qid": "b", "question": "Is it not?", "answer": False}]
    qs = load_dataset("strategyqa", path=write_json(tmp_path / "s.json", rows))
    assert [q.answers for q in qs] == [["yes"], ["no"]]
    assert qs[0].type == "yesno" and qs[0].extra["facts"] == ["f"]


def test_limit_streams_and_stops(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}?", "answer": "a"} for i in range(5)]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "this line is broken\n", encoding="utf-8")
    assert [q.id for q in load_dataset("hotpotqa", path=path, limit=3)] == ["0", "1", "2"]
    assert load_dataset("hotpotqa", path=path, limit=0) == []
    with pytest.raises(DatasetError, match=f"line 6 of {path}"):
        load_dataset("hotpotqa", path=path)


def test_demo_questions() -> None:
    qs = load_dataset("demo")
    assert len(qs) == 41 and qs[0].dataset == "demo"
    assert qs[0].gold_passages == ["demo-0001", "demo-0002"] and qs[0].extra["case_study"] == "dragin"
    demo = load_corpus("demo")
    assert all(demo.passage(g) for q in qs for g in q.gold_passages)


# --- malformed files ------------------------------------------------------------------------------


def _error(name: str, path: Path) -> str:
    with pytest.raises(DatasetError) as info:
        load_dataset(name, path=path)
    return str(info.value)


def test_bad_json_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "a?", "answer": "x"}\n{"question": \n', encoding="utf-8")
    message = _error("nq", path)
    assert f"line 2 of {path}" in message and "not valid JSON" in message


def test_missing_question_and_answer(tmp_path: Path) -> None:
    message = _error("hotpotqa", write_jsonl(tmp_path / "a.jsonl", [{"question": "ok?", "answer": "x"},
                                                                    {"answer": "no question"}]))
    assert f"line 2 of {tmp_path / 'a.jsonl'}" in message and "'question'" in message
    message = _error("musique", write_json(tmp_path / "b.json", [{"id": "1", "question": "q?"}]))
    assert "record 1 of" in message and "answer" in message


def test_wrong_types(tmp_path: Path) -> None:
    assert "true or false" in _error("strategyqa", write_json(tmp_path / "s.json",
                                                              [{"qid": "1", "question": "q?", "answer": "maybe"}]))
    assert "supporting_facts[0]" in _error("hotpotqa", write_json(tmp_path / "h.json", [{
        "_id": "1", "question": "q?", "answer": "a", "supporting_facts": [["T", "zero"]], "context": []}]))
    assert "paragraphs[0]" in _error("musique", write_json(tmp_path / "m.json", [{
        "id": "1", "question": "q?", "answer": "a", "paragraphs": [{"title": 5, "paragraph_text": "x"}]}]))
    assert "not an object" in _error("nq", write_jsonl(tmp_path / "n.jsonl", [["a", "list"]]))


def test_duplicate_question_ids(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "x", "question": "a?", "answer": "1"},
                                              {"id": "x", "question": "b?", "answer": "2"}])
    assert "appears twice" in _error("nq", path)


def test_unknown_dataset_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("squad")
    with pytest.raises(DatasetError, match="not found"):
        load_dataset("hotpotqa", path=tmp_path / "nope.json")
    with pytest.raises(DatasetError, match="not there.*data fetch musique"):
        load_dataset("musique", data_dir=tmp_path)


# --- the real files -------------------------------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.parametrize("name, rel, count, with_gold", [
    ("hotpotqa", "hotpotqa/dev_distractor_100.json", 100, 100),
    ("hotpotqa", "hotpotqa/dev_questions_7405.json", 7405, 0),
    ("hotpotqa", "hotpotqa/dev_500_questions.jsonl", 500, 0),
    ("musique", "musique/dev_100.json", 100, 100),
    ("musique", "musique/dev_500_questions.jsonl", 500, 0),
    ("2wiki", "2wikimultihopqa/dev_500_questions.jsonl", 500, 0),
    ("2wiki", "2wikimultihopqa/dev_2_with_context.json", 2, 2),
    ("nq", "nq/nq_open_dev_3610.jsonl", 3610, 0),
    ("nq", "nq/nq_open_dev_oracle_2655.jsonl.gz", 2655, 2655),
    ("strategyqa", "strategyqa/train_2061.json", 2061, 0),
    ("strategyqa", "strategyqa/dev_229.json", 229, 0),
])
def test_real_files(shared_data: Path, name: str, rel: str, count: int, with_gold: int) -> None:
    qs = load_dataset(name, path=shared_data / rel)
    assert len(qs) == count
    assert sum(bool(q.gold_passages) for q in qs) == with_gold
    assert all(q.question and q.answers and all(a.strip() for a in q.answers) for q in qs)
    assert len({q.id for q in qs}) == count


@pytest.mark.shared_data
def test_default_files(shared_data: Path) -> None:
    counts = {name: len(load_dataset(name, data_dir=shared_data)) for name in
              ("hotpotqa", "musique", "2wiki", "nq", "strategyqa")}
    assert counts == {"hotpotqa": 100, "musique": 100, "2wiki": 500, "nq": 2655, "strategyqa": 229}


@pytest.mark.shared_data
def test_real_answers_and_types(shared_data: Path) -> None:
    musique = load_dataset("musique", data_dir=shared_data)
    first = json.loads((shared_data / "musique/dev_100.json").read_text(encoding="utf-8"))[0]
    assert musique[0].answers[0] == first["answer"] and set(first["answer_aliases"]) <= set(musique[0].answers)
    assert {q.type for q in musique} == {"2hop", "3hop", "4hop"}
    hotpot = load_dataset("hotpotqa", data_dir=shared_data)
    assert {q.type for q in hotpot} == {"bridge", "comparison"}
    assert all(len(q.gold_passages) >= 2 for q in hotpot)
    strategy = load_dataset("strategyqa", data_dir=shared_data)
    assert {q.answers[0] for q in strategy} == {"yes", "no"}
