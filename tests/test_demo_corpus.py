"""Checks on the bundled demo corpus and its questions.

The demo corpus is what the explorer searches when no benchmark data is around, and its questions
replay the case studies of the four papers. These tests read the JSONL files with plain ``json`` so
that a broken corpus is reported here, by file and line, before any retriever or method touches it.
The BM25 checks use ``bm25s`` directly (no stemmer, English stopwords) so they hold for the corpus
itself rather than for one retriever implementation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from explorer.paths import DEMO_CORPUS_DIR

PASSAGES_PATH: Path = DEMO_CORPUS_DIR / "passages.jsonl"
QUESTIONS_PATH: Path = DEMO_CORPUS_DIR / "questions.jsonl"

MIN_PASSAGES = 150
MIN_QUESTIONS = 24
MIN_WORDS = 40
MAX_WORDS = 100
QUESTION_TYPES = {"multihop", "comparison", "yesno", "simple"}
CASE_STUDIES = {"dragin", "seakr", "blendfilter", "drrag"}
ID_PATTERN = re.compile(r"^demo-\d{4}$")
QUESTION_ID_PATTERN = re.compile(r"^dq-\d{2,}$")


def _read_jsonl(path: Path) -> list[dict]:
    """Parse one JSON object per non-blank line, failing with the file and line of any bad row."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{path}:{number}: not valid JSON ({exc.msg}); write one JSON object per line")
        if not isinstance(row, dict):
            pytest.fail(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def passages() -> list[dict]:
    return _read_jsonl(PASSAGES_PATH)


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return _read_jsonl(QUESTIONS_PATH)


@pytest.fixture(scope="module")
def by_id(passages: list[dict]) -> dict[str, dict]:
    return {p["id"]: p for p in passages}


def _context(passage: dict) -> str:
    """Title and text together, the way a passage is shown to the model and indexed."""
    return f"{passage['title']}: {passage['text']}"


def _gold_text(question: dict, by_id: dict[str, dict]) -> str:
    return "\n".join(_context(by_id[g]) for g in question["gold_passages"])


def _case(questions: list[dict], name: str) -> dict:
    matches = [q for q in questions if q.get("case_study") == name]
    assert len(matches) == 1, f"expected exactly one question for case study {name!r}, found {len(matches)}"
    return matches[0]


# --- passages -------------------------------------------------------------------------------------


def test_files_exist() -> None:
    assert PASSAGES_PATH.is_file(), f"missing {PASSAGES_PATH}"
    assert QUESTIONS_PATH.is_file(), f"missing {QUESTIONS_PATH}"
    assert (DEMO_CORPUS_DIR / "README.md").is_file(), "the demo corpus needs a README.md"


def test_enough_passages(passages: list[dict]) -> None:
    assert len(passages) >= MIN_PASSAGES, f"only {len(passages)} passages, need at least {MIN_PASSAGES}"


def test_passage_fields(passages: list[dict]) -> None:
    for row in passages:
        assert set(row) == {"id", "title", "text"}, f"{row.get('id')}: unexpected keys {sorted(row)}"
        assert ID_PATTERN.match(row["id"]), f"bad passage id {row['id']!r} (want demo-NNNN)"
        assert isinstance(row["title"], str) and row["title"].strip(), f"{row['id']}: empty title"
        assert isinstance(row["text"], str) and row["text"].strip(), f"{row['id']}: empty text"


def test_passage_ids_unique(passages: list[dict]) -> None:
    ids = [p["id"] for p in passages]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate passage ids: {duplicates}"


def test_passage_lengths(passages: list[dict]) -> None:
    wrong = [(p["id"], len(p["text"].split())) for p in passages
             if not MIN_WORDS <= len(p["text"].split()) <= MAX_WORDS]
    assert not wrong, f"passages outside {MIN_WORDS}-{MAX_WORDS} words: {wrong}"


def test_titles_unique(passages: list[dict]) -> None:
    titles = [p["title"] for p in passages]
    duplicates = sorted({t for t in titles if titles.count(t) > 1})
    assert not duplicates, f"titles used twice, which makes passages ambiguous in traces: {duplicates}"


# --- questions ------------------------------------------------------------------------------------


def test_enough_questions(questions: list[dict]) -> None:
    assert len(questions) >= MIN_QUESTIONS, f"only {len(questions)} questions, need at least {MIN_QUESTIONS}"


def test_question_fields(questions: list[dict]) -> None:
    required = {"id", "question", "answers", "type", "gold_passages", "case_study"}
    for q in questions:
        assert set(q) == required, f"{q.get('id')}: keys {sorted(q)} != {sorted(required)}"
        assert QUESTION_ID_PATTERN.match(q["id"]), f"bad question id {q['id']!r} (want dq-NN)"
        assert isinstance(q["question"], str) and q["question"].strip().endswith("?"), f"{q['id']}: not a question"
        assert q["type"] in QUESTION_TYPES, f"{q['id']}: type {q['type']!r} not in {sorted(QUESTION_TYPES)}"
        assert q["case_study"] is None or q["case_study"] in CASE_STUDIES, f"{q['id']}: bad case_study"
        assert isinstance(q["answers"], list) and q["answers"], f"{q['id']}: needs at least one answer"
        assert all(isinstance(a, str) and a.strip() for a in q["answers"]), f"{q['id']}: blank answer"
        assert isinstance(q["gold_passages"], list) and q["gold_passages"], f"{q['id']}: no gold passages"


def test_question_ids_unique(questions: list[dict]) -> None:
    ids = [q["id"] for q in questions]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate question ids: {duplicates}"


def test_gold_passages_exist(questions: list[dict], by_id: dict[str, dict]) -> None:
    missing = [(q["id"], g) for q in questions for g in q["gold_passages"] if g not in by_id]
    assert not missing, f"gold passages that are not in passages.jsonl: {missing}"


def test_yes_no_answers(questions: list[dict]) -> None:
    for q in questions:
        if q["type"] == "yesno":
            assert q["answers"] in (["yes"], ["no"]), f"{q['id']}: yes/no answers must be ['yes'] or ['no']"
        else:
            assert not {a.lower() for a in q["answers"]} & {"yes", "no"}, f"{q['id']}: yes/no answer on a {q['type']}"


def test_gold_passages_contain_an_answer(questions: list[dict], by_id: dict[str, dict]) -> None:
    unsupported = []
    for q in questions:
        if q["type"] == "yesno":
            continue
        gold = _gold_text(q, by_id).lower()
        if not any(a.lower() in gold for a in q["answers"]):
            unsupported.append(q["id"])
    assert not unsupported, f"questions whose gold passages state none of their answers: {unsupported}"


def test_multi_passage_questions_need_several_passages(questions: list[dict]) -> None:
    for q in questions:
        if q["type"] in {"multihop", "comparison"}:
            assert len(q["gold_passages"]) >= 2, f"{q['id']}: a {q['type']} question needs two or more gold passages"


def test_question_mix(questions: list[dict]) -> None:
    counts = {t: sum(q["type"] == t for q in questions) for t in QUESTION_TYPES}
    assert counts["multihop"] >= 12, counts
    assert counts["comparison"] >= 3, counts
    assert counts["yesno"] >= 3, counts
    assert counts["simple"] >= 3, counts


def test_all_case_studies_present(questions: list[dict]) -> None:
    present = {q["case_study"] for q in questions if q["case_study"]}
    assert present == CASE_STUDIES, f"missing case studies: {sorted(CASE_STUDIES - present)}"


def test_case_study_answers(questions: list[dict]) -> None:
    assert "3,677" in _case(questions, "dragin")["answers"]
    assert _case(questions, "seakr")["answers"][0] == "Alejandro Jodorowsky"
    assert _case(questions, "blendfilter")["answers"][0] == "Jillian Bell"
    assert _case(questions, "drrag")["answers"][0] == "Miquette Giraudy"


def test_drrag_second_hop_hides_the_first(questions: list[dict], by_id: dict[str, dict]) -> None:
    """The spouse passage must not name the album, so it is reachable only through the first passage."""
    gold = [by_id[g] for g in _case(questions, "drrag")["gold_passages"]]
    mentions = [p["id"] for p in gold if re.search(r"\bgreen\b", _context(p), re.IGNORECASE)]
    assert len(mentions) == 1, f"exactly one drrag gold passage should mention Green, got {mentions}"
    spouse = [p for p in gold if p["id"] not in mentions][0]
    assert "Steve Hillage" in spouse["text"] and "Miquette Giraudy" in spouse["text"]


def test_distractors_share_names(passages: list[dict], questions: list[dict]) -> None:
    """Each case study has non-gold passages that share its key name, so retrieval has to discriminate."""
    needles = {"dragin": "Lewiston", "seakr": "Saville", "blendfilter": "Workaholics", "drrag": "Green"}
    for case, needle in needles.items():
        gold = set(_case(questions, case)["gold_passages"])
        others = [p["id"] for p in passages if p["id"] not in gold and needle in _context(p)]
        assert len(others) >= 2, f"{case}: only {others} non-gold passages mention {needle!r}"


# --- BM25 -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bm25(passages: list[dict]):
    bm25s = pytest.importorskip("bm25s")
    retriever = bm25s.BM25()
    corpus_tokens = bm25s.tokenize([_context(p) for p in passages], lower=True, stopwords="en", stemmer=None,
                                   show_progress=False)
    retriever.index(corpus_tokens, show_progress=False)

    def search(query: str, k: int) -> list[str]:
        tokens = bm25s.tokenize([query], lower=True, stopwords="en", stemmer=None, show_progress=False)
        docs, _scores = retriever.retrieve(tokens, k=k, show_progress=False)
        return [passages[int(i)]["id"] for i in docs[0]]

    return search


def test_bm25_finds_the_arena_first(bm25, questions: list[dict], by_id: dict[str, dict]) -> None:
    case = _case(questions, "dragin")
    top = bm25("Lewiston Maineiacs arena seating capacity", 1)[0]
    assert top in case["gold_passages"], f"top hit {top} ({by_id[top]['title']}) is not a dragin gold passage"
    assert "3,677" in by_id[top]["text"], f"top hit {top} does not state the seating capacity"


@pytest.mark.parametrize("case_name", sorted(CASE_STUDIES))
def test_bm25_reaches_a_gold_passage(bm25, questions: list[dict], by_id: dict[str, dict], case_name: str) -> None:
    case = _case(questions, case_name)
    top5 = bm25(case["question"], 5)
    assert set(top5) & set(case["gold_passages"]), (
        f"{case_name}: no gold passage in the BM25 top 5 {[by_id[i]['title'] for i in top5]}"
    )


def test_the_dr_rag_case_needs_the_first_hop_to_find_the_second(demo_retriever) -> None:
    """DR-RAG's point: q alone misses the spouse's passage; q + the album passage finds it."""
    question = "Who is the spouse of the Green performer?"
    alone = [h.passage.id for h in demo_retriever.search(question, 5)]
    assert alone[0] == "demo-0093" and "demo-0094" not in alone
    album = demo_retriever.passage("demo-0093")
    second = [h.passage.id for h in demo_retriever.search(f"{question} {album.as_context()}", 6)
              if h.passage.id != "demo-0093"]
    assert "demo-0094" in second[:5]
