"""A user's own question files: every format detected or named, by path, with clear errors that fit the caller."""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

import pytest

from explorer.cli import build_parser, main
from explorer.errors import DatasetError
from explorer.eval.datasets import label_for, resolve_source, resolve_sources
from explorer.options import using
from explorer.retrieval.splitter import paragraph_passage_ids


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def as_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


HOTPOT = {"_id": "h1", "question": "Which arena?", "answer": "Colisee", "type": "bridge", "level": "hard",
          "supporting_facts": [["Maineiacs", 0], ["Colisee", 0]],
          "context": [["Maineiacs", ["The Maineiacs played at the Colisee."]],
                      ["Colisee", ["The Colisee seats 3,677."]], ["Other", ["Unrelated."]]]}
TWOWIKI = {"_id": "w1", "question": "Who is older?", "answer": "A", "type": "comparison",
           "supporting_facts": [["A", 0]], "context": [["A", ["A was born in 1900."]]],
           "evidences": [["A", "born", "1900"]]}
MUSIQUE = {"id": "2hop__1_2", "question": "Q?", "answer": "Main", "answer_aliases": ["Alias"],
           "paragraphs": [{"idx": 0, "title": "P", "paragraph_text": "Para P.", "is_supporting": True},
                          {"idx": 1, "title": "R", "paragraph_text": "Para R.", "is_supporting": False}],
           "question_decomposition": [{"id": 1, "paragraph_support_idx": 0}]}
NQ = {"question": "who?", "answers": ["X"], "ctxs": [{"title": "G", "text": "Gold.", "isgold": True}]}
STRATEGY = {"qid": "s1", "question": "Is it?", "answer": True, "facts": ["f"], "decomposition": ["d"]}
BAMBOOGLE = {"idx": 3, "question": "Who founded it?", "answer": "Ada"}
FLASHRAG = {"id": "test_7", "question": "when?", "golden_answers": ["1972", "in 1972"], "metadata": {"k": 1}}


@pytest.mark.parametrize("record, fmt", [
    (HOTPOT, "hotpotqa"), (TWOWIKI, "2wiki"), (MUSIQUE, "musique"), (NQ, "nq"), (STRATEGY, "strategyqa"),
    (BAMBOOGLE, "questions"), (FLASHRAG, "flashrag"),
])
@pytest.mark.parametrize("container", ["json", "jsonl", "jsonl.gz"])
def test_every_format_is_detected_by_path(tmp_path: Path, record: dict, fmt: str, container: str) -> None:
    path = tmp_path / f"mine.{container}"
    if container == "json":
        as_json(path, [record])
    elif container == "jsonl":
        jsonl(path, [record])
    else:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    source = resolve_source(str(path))
    assert (source.label, source.format, source.detected, source.named) == ("mine", fmt, True, False)
    [q] = source.load()
    assert q.dataset == "mine" and q.question == record["question"]
    assert source.describe()["file"] == str(path.resolve()) and source.describe()["format"] == fmt


def test_what_each_format_reads(tmp_path: Path) -> None:
    def one(record: dict, **kwargs) -> object:
        return resolve_source(str(jsonl(tmp_path / "q.jsonl", [record])), **kwargs).load()[0]

    q = one(HOTPOT)
    assert q.answers == ["Colisee"] and q.type == "bridge" and q.id == "h1"
    assert q.gold_passages == (paragraph_passage_ids("Maineiacs", "The Maineiacs played at the Colisee.")
                               + paragraph_passage_ids("Colisee", "The Colisee seats 3,677."))
    assert one(MUSIQUE).answers == ["Main", "Alias"] and one(MUSIQUE).type == "2hop"
    assert one(NQ).gold_passages == paragraph_passage_ids("G", "Gold.")
    strategy = one(STRATEGY)
    assert strategy.answers == ["yes"] and strategy.type == "yesno"
    bamboogle = one(BAMBOOGLE)
    assert (bamboogle.id, bamboogle.answers, bamboogle.gold_passages) == ("3", ["Ada"], [])
    flash = one(FLASHRAG)
    assert (flash.id, flash.answers, flash.extra["metadata"]) == ("test_7", ["1972", "in 1972"], {"k": 1})
    # question-only with answers as a list, a bare yes/no answer, and aliases
    multi = one({"question": "q?", "answers": ["a", "b"], "aliases": ["c"]})
    assert multi.answers == ["a", "b", "c"] and multi.id == "0"
    yes_no = one({"question": "q?", "answer": False})
    assert yes_no.answers == ["no"]
    # the format can be named: a question-only file read as HotpotQA takes HotpotQA's type field
    named = one({"question": "q?", "answer": "a", "type": "comparison"}, fmt="hotpotqa")
    assert named.type == "comparison"


def test_question_only_tables(tmp_path: Path) -> None:
    csv_file = tmp_path / "bamboogle.csv"
    csv_file.write_text('Question,Answer\n"Who wrote ""X"", the book?",Ada Lovelace\n\nWhen?,"[""1972"", ""72""]"\n',
                        encoding="utf-8")
    source = resolve_source(str(csv_file))
    assert source.format == "questions" and source.label == "bamboogle"
    first, second = source.load()
    assert first.question == 'Who wrote "X", the book?' and first.answers == ["Ada Lovelace"]
    assert second.answers == ["1972", "72"] and (first.id, second.id) == ("0", "1")
    tsv = tmp_path / "qs.tsv"
    tsv.write_text("id\tquestion\tanswers\nq9\tWhy?\tbecause\n", encoding="utf-8")
    [q] = resolve_source(str(tsv)).load()
    assert (q.id, q.question, q.answers) == ("q9", "Why?", ["because"])


def test_several_files_names_and_labels(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    a = jsonl(tmp_path / "a" / "test.jsonl", [BAMBOOGLE])
    b = jsonl(tmp_path / "b.jsonl", [FLASHRAG])
    sources = resolve_sources([str(a), f"flash={b}"])
    assert [(s.label, s.format) for s in sources] == [("test", "questions"), ("flash", "flashrag")]
    assert sources[1].spec == f"flash={b.resolve()}" and sources[0].spec == str(a.resolve())
    assert resolve_source(sources[1].spec) == sources[1]  # a spec names the source again
    (tmp_path / "c").mkdir()
    other = jsonl(tmp_path / "c" / "test.jsonl", [BAMBOOGLE])
    with using({"dataset": "--dataset"}):
        with pytest.raises(DatasetError) as info:
            resolve_sources([str(a), str(other)])
    assert "both named 'test'" in str(info.value) and "--dataset test_a=" in str(info.value)
    assert label_for(Path("x/my data.jsonl.gz")) == "my_data"


def test_a_file_keeps_its_name_in_the_evaluation_not_a_benchmark_name(tmp_path: Path) -> None:
    source = resolve_source(str(jsonl(tmp_path / "bamboogle.jsonl", [BAMBOOGLE])))
    assert source.load()[0].gold()["dataset"] == "bamboogle"


# --- errors: file, line, fix; options only where they exist -----------------------------------------


def _message(spec: str, **kwargs) -> str:
    with pytest.raises(DatasetError) as info:
        source = resolve_source(spec, **kwargs)
        source.load()
    return str(info.value)


def test_a_record_without_a_question_names_file_line_and_fix(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "my.jsonl", [BAMBOOGLE, BAMBOOGLE | {"idx": 4}, {"idx": 5, "answer": "x"}])
    with using({"dataset_format": "--format"}):
        message = _message(str(path))
    assert f"line 3 of {path} has no 'question' field" in message
    assert "read as question-only, the format detected from the first record" in message
    assert "--format" not in message  # no format reads a record without a question: none is suggested
    # a record another format reads: that format is suggested, and it reads the file
    flash = jsonl(tmp_path / "flash.jsonl", [FLASHRAG, {"id": "t8", "question": "who?", "answer": "Ada"}])
    with using({"dataset_format": "--format"}):
        message = _message(str(flash))
    assert "line 2 of" in message and "has no 'golden_answers' field (read as FlashRAG" in message
    assert "or read the file as question-only, which reads this record: --format questions" in message
    assert [q.answers for q in resolve_source(str(flash), fmt="questions").load()] == [["1972", "in 1972"], ["Ada"]]
    # in Python, the keyword is named instead
    assert "fmt=questions" in _message(str(flash)) and "--format" not in _message(str(flash))
    # where the caller has no format option, none is suggested
    with using({}):
        assert "read the file as" not in _message(str(flash))


@pytest.mark.parametrize("content, expected", [
    ('{"question": "a?", "answer": "x"}\n{"question": \n', "line 2 of {path} is not valid JSON"),
    ('{"question": "a?"}\n', "line 1 of {path} has a 'question' field but no 'answer' (nor 'answers') field"),
    ('{"question": "a?", "answer": "x"}\n{"question": "b?"}\n', "line 2 of {path} has no 'answer' field"),
    ('{"question": "", "answer": "x"}\n', "line 1 of {path} has a 'question' that is not a non-empty string"),
    ('{"question": "a?", "answer": ""}\n', "line 1 of {path} has an empty 'answer'"),
    ('{"query": "a?", "response": "x"}\n', "cannot tell the question format of {path} from its first record "
                                           "(line 1 of {path}: fields query, response)"),
    ('["a", "b"]\n', "cannot tell the question format"),
    ('{"question": "a?", "answer": "x"}\n["a"]\n', "line 2 of {path} is a JSON list, not an object"),
    ('{"id": 1, "question": "a?", "answer": "x"}\n{"id": 1, "question": "b?", "answer": "y"}\n',
     "question id '1' appears twice in {path} (questions 1 and 2)"),
])
def test_malformed_jsonl(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    message = _message(str(path))
    assert expected.format(path=path.resolve()) in message or expected.format(path=path) in message, message
    assert "Fix:" in message


def test_malformed_json_and_tables(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('[{"question": "a?", "answer": "x"},\n {"question": ', encoding="utf-8")
    assert f"line 2 of {broken} is not valid JSON" in _message(str(broken))
    record = as_json(tmp_path / "r.json", [HOTPOT, {**HOTPOT, "_id": "h2", "supporting_facts": [["T", "zero"]]}])
    assert f"record 2 of {record.resolve()} has a supporting_facts[0]" in _message(str(record))
    obj = as_json(tmp_path / "o.json", {"question": "a?"})
    assert "holds a JSON dict, not a list of questions" in _message(str(obj))
    table = tmp_path / "t.csv"
    table.write_text("query,answer\nx,y\n", encoding="utf-8")
    assert f"line 1 of {table.resolve()} (the header) has no 'question' column (found: query, answer)" in \
        _message(str(table))
    table.write_text("question,answer\n\"a?\",x,extra\n", encoding="utf-8")
    assert "line 2 of" in _message(str(table)) and "3 cells, the header has 2" in _message(str(table))
    unknown = tmp_path / "q.parquet"
    unknown.write_text("x", encoding="utf-8")
    assert "cannot tell how" in _message(str(unknown)) and ".jsonl" in _message(str(unknown))
    latin = tmp_path / "latin.jsonl"
    good = json.dumps({"question": "tea?", "answer": "x" * 40}) + "\n"
    latin.write_bytes((good * 300 + '{"question": "caf\xe9?", "answer": "x"}\n').encode("latin-1"))
    assert f"line 301 of {latin.resolve()} is not UTF-8" in _message(str(latin))  # its line, not the read-ahead's


def test_wrong_names_paths_and_formats(tmp_path: Path) -> None:
    assert "neither a dataset name nor a file" in _message("squad")
    assert "use one of hotpotqa" in _message("squad")
    assert f"question file not found: {tmp_path / 'nope.jsonl'}" in _message(str(tmp_path / "nope.jsonl"))
    assert "question file a folder" in _message(str(tmp_path) + "/")
    path = jsonl(tmp_path / "q.jsonl", [BAMBOOGLE])
    assert "unknown question format 'parquet'" in _message(str(path), fmt="parquet")
    assert "the musique question file" in _message("musique", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="only benchmark names"):
        resolve_sources(["hotpotqa"], fmt="questions", data_dir=tmp_path / "nothing-needed")


# --- every command that reads questions suggests only its own options ----------------------------


def _options_of(argv: list[str]) -> set[str]:
    parser = build_parser()
    sub: argparse.ArgumentParser = parser
    for word in argv:
        actions = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or word not in actions[0].choices:
            break
        sub = actions[0].choices[word]
    return {s for a in sub._actions for s in a.option_strings}


@pytest.mark.parametrize("command", [
    ["eval", "--methods", "wo"],
    ["sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,0.2"],
    ["retrieval-metrics", "--methods", "bm25"],
    ["train-classifier"],
    ["corpus", "build"],
])
def test_each_command_suggests_only_options_it_has(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   command: list[str]) -> None:
    bad = jsonl(tmp_path / "my.jsonl", [BAMBOOGLE, {"idx": 9, "answer": "no question"}])
    out = ["--out", str(tmp_path / "out")] if command[0] in ("corpus", "retrieval-metrics") else []
    db = ["--db", str(tmp_path / "runs.sqlite")] if command[0] in ("eval", "sweep") else []
    for argv in ([*command, "--dataset", str(bad), *out, *db],
                 [*command, "--dataset", "squad", *out, *db],
                 [*command, "--dataset", f"{bad},x={bad}", *out, *db]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err
        suggested = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", err))
        assert suggested <= _options_of(command), (argv, err)
        assert "fmt=" not in err and "path=" not in err and "data_dir=" not in err


def test_the_app_loads_a_question_file_as_a_source(tmp_path: Path) -> None:
    from explorer.ui.runs import questions

    table = tmp_path / "bamboogle.csv"
    table.write_text("Question,Answer\nWho founded the zorblax guild?,Ada Quill\n", encoding="utf-8")
    mine: questions.Loaded = {}
    key = questions.load_file(table, loaded=mine)
    assert key == "File: bamboogle.csv (question-only, 1 questions)" and key in questions.sources(mine)
    assert key not in questions.sources() and questions.choices(key) == []  # another browser does not see it
    [(label, pick)] = questions.choices(key, mine)
    q = questions.find(key, pick, mine)
    assert label == "Who founded the zorblax guild?" and questions.gold_of(q)["answers"] == ["Ada Quill"]
    with pytest.raises(DatasetError) as info:
        questions.load_file(table, "strategyqa")
    message = str(info.value)
    assert f"line 2 of {table}" in message and "the Format menu" in message
    assert "--format" not in message and "fmt=" not in message


def test_a_record_without_an_answer_is_left_out_named_and_counted(tmp_path: Path, caplog) -> None:
    """One ``"golden_answers": []`` among 849 questions: the first 15 that can be scored are read, the record is
    named with where it is, and the evaluation's description counts it; the strict reading says how to fix it."""
    import logging

    from explorer.eval.question_files import read_questions

    rows = [FLASHRAG | {"id": f"q{i}", "golden_answers": [f"a{i}"]} for i in range(849)]
    rows[3]["golden_answers"] = []
    path = as_json(tmp_path / "nq_test.json", rows)
    with using({"dataset_format": "--format", "limit": "--limit"}), caplog.at_level(logging.WARNING):
        source = resolve_source(str(path))
        questions = source.load(15)
    assert len(questions) == 15 and "q3" not in [q.id for q in questions] and questions[-1].id == "q15"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "1 record(s) without an answer left out" in warning
    assert f"record 4 of {path.resolve()} has an empty 'golden_answers'" in warning
    assert source.describe()["skipped"] == 1
    from explorer.eval.report import _dataset_text

    assert "nq_test: first 15 (1 record(s) without an answer left out) of" in _dataset_text(
        "nq_test", {**source.describe(), "limit": 15, "asked": 15})
    assert source.load(3) and source.describe()["skipped"] == 0  # counted for what was read, each time
    with using({"dataset_format": "--format"}), pytest.raises(DatasetError) as strict:
        list(read_questions(path.resolve(), "flashrag"))
    assert f"record 4 of {path.resolve()} has an empty 'golden_answers', so it cannot be scored" in str(strict.value)
    assert "--format" not in str(strict.value)  # no format would read an empty answer: none is suggested
    lone = as_json(tmp_path / "none.json", [rows[3]])
    assert "no record of" in _message(str(lone)) and "has an empty 'golden_answers'" in _message(str(lone))


def test_a_title_map_given_as_questions_is_named_a_corpus_with_the_corpus_option(tmp_path: Path) -> None:
    path = as_json(tmp_path / "hotpot_corpus.json", {"Colisee": ["The Colisee is an arena.", "It seats 3,677."],
                                                     "Maineiacs": ["A hockey team."]})
    with using({"dataset": "--dataset", "corpus": "--corpus"}):
        message = _message(str(path))
    assert f"{path.resolve()} is a corpus (passage) file, not a question file" in message
    assert "2 titles to their text ({title: [sentence, ...]}, first title 'Colisee')" in message
    assert f"--corpus {path.resolve()}, and the questions with --dataset QUESTION_FILE" in message
