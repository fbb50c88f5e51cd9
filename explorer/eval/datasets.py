"""Benchmark question sets as one record type, :class:`Question`, whatever file they come from.

Each dataset reads every layout it ships in (the official JSON with paragraphs, question-only
JSON lines, the samples under ../shared/data) by looking at the fields of each record, so a user
can point ``path=`` at the full official file they downloaded. JSON lines are streamed, so
``limit`` stops reading early on files of any size.

Gold passages are ids in the benchmark corpus (:mod:`explorer.retrieval.benchmark`), computed
with the same function that gives the corpus its ids
(:func:`explorer.retrieval.splitter.paragraph_passage_ids`), so the two cannot disagree:

- HotpotQA / 2WikiMultihopQA: the pieces of each ``supporting_facts`` paragraph that hold a
  supporting sentence, in the order the facts are listed;
- MuSiQue: the ``is_supporting`` paragraphs, in the order of the question decomposition (hop order);
- NQ-open oracle: its ``ctxs`` marked ``isgold``;
- demo: the demo corpus ids; StrategyQA and question-only files: none (empty list).

Questions without an id of their own are numbered by their 0-based position in the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError, DatasetError
from explorer.paths import DEMO_CORPUS_DIR, shared_data_dir
from explorer.retrieval.formats import container_of, iter_records
from explorer.retrieval.splitter import join_sentences, paragraph_passage_ids, sentence_spans


@dataclass
class Question:
    """One benchmark question: answers hold the main answer first, then accepted aliases."""

    id: str
    question: str
    answers: list[str]
    type: str
    dataset: str
    gold_passages: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        return self.answers[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def gold(self) -> dict[str, Any]:
        """What a trace records about the right answer (``trace.gold``), the same from the app and from eval."""
        return {"dataset": self.dataset, "id": self.id, "type": self.type, "answers": list(self.answers),
                "gold_passages": list(self.gold_passages)}


DATASETS = ("hotpotqa", "musique", "2wiki", "nq", "strategyqa", "demo")
DEFAULT_FILES = {
    "hotpotqa": "hotpotqa/dev_distractor_100.json",
    "musique": "musique/dev_100.json",
    "2wiki": "2wikimultihopqa/dev_500_questions.jsonl",
    "nq": "nq/nq_open_dev_oracle_2655.jsonl.gz",
    "strategyqa": "strategyqa/dev_229.json",
}
ALIASES = {"hotpot": "hotpotqa", "2wikimultihopqa": "2wiki", "nq-open": "nq", "nq_open": "nq", "strategy": "strategyqa"}


class _Bad(Exception):
    """A record-level problem; turned into a DatasetError with the record's place in the file."""


# --- field helpers --------------------------------------------------------------------------------


def _str(record: dict, key: str) -> str:
    if key not in record:
        raise _Bad(f"missing key '{key}'")
    value = record[key]
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"'{key}' should be a non-empty string, found {type(value).__name__} {value!r:.40}")
    return value.strip()


def _answers(*values: Any) -> list[str]:
    """Strings and lists of strings flattened into distinct non-blank answers, order kept."""
    out: list[str] = []
    for value in values:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, bool) or isinstance(item, (int, float)):
                item = str(item)
            if not isinstance(item, str):
                raise _Bad(f"an answer should be a string, found {type(item).__name__}")
            item = item.strip()
            if item and item not in out:
                out.append(item)
    if not out:
        raise _Bad("no answer")
    return out


def _answer_field(record: dict) -> list[str]:
    for key in ("answers", "answer"):
        if key in record:
            return _answers(record[key])
    raise _Bad("missing key 'answer' (or 'answers')")


def _qid(record: dict, index: int) -> str:
    for key in ("id", "_id", "qid", "idx"):
        value = record.get(key)
        if value is not None and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return str(index)


# --- per-dataset record parsers -------------------------------------------------------------------


def _supporting_gold(record: dict) -> tuple[list[str], list[str]]:
    """HotpotQA / 2Wiki gold ids from supporting_facts and context, and titles absent from context."""
    facts = record.get("supporting_facts")
    context = record.get("context")
    if facts is None or context is None:
        return [], []
    if isinstance(context, dict):  # Hugging Face layout
        context = [list(pair) for pair in zip(context.get("title", []), context.get("sentences", []), strict=False)]
        if isinstance(facts, dict):
            facts = [list(pair) for pair in zip(facts.get("title", []), facts.get("sent_id", []), strict=False)]
    if not isinstance(context, list) or not isinstance(facts, list):
        raise _Bad("'context' and 'supporting_facts' should be lists")
    paragraphs: dict[str, list[str]] = {}
    for i, item in enumerate(context):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
                and all(isinstance(s, str) for s in item[1])):
            raise _Bad(f"context[{i}] should be [title, [sentence, ...]]")
        paragraphs.setdefault(item[0], item[1])
    wanted: dict[str, list[int]] = {}
    for i, fact in enumerate(facts):
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)
                and isinstance(fact[1], int) and not isinstance(fact[1], bool)):
            raise _Bad(f"supporting_facts[{i}] should be [title, sentence index]")
        wanted.setdefault(fact[0], []).append(fact[1])
    gold, missing = [], []
    for title, indices in wanted.items():
        sentences = paragraphs.get(title)
        if sentences is None:
            missing.append(title)
            continue
        spans = sentence_spans(sentences)
        chosen = [spans[i] for i in indices if 0 <= i < len(spans)] or spans  # bad index: the whole paragraph
        for pid in paragraph_passage_ids(title, join_sentences(sentences), word_spans=chosen):
            if pid not in gold:
                gold.append(pid)
    return gold, missing


def _hotpot_like(dataset: str) -> Callable[[dict, int], Question]:
    def parse(record: dict, index: int) -> Question:
        gold, missing = _supporting_gold(record)
        extra: dict[str, Any] = {}
        for key in ("level", "supporting_facts", "evidences", "entity_ids"):
            if key in record:
                extra[key] = record[key]
        if missing:
            extra["gold_titles_not_in_context"] = missing
        aliases = record.get("answer_aliases", [])
        return Question(id=_qid(record, index), question=_str(record, "question"),
                        answers=_answers(_answer_field(record), aliases),
                        type=str(record.get("type") or "unknown"), dataset=dataset, gold_passages=gold, extra=extra)

    return parse


def _musique(record: dict, index: int) -> Question:
    gold: list[str] = []
    paragraphs = record.get("paragraphs")
    decomposition = record.get("question_decomposition") or []
    if paragraphs is not None:
        if not isinstance(paragraphs, list):
            raise _Bad("'paragraphs' should be a list")
        supporting = []
        for i, para in enumerate(paragraphs):
            if not isinstance(para, dict) or not isinstance(para.get("title"), str) \
                    or not isinstance(para.get("paragraph_text"), str):
                raise _Bad(f"paragraphs[{i}] should have string 'title' and 'paragraph_text'")
            if para.get("is_supporting") is True:
                supporting.append(i)
        hop_order = [step.get("paragraph_support_idx") for step in decomposition if isinstance(step, dict)]
        ordered = [i for i in hop_order if i in supporting] + [i for i in supporting if i not in hop_order]
        for i in dict.fromkeys(ordered):
            para = paragraphs[i]
            gold.extend(pid for pid in paragraph_passage_ids(para["title"], para["paragraph_text"]) if pid not in gold)
    qid = _qid(record, index)
    hops = re.match(r"(\d)hop", qid)
    qtype = f"{hops.group(1)}hop" if hops else (f"{len(decomposition)}hop" if decomposition else "unknown")
    extra = {key: record[key] for key in ("question_decomposition", "answerable") if key in record}
    return Question(id=qid, question=_str(record, "question"),
                    answers=_answers(_answer_field(record), record.get("answer_aliases", [])),
                    type=qtype, dataset="musique", gold_passages=gold, extra=extra)


def _nq(record: dict, index: int) -> Question:
    gold: list[str] = []
    ctxs = record.get("ctxs")
    if ctxs is not None:
        if not isinstance(ctxs, list):
            raise _Bad("'ctxs' should be a list")
        for i, ctx in enumerate(ctxs):
            if not (isinstance(ctx, dict) and isinstance(ctx.get("title"), str) and isinstance(ctx.get("text"), str)):
                raise _Bad(f"ctxs[{i}] should have string 'title' and 'text'")
            if ctx.get("isgold") is True:
                gold.extend(pid for pid in paragraph_passage_ids(ctx["title"], ctx["text"]) if pid not in gold)
    return Question(id=_qid(record, index), question=_str(record, "question"), answers=_answer_field(record),
                    type="simple", dataset="nq", gold_passages=gold)


def _strategyqa(record: dict, index: int) -> Question:
    if "answer" not in record:
        raise _Bad("missing key 'answer' (the StrategyQA test split has no answers)")
    answer = record["answer"]
    if isinstance(answer, str) and answer.strip().lower() in ("yes", "no", "true", "false"):
        answer = answer.strip().lower() in ("yes", "true")
    if not isinstance(answer, bool):
        raise _Bad(f"'answer' should be true or false, found {answer!r:.40}")
    extra = {key: record[key] for key in ("term", "description", "facts", "decomposition", "evidence") if key in record}
    return Question(id=_qid(record, index), question=_str(record, "question"), answers=["yes" if answer else "no"],
                    type="yesno", dataset="strategyqa", extra=extra)


def _demo(record: dict, index: int) -> Question:
    gold = record.get("gold_passages", [])
    if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
        raise _Bad("'gold_passages' should be a list of passage ids")
    return Question(id=_qid(record, index), question=_str(record, "question"), answers=_answer_field(record),
                    type=str(record.get("type") or "unknown"), dataset="demo", gold_passages=list(gold),
                    extra={"case_study": record.get("case_study")})


PARSERS: dict[str, Callable[[dict, int], Question]] = {
    "hotpotqa": _hotpot_like("hotpotqa"),
    "2wiki": _hotpot_like("2wiki"),
    "musique": _musique,
    "nq": _nq,
    "strategyqa": _strategyqa,
    "demo": _demo,
}


# --- reading --------------------------------------------------------------------------------------


def _dataset_name(name: str) -> str:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in PARSERS:
        raise DatasetError(f"unknown dataset '{name}'", where="dataset", fix=f"use one of {', '.join(DATASETS)}")
    return key


def canonical_name(name: str) -> str:
    """The dataset's registered name for any accepted spelling ("hotpot" -> "hotpotqa"); unknown names fail."""
    return _dataset_name(name)


def default_path(name: str, data_dir: Path | None = None) -> Path:
    key = _dataset_name(name)
    if key == "demo":
        return DEMO_CORPUS_DIR / "questions.jsonl"
    return Path(data_dir or shared_data_dir()) / DEFAULT_FILES[key]


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        container = container_of(path)
        if container not in ("json", "jsonl"):
            raise DatasetError("question files are JSON (.json) or JSON lines (.jsonl, optionally .gz)",
                               where=str(path), fix="convert the file to JSON lines with one question per line")
        yield from iter_records(path, container)
    except CorpusError as exc:
        raise DatasetError(exc.what, where=exc.where, fix=exc.fix) from exc


def iter_questions(name: str, *, path: Path | str | None = None, data_dir: Path | str | None = None
                   ) -> Iterator[Question]:
    """Questions one by one (JSON lines are read as they are consumed)."""
    key = _dataset_name(name)
    file = Path(path).expanduser() if path else default_path(key, Path(data_dir) if data_dir else None)
    if not file.is_file():
        where = "" if path else " (the benchmark data folder: ../shared/data, EXPLORER_DATA or --data)"
        raise DatasetError(f"question file not found: {file}{where}",
                           fix="check the path" if path else "place the benchmark data beside the project, "
                                                             "or pass path= / --data to the file")
    parse = PARSERS[key]
    for index, (where, record) in enumerate(_records(file)):
        if not isinstance(record, dict):
            raise DatasetError(f"expected a JSON object per question, found {type(record).__name__}", where=where,
                               fix=f"use the {key} question format")
        try:
            yield parse(record, index)
        except _Bad as exc:
            raise DatasetError(str(exc), where=where, fix=f"check that the file is in a {key} format") from None


def load_dataset(name: str, *, path: Path | str | None = None, limit: int | None = None,
                 data_dir: Path | str | None = None) -> list[Question]:
    """The first ``limit`` (default: all) questions of a dataset's default file, or of ``path``."""
    if limit is not None and limit < 0:
        raise DatasetError(f"limit must be 0 or more, got {limit}")
    out: list[Question] = []
    if limit == 0:
        return out
    seen: dict[str, int] = {}
    for question in iter_questions(name, path=path, data_dir=data_dir):
        if question.id in seen:  # gold mappings and stored runs key questions by id
            raise DatasetError(f"question id '{question.id}' appears twice (items {seen[question.id]} and {len(out)})",
                               where=str(path or default_path(name, Path(data_dir) if data_dir else None)),
                               fix="give every question its own id")
        seen[question.id] = len(out)
        out.append(question)
        if limit is not None and len(out) >= limit:
            break
    return out
