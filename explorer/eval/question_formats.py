"""The record shapes a question file can have, how each becomes a :class:`Question`, and how a shape is told.

==============  =================================================================================
format          one record
==============  =================================================================================
hotpotqa        HotpotQA: ``question``, ``answer``; gold from ``supporting_facts`` over ``context``
                (the official distractor / fullwiki files), or no paragraphs at all
2wiki           2WikiMultihopQA: the HotpotQA shape plus ``evidences`` / ``entity_ids``
musique         MuSiQue: ``paragraphs`` with ``is_supporting``, ``question_decomposition``, aliases
nq              NQ-open: ``question``, ``answer(s)``, optionally ``ctxs`` marked ``isgold``
strategyqa      StrategyQA: a boolean ``answer``, ``facts``, ``decomposition``
questions       question-only: ``question`` and ``answer`` or ``answers`` (JSON, JSON lines, CSV or
                TSV with a header; e.g. Bamboogle's ``{idx, question, answer}``)
flashrag        FlashRAG: ``{id, question, golden_answers}``; where ``metadata`` holds a benchmark's own
                fields (HotpotQA's ``context`` ...), the record is read as that benchmark
==============  =================================================================================

Gold passages are ids in any corpus pooled from the same paragraphs
(:func:`explorer.retrieval.splitter.paragraph_passage_ids`): the pieces of each HotpotQA / 2Wiki
``supporting_facts`` paragraph that hold a supporting sentence, MuSiQue's ``is_supporting``
paragraphs in hop order, NQ's ``isgold`` contexts; none for the other shapes.

A parser raises :class:`BadRecord` with what is wrong with one record; the reader
(:mod:`explorer.eval.question_files`) adds the file, the line and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from explorer.errors import ExplorerError, check_text, parse_json
from explorer.eval.question import Question
from explorer.retrieval.formats import lift_metadata
from explorer.retrieval.splitter import join_sentences, paragraph_passage_ids, sentence_spans

QUESTION_FORMATS = ("hotpotqa", "2wiki", "musique", "nq", "strategyqa", "questions", "flashrag")
FORMAT_TITLES = {"hotpotqa": "HotpotQA", "2wiki": "2WikiMultihopQA", "musique": "MuSiQue", "nq": "NQ-open",
                 "strategyqa": "StrategyQA", "questions": "question-only", "flashrag": "FlashRAG", "demo": "demo",
                 "triviaqa": "TriviaQA", "popqa": "PopQA", "bamboogle": "Bamboogle"}
FORMAT_ALIASES = {"hotpot": "hotpotqa", "2wikimultihopqa": "2wiki", "nq-open": "nq", "nq_open": "nq",
                  "strategy": "strategyqa", "question-only": "questions", "question_only": "questions",
                  "qa": "questions", "plain": "questions", "csv": "questions", "bamboogle": "questions"}
_2WIKI_TYPES = frozenset({"compositional", "inference", "bridge_comparison", "comparison_2wiki"})
ANSWER_KEYS = ("answers", "answer", "golden_answers")


class BadRecord(Exception):
    """What is wrong with one record (the reader adds where it is and how to fix it)."""


class NoAnswer(BadRecord):
    """A record whose answer is empty (``"golden_answers": []``): it cannot be scored, so an evaluation
    leaves it out and counts it, where other faults stop the reading."""


# --- field helpers --------------------------------------------------------------------------------


def text_field(record: dict, key: str) -> str:
    if key not in record:
        raise BadRecord(f"has no '{key}' field")
    value = record[key]
    if not isinstance(value, str) or not value.strip():
        raise BadRecord(f"has {_a(key)} '{key}' that is not a non-empty string ({type(value).__name__} {value!r:.40})")
    try:
        check_text(value, key)
    except ExplorerError as exc:
        raise BadRecord(f"has a '{key}' with {exc.what.removeprefix('the text holds ')}") from None
    return value.strip()


def _a(key: str) -> str:
    """'a' or 'an' before a quoted field name ("an 'answer'", "a 'question'")."""
    return "an" if key[:1].lower() in "aeiou" else "a"


def _json_kind(value: Any) -> str:
    return {type(None): "null", dict: "a JSON object", list: "a JSON list"}.get(type(value), type(value).__name__)


def answers_of(*values: Any, key: str = "answer") -> list[str]:
    """Strings and lists of strings flattened into distinct non-blank answers, order kept.

    A string that holds a JSON list (a CSV cell such as ``["Paris", "City of Light"]``) is read as that list.
    """
    out: list[str] = []
    for value in values:
        if isinstance(value, str) and value.strip().startswith("["):
            try:
                parsed = parse_json(value)
            except ValueError:
                parsed = None
            if isinstance(parsed, list):
                value = parsed
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, bool) or isinstance(item, (int, float)):
                item = str(item)
            if not isinstance(item, str):
                raise BadRecord(f"has {_a(key)} '{key}' that is {_json_kind(item)}, not a string or a list of strings")
            item = item.strip()
            if item and item not in out:
                out.append(item)
    if not out:
        raise NoAnswer(f"has an empty '{key}'")
    return out


ALIAS_KEYS = ("answer_aliases", "aliases")


def aliases_of(record: dict) -> list[str]:
    """Other accepted answers (``answer_aliases`` or ``aliases``): a list of strings, possibly empty.

    A null or an object there is refused rather than read as "no aliases": it is a broken record,
    and silently scoring against fewer answers would lower every score of that question."""
    for key in ALIAS_KEYS:
        if key in record:
            value = record[key]
            if not isinstance(value, (list, str)):
                raise BadRecord(f"has {_a(key)} '{key}' that is {_json_kind(value)}, not a list of strings (leave "
                                "the field out when there are none)")
            try:
                return answers_of(value, key=key)
            except NoAnswer:  # no alias given ("", [], or only blanks)
                return []
    return []


def answer_field(record: dict) -> list[str]:
    for key in ANSWER_KEYS:
        if key in record:
            return answers_of(record[key], key=key)
    raise BadRecord("has no 'answer' field (nor 'answers')")


def question_id(record: dict, index: int) -> str:
    for key in ("id", "_id", "qid", "idx", "question_id"):
        value = record.get(key)
        if isinstance(value, (dict, list)):
            raise BadRecord(f"has {_a(key)} '{key}' that is {_json_kind(value)}, not a string or a number")
        if value is not None and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return str(index)


# --- per-format parsers ---------------------------------------------------------------------------


def _supporting_gold(record: dict) -> tuple[list[str], list[str]]:
    """HotpotQA / 2Wiki gold ids from supporting_facts and context, and titles absent from context."""
    facts = record.get("supporting_facts")
    context = record.get("context")
    if facts is None or context is None:
        return [], []
    if isinstance(context, dict):  # Hugging Face layout (2WikiMultihopQA's calls the sentences 'content')
        sentences = context.get("sentences", context.get("content", []))
        context = [list(pair) for pair in zip(context.get("title", []), sentences, strict=False)]
        if isinstance(facts, dict):
            facts = [list(pair) for pair in zip(facts.get("title", []), facts.get("sent_id", []), strict=False)]
    if not isinstance(context, list) or not isinstance(facts, list):
        raise BadRecord("has 'context' and 'supporting_facts' that are not lists")
    paragraphs: dict[str, list[str]] = {}
    for i, item in enumerate(context):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
                and all(isinstance(s, str) for s in item[1])):
            raise BadRecord(f"has a context[{i}] that is not [title, [sentence, ...]]")
        paragraphs.setdefault(item[0], item[1])
    wanted: dict[str, list[int]] = {}
    for i, fact in enumerate(facts):
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)
                and isinstance(fact[1], int) and not isinstance(fact[1], bool)):
            raise BadRecord(f"has a supporting_facts[{i}] that is not [title, sentence index]")
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
        record = lift_metadata(record)
        gold, missing = _supporting_gold(record)
        extra: dict[str, Any] = {}
        for key in ("level", "supporting_facts", "evidences", "entity_ids"):
            if key in record:
                extra[key] = record[key]
        if missing:
            extra["gold_titles_not_in_context"] = missing
        return Question(id=question_id(record, index), question=text_field(record, "question"),
                        answers=answers_of(answer_field(record), aliases_of(record)),
                        type=str(record.get("type") or "unknown"), dataset=dataset, gold_passages=gold, extra=extra)

    return parse


def _musique(record: dict, index: int) -> Question:
    record = lift_metadata(record)
    gold: list[str] = []
    paragraphs = record.get("paragraphs")
    decomposition = record.get("question_decomposition") or []
    if paragraphs is not None:
        if not isinstance(paragraphs, list):
            raise BadRecord("has 'paragraphs' that is not a list")
        supporting = []
        for i, para in enumerate(paragraphs):
            if not isinstance(para, dict) or not isinstance(para.get("title"), str) \
                    or not isinstance(para.get("paragraph_text"), str):
                raise BadRecord(f"has a paragraphs[{i}] without string 'title' and 'paragraph_text'")
            if para.get("is_supporting") is True:
                supporting.append(i)
        hop_order = [step.get("paragraph_support_idx") for step in decomposition if isinstance(step, dict)]
        ordered = [i for i in hop_order if i in supporting] + [i for i in supporting if i not in hop_order]
        for i in dict.fromkeys(ordered):
            para = paragraphs[i]
            gold.extend(pid for pid in paragraph_passage_ids(para["title"], para["paragraph_text"]) if pid not in gold)
    qid = question_id(record, index)
    hops = re.match(r"(\d)hop", qid)
    qtype = f"{hops.group(1)}hop" if hops else (f"{len(decomposition)}hop" if decomposition else "unknown")
    extra = {key: record[key] for key in ("question_decomposition", "answerable") if key in record}
    return Question(id=qid, question=text_field(record, "question"),
                    answers=answers_of(answer_field(record), aliases_of(record)),
                    type=qtype, dataset="musique", gold_passages=gold, extra=extra)


def _nq(record: dict, index: int) -> Question:
    record = lift_metadata(record)
    gold: list[str] = []
    ctxs = record.get("ctxs")
    if ctxs is not None:
        if not isinstance(ctxs, list):
            raise BadRecord("has 'ctxs' that is not a list")
        for i, ctx in enumerate(ctxs):
            if not (isinstance(ctx, dict) and isinstance(ctx.get("title"), str) and isinstance(ctx.get("text"), str)):
                raise BadRecord(f"has a ctxs[{i}] without string 'title' and 'text'")
            if ctx.get("isgold") is True:
                gold.extend(pid for pid in paragraph_passage_ids(ctx["title"], ctx["text"]) if pid not in gold)
    return Question(id=question_id(record, index), question=text_field(record, "question"),
                    answers=answer_field(record), type="simple", dataset="nq", gold_passages=gold)


def _yes_no(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false"):
        return value.strip().lower() in ("yes", "true")
    return None


def _strategyqa(record: dict, index: int) -> Question:
    record = lift_metadata(record)
    if "answer" not in record and "golden_answers" not in record:
        raise BadRecord("has no 'answer' field (the StrategyQA test split has no answers)")
    raw = record["answer"] if "answer" in record else record["golden_answers"]
    if isinstance(raw, list) and len(raw) == 1:  # FlashRAG: golden_answers ["yes"]
        raw = raw[0]
    answer = _yes_no(raw)
    if answer is None:
        raise BadRecord(f"has an 'answer' that is not true or false ({raw!r:.40})")
    extra = {key: record[key] for key in ("term", "description", "facts", "decomposition", "evidence") if key in record}
    return Question(id=question_id(record, index), question=text_field(record, "question"),
                    answers=["yes" if answer else "no"], type="yesno", dataset="strategyqa", extra=extra)


def _lower_keys(record: dict) -> dict:
    """Keys case-folded ("Question" from a spreadsheet header is 'question'); the first spelling wins."""
    out: dict = {}
    for key, value in record.items():
        out.setdefault(str(key).strip().lower(), value)
    return out


def _question_only(record: dict, index: int) -> Question:
    record = _lower_keys(record)
    answers = answers_of(answer_field(record), aliases_of(record), key="answer")
    raw = next(record[k] for k in ANSWER_KEYS if k in record)
    qtype = str(record.get("type") or "")
    if isinstance(raw, bool):  # a JSON true/false answer: a yes/no question, scored by accuracy
        qtype, answers = qtype or "yesno", ["yes" if raw else "no"]
    extra = {key: record[key] for key in ("metadata", "level", "source") if key in record}
    return Question(id=question_id(record, index), question=text_field(record, "question"), answers=answers,
                    type=qtype or "unknown", dataset="questions", extra=extra)


def _flashrag(record: dict, index: int, dataset: str = "flashrag") -> Question:
    if "golden_answers" not in record:
        raise BadRecord("has no 'golden_answers' field")
    extra = {"metadata": record["metadata"]} if "metadata" in record else {}
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    qtype = str(meta.get("type") or "unknown")
    return Question(id=question_id(record, index), question=text_field(record, "question"),
                    answers=answers_of(record["golden_answers"], key="golden_answers"), type=qtype,
                    dataset=dataset, extra=extra)


def _flashrag_named(dataset: str) -> Callable[[dict, int], Question]:
    """A benchmark that ships only in the FlashRAG layout (TriviaQA, PopQA, Bamboogle): no gold passages."""
    return lambda record, index: _flashrag(record, index, dataset)


def _demo(record: dict, index: int) -> Question:
    gold = record.get("gold_passages", [])
    if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
        raise BadRecord("has 'gold_passages' that is not a list of passage ids")
    return Question(id=question_id(record, index), question=text_field(record, "question"),
                    answers=answer_field(record), type=str(record.get("type") or "unknown"), dataset="demo",
                    gold_passages=list(gold), extra={"case_study": record.get("case_study")})


PARSERS: dict[str, Callable[[dict, int], Question]] = {
    "hotpotqa": _hotpot_like("hotpotqa"),
    "2wiki": _hotpot_like("2wiki"),
    "musique": _musique,
    "nq": _nq,
    "strategyqa": _strategyqa,
    "questions": _question_only,
    "flashrag": _flashrag,
    "triviaqa": _flashrag_named("triviaqa"),
    "popqa": _flashrag_named("popqa"),
    "bamboogle": _flashrag_named("bamboogle"),
    "demo": _demo,
}


def canonical_format(fmt: str) -> str | None:
    """The registered format for any accepted spelling, or None when there is no such format."""
    key = fmt.strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    return key if key in PARSERS else None


def detect_format(record: Any) -> str | None:
    """The format a record's keys say it is in, or None when they say nothing recognisable."""
    if not isinstance(record, dict):
        return None
    keys = {str(k).strip().lower() for k in record}
    if "golden_answers" in keys:
        lifted = {str(k).strip().lower() for k in lift_metadata(record)}
        if not lifted & {"context", "supporting_facts", "paragraphs", "ctxs"}:
            return "flashrag"
        keys, record = lifted, lift_metadata(record)  # a benchmark's own fields under 'metadata': read as that
    if "paragraphs" in keys:
        return "musique"
    if "ctxs" in keys:
        return "nq"
    if "context" in keys or "supporting_facts" in keys:
        two_wiki = "evidences" in keys or "entity_ids" in keys or record.get("type") in _2WIKI_TYPES
        return "2wiki" if two_wiki else "hotpotqa"
    if "question" in keys and isinstance(record.get("answer"), bool):
        return "strategyqa"
    if "question" in keys and ({"facts", "decomposition"} & keys) and _yes_no(record.get("answer")) is not None:
        return "strategyqa"
    if "question" in keys and keys & set(ANSWER_KEYS):
        return "questions"
    return None
