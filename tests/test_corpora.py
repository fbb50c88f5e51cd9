"""Corpus readers and the passage splitter: every format from small files written here, the real
benchmark files when they are around, and malformed input reported by file and line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from explorer.errors import CorpusError
from explorer.retrieval.corpora import fingerprint_passages, load_corpus
from explorer.retrieval.formats import split_contents
from explorer.retrieval.splitter import (
    content_id,
    join_sentences,
    paragraph_passage_ids,
    piece_ranges,
    sentence_spans,
    split_text,
)


def words(n: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{i}" for i in range(n))


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- splitter -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 99, 100, 101, 199, 200, 201, 1234])
def test_split_text_respects_the_word_limit_and_keeps_every_word(n: int) -> None:
    text = words(n)
    pieces = split_text(text)
    assert all(len(p.split()) <= 100 for p in pieces)
    assert len(pieces) == -(-n // 100)
    assert " ".join(pieces).split() == text.split()
    sizes = [len(p.split()) for p in pieces]
    assert max(sizes) - min(sizes) <= 1, f"pieces should be balanced, got {sizes}"


def test_split_text_keeps_a_short_text_as_written() -> None:
    assert split_text("  Two  spaces\tand a tab. ") == ["Two  spaces\tand a tab."]
    assert split_text("   ") == []


def test_piece_ranges_cover_the_text() -> None:
    assert piece_ranges(130) == [(0, 65), (65, 130)]
    assert piece_ranges(0) == []
    with pytest.raises(ValueError):
        piece_ranges(10, 0)


def test_long_document_keeps_its_title_on_every_piece_with_stable_ids(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "long", "title": "The Title", "text": words(250)},
                                               {"id": "short", "title": "Other", "text": words(30)}])
    corpus = load_corpus(path)
    assert [p.id for p in corpus.passages] == ["long#1", "long#2", "long#3", "short"]
    assert {p.title for p in corpus.passages[:3]} == {"The Title"}
    again = load_corpus(path)
    assert [p.id for p in again.passages] == [p.id for p in corpus.passages]
    assert again.fingerprint == corpus.fingerprint
    assert corpus.passage("long#2").text.split()[0] == "w84"  # 250 words -> 84 + 83 + 83
    assert corpus.passage("missing") is None


def test_content_id_ignores_whitespace_but_not_words() -> None:
    assert content_id("A  title", "some\ntext ") == content_id("A title", "some text")
    assert content_id("A title", "some text") != content_id("A title", "some text.")
    assert content_id("A", "b c") != content_id("A b", "c")


def test_paragraph_passage_ids_match_the_ids_of_the_loaded_paragraph(tmp_path: Path) -> None:
    text = words(150)
    corpus = load_corpus(write_jsonl(tmp_path / "p.jsonl", [{"title": "T", "text": text}]))
    assert [p.id for p in corpus.passages] == paragraph_passage_ids("T", text)
    # a sentence in the second half selects only the second piece
    assert paragraph_passage_ids("T", text, word_spans=[(120, 130)]) == [corpus.passages[1].id]


def test_join_sentences_handles_both_spacing_conventions() -> None:
    hotpot = ["Alpha is a town.", " It lies on a river."]
    wiki2 = ["Alpha is a town.", "It lies on a river."]
    assert join_sentences(hotpot) == join_sentences(wiki2) == "Alpha is a town. It lies on a river."
    assert sentence_spans(wiki2) == [(0, 4), (4, 9)]


def test_flashrag_contents_title_parsing() -> None:
    text = "Evan Morris was a lobbyist."
    assert split_contents(f'"Evan Morris"\n{text}') == ("Evan Morris", text)
    assert split_contents("Plain title\nbody") == ("Plain title", "body")
    assert split_contents("no title line") == ("", "no title line")


# --- each format from a small file ----------------------------------------------------------------


def test_dpr_tsv(tmp_path: Path) -> None:
    path = tmp_path / "psgs_w100.tsv"
    path.write_text('id\ttext\ttitle\n1\t"Aaron ( or ; ""Aharon"") is a prophet."\tAaron\n2\tSecond passage.\tBeta\n',
                    encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.format == "dpr"
    assert [(p.id, p.title, p.text) for p in corpus.passages] == [
        ("1", "Aaron", 'Aaron ( or ; "Aharon") is a prophet.'), ("2", "Beta", "Second passage.")]


def test_dpr_tsv_gzipped_with_columns_in_another_order(tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("title\tid\ttext\nGamma\tg1\tGamma rays are energetic.\n")
    corpus = load_corpus(path)
    assert (corpus.passages[0].id, corpus.passages[0].title) == ("g1", "Gamma")


def test_jsonl_plain_and_flashrag(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"id": "a", "title": "Alpha", "text": "Alpha text."},
        {"id": 7, "contents": '"Seven"\nSeven text.'},
        {"title": "No id", "text": "Gets a content id."},
    ])
    corpus = load_corpus(path)
    assert corpus.format == "passages"
    assert [(p.id, p.title) for p in corpus.passages] == [("a", "Alpha"), ("7", "Seven"),
                                                         (content_id("No id", "Gets a content id."), "No id")]


def test_hotpotqa_format_dedupes_paragraphs_shared_by_questions(tmp_path: Path) -> None:
    shared = ["Paris", ["Paris is the capital of France.", " It lies on the Seine."]]
    rows = [{"_id": "q1", "question": "?", "answer": "x", "supporting_facts": [["Paris", 0]],
             "context": [shared, ["Lyon", ["Lyon is a city."]]]},
            {"_id": "q2", "question": "?", "answer": "y", "supporting_facts": [], "context": [shared]}]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.format == "hotpotqa"
    assert corpus.documents == 2
    assert [p.text for p in corpus.passages] == ["Paris is the capital of France. It lies on the Seine.",
                                                 "Lyon is a city."]


def test_2wiki_official_and_corpus_formats(tmp_path: Path) -> None:
    official = tmp_path / "dev.json"
    official.write_text(json.dumps([{"_id": "x", "type": "compositional", "question": "?", "answer": "a",
                                     "evidences": [], "supporting_facts": [["T", 0]],
                                     "context": [["T", ["First.", "Second."]]]}]), encoding="utf-8")
    corpus_file = tmp_path / "corpus.json"
    corpus_file.write_text(json.dumps([{"title": "T", "text": "First. Second."}]), encoding="utf-8")
    a, b = load_corpus(official), load_corpus(corpus_file)
    assert (a.format, b.format) == ("2wiki", "passages")
    assert a.passages == b.passages, "the same paragraph must get the same id from either file"


def test_musique_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "musique_ans_dev.jsonl", [
        {"id": "2hop__1_2", "question": "?", "answer": "a", "paragraphs": [
            {"idx": 0, "title": "One", "paragraph_text": "First paragraph.", "is_supporting": True},
            {"idx": 1, "title": "Two", "paragraph_text": words(120), "is_supporting": False}]}])
    corpus = load_corpus(path)
    assert corpus.format == "musique"
    assert [p.title for p in corpus.passages] == ["One", "Two", "Two"]


def test_nq_oracle_gz(tmp_path: Path) -> None:
    path = tmp_path / "nq-open-oracle.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"question": "q", "answers": ["a"], "ctxs": [{"title": "N", "text": "Nq text.",
                                                                          "isgold": True}]}) + "\n")
    corpus = load_corpus(path)
    assert (corpus.format, corpus.passages[0].title, corpus.passages[0].text) == ("nq", "N", "Nq text.")


def test_txt_folder(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "Alpha Centauri.txt").write_text("A star system.\n", encoding="utf-8")
    (folder / "sub" / "Beta.txt").write_text(words(150), encoding="utf-8")
    (folder / "empty.txt").write_text("  \n", encoding="utf-8")
    (folder / "notes.md").write_text("ignored", encoding="utf-8")
    corpus = load_corpus(folder)
    assert corpus.format == "txt"
    assert [(p.id, p.title) for p in corpus.passages] == [("Alpha Centauri", "Alpha Centauri"),
                                                         ("sub/Beta#1", "Beta"), ("sub/Beta#2", "Beta")]
    assert corpus.skipped == 1 and corpus.documents == 3


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "odd.jsonl", [{"id": "1", "text": "own text", "ctxs": [{"title": "C",
                                                                                         "text": "context text"}]}])
    detected = load_corpus(path)
    assert (detected.format, detected.passages[0].text) == ("nq", "context text")
    forced = load_corpus(path, fmt="passages")
    assert (forced.format, forced.passages[0].id, forced.passages[0].text) == ("passages", "1", "own text")
    with pytest.raises(CorpusError, match="unknown corpus format"):
        load_corpus(path, fmt="parquet")
    with pytest.raises(CorpusError, match="cannot be read from a JSON file"):
        load_corpus(path, fmt="dpr")


def test_fingerprint_changes_with_content(tmp_path: Path) -> None:
    a = load_corpus(write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "title": "T", "text": "one two"}]))
    b = load_corpus(write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "title": "T", "text": "one three"}]))
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == fingerprint_passages(a.passages)


def test_demo_corpus_loads_unchanged() -> None:
    corpus = load_corpus("demo")
    raw = [json.loads(line) for line in corpus.source.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [(p.id, p.title, p.text) for p in corpus.passages] == [(r["id"], r["title"], r["text"]) for r in raw]


# --- malformed input ------------------------------------------------------------------------------


def _error(path: Path, **kwargs) -> str:
    with pytest.raises(CorpusError) as info:
        load_corpus(path, **kwargs)
    return str(info.value)


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "1", "text": "fine"}\n\n{"id": "2", "text": oops}\n', encoding="utf-8")
    message = _error(path)
    assert f"{path}:3" in message and "not valid JSON" in message


def test_missing_text_names_the_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "ok"}, {"id": "2", "title": "no text"}])
    message = _error(path, fmt="passages")
    assert f"{path}:2" in message and "'text'" in message


def test_wrong_type_names_the_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "ok"}, {"id": "2", "text": ["a", "list"]}])
    message = _error(path)
    assert f"{path}:2" in message and "should be str" in message


def test_json_array_item_and_path_are_named(tmp_path: Path) -> None:
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([{"context": [["T", ["ok"]]]}, {"context": [["T", ["ok"]], ["U", "not a list"]]}]),
                    encoding="utf-8")
    message = _error(path)
    assert "[item 1]" in message and ".context[1]" in message


def test_musique_paragraph_without_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [{"paragraphs": [{"title": "A", "text": "wrong key"}]}])
    message = _error(path)
    assert f"{path}:1" in message and "paragraph_text" in message and ".paragraphs[0]" in message


def test_tsv_missing_column_and_ragged_row(tmp_path: Path) -> None:
    header_only = tmp_path / "a.tsv"
    header_only.write_text("id\ttext\n1\thello\n", encoding="utf-8")
    assert "lacks column(s) title" in _error(header_only)
    ragged = tmp_path / "b.tsv"
    ragged.write_text("id\ttext\ttitle\n1\thello\tT\n2\tonly two\n", encoding="utf-8")
    message = _error(ragged)
    assert f"{ragged}:3" in message and "found 2" in message


def test_duplicate_id_with_other_content(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "x", "text": "one"}, {"id": "y", "text": "two"},
                                              {"id": "x", "text": "three"}])
    message = _error(path)
    assert f"{path}:3" in message and f"{path}:1" in message and "'x'" in message
    # the same record twice is a harmless duplicate
    same = write_jsonl(tmp_path / "s.jsonl", [{"id": "x", "text": "one"}, {"id": "x", "text": "one"}])
    assert len(load_corpus(same)) == 1


def test_not_utf8_and_truncated_gzip(tmp_path: Path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "1", "text": "caf\xe9"}\n')
    assert "not UTF-8" in _error(latin)
    truncated = tmp_path / "t.jsonl.gz"
    lines = "".join(json.dumps({"id": str(i), "text": words(50, stem=f"t{i}_")}) + "\n" for i in range(200))
    whole = gzip.compress(lines.encode())
    truncated.write_bytes(whole[: len(whole) // 2])
    assert "cannot read the file" in _error(truncated)


def test_unknown_extension_and_missing_path(tmp_path: Path) -> None:
    odd = tmp_path / "corpus.parquet"
    odd.write_bytes(b"PAR1")
    assert "cannot tell the format" in _error(odd)
    assert "no corpus named" in _error(tmp_path / "nowhere.jsonl")


def test_empty_inputs(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert "no .txt files" in _error(tmp_path / "empty")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n", encoding="utf-8")
    assert "no records" in _error(blank)
    no_words = write_jsonl(tmp_path / "nw.jsonl", [{"id": "1", "text": "  "}])
    assert "no text to search" in _error(no_words)


def test_json_records_belong_in_a_top_level_list(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text('{"data": [{"id": "1", "text": "x"}]}', encoding="utf-8")
    message = _error(path)
    assert "entry 1, title 'data'" in message and "JSON list at the top level" in message
    path.write_text('"just a string"', encoding="utf-8")
    assert "JSON list" in _error(path)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"text": "a"},\n {"text": ', encoding="utf-8")
    assert f"{broken}:2" in _error(broken)


# --- the real benchmark files ---------------------------------------------------------------------


def _distinct_paragraphs(pairs) -> int:
    return len({(" ".join(t.split()), " ".join(x.split())) for t, x in pairs})


@pytest.mark.shared_data
def test_real_hotpotqa_distractor(shared_data: Path) -> None:
    path = shared_data / "hotpotqa/dev_distractor_100.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    corpus = load_corpus(path)
    assert corpus.format == "hotpotqa"
    assert corpus.documents == _distinct_paragraphs((t, join_sentences(s)) for q in raw for t, s in q["context"])
    assert all(len(p.text.split()) <= 100 for p in corpus.passages)
    gold = raw[0]["supporting_facts"][0][0]
    assert any(p.title == gold for p in corpus.passages)


@pytest.mark.shared_data
def test_real_musique(shared_data: Path) -> None:
    path = shared_data / "musique/dev_100.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    corpus = load_corpus(path)
    assert corpus.format == "musique"
    assert corpus.documents == _distinct_paragraphs((p["title"], p["paragraph_text"]) for q in raw
                                                    for p in q["paragraphs"])
    assert len(corpus) > corpus.documents, "some MuSiQue paragraphs are longer than 100 words"


@pytest.mark.shared_data
def test_real_2wiki_corpus_and_official_file_agree(shared_data: Path) -> None:
    corpus = load_corpus(shared_data / "2wikimultihopqa/corpus_6119.json")
    assert corpus.format == "passages" and corpus.documents == 6119
    official = load_corpus(shared_data / "2wikimultihopqa/dev_2_with_context.json")
    assert official.format == "2wiki"
    missing = [p.id for p in official.passages if corpus.passage(p.id) != p]
    assert not missing, f"paragraphs of dev_2_with_context.json not found in corpus_6119.json: {missing}"


@pytest.mark.shared_data
def test_real_nq_oracle(shared_data: Path) -> None:
    path = shared_data / "nq/nq_open_dev_oracle_2655.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    corpus = load_corpus(path)
    assert corpus.format == "nq"
    assert corpus.documents == _distinct_paragraphs((c["title"], c["text"]) for r in rows for c in r["ctxs"])


@pytest.mark.shared_data
def test_real_dpr_sample(shared_data: Path) -> None:
    corpus = load_corpus(shared_data / "wikipedia/dpr_sample_1000.jsonl")
    assert corpus.format == "passages"
    assert [p.id for p in corpus.passages] == [str(i) for i in range(1000)]
    assert corpus.passages[0].title == "Evan Morris"
    assert not any(p.title.startswith('"') for p in corpus.passages)
