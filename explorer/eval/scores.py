"""Per-run scores and per-cell summaries, read from stored traces only.

A run's score comes from what its trace holds: the extracted answer against ``trace.gold``
(answers, type, gold passage ids, written there by the evaluation runner), the passage ids of its
``retrieval`` events, and its costs. Nothing is re-run or recomputed from a model, so a report
made months later from the database says exactly what the runs did.

Runs are grouped into *arms*: a method, its variant, and the config values that vary inside the
evaluation (the threshold of a sweep). An arm's label is what tables, charts and the app's cells
show, e.g. ``dragin``, ``dragin:reference`` or ``dragin threshold=0.4``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from explorer.eval.metrics import (
    contains_answer,
    exact_match,
    passage_recall,
    to_yes_no,
    token_scores,
    yes_no_accuracy,
)
from explorer.methods.base import method_rank
from explorer.trace import Trace

#: The order methods appear in tables (the DRAGIN paper's, then the later methods); others follow by name.
#: Answer-quality metrics, per question, mean per cell.
ANSWER_METRICS = ("em", "f1", "precision", "recall", "accuracy")
#: Cost metrics, per question, mean per cell.
COST_METRICS = ("retrievals", "llm_calls", "forward_passes", "sampled_sequences", "generated_tokens",
                "discarded_tokens", "wall_time")


def is_yes_no(gold: dict[str, Any]) -> bool:
    """StrategyQA-style questions are scored by yes/no accuracy instead of EM/F1.

    Decided by the dataset, not by the answer: a HotpotQA comparison question whose answer is
    "yes" is still scored by EM/F1, as HotpotQA's own script does.
    """
    return gold.get("type") == "yesno" or gold.get("dataset") == "strategyqa"


def retrieved_ids(trace: Trace) -> list[str]:
    """Every passage id the run's retrieval events returned, first occurrence order, no repeats."""
    seen: dict[str, None] = {}
    for event in trace.of_kind("retrieval"):
        for hit in event.payload.get("hits") or []:
            pid = hit.get("id") if isinstance(hit, dict) else None
            if isinstance(pid, str):
                seen.setdefault(pid, None)
    return list(seen)


#: Generations that read passages without writing the answer: DR-RAG's judge, BlendFilter's filter and
#: query augmentation, SEAKR's re-ranking probes. Passages seen only there were not given to the answer.
NOT_ANSWERING = frozenset({"judge", "filter", "rerank", "augment"})


def given_ids(trace: Trace) -> list[str]:
    """The retrieved passages that were put in the prompt of a generation that writes the answer.

    Read from the trace alone: a passage counts when its text, as the prompt shows it (``title:
    text``), appears in such a generation's prompt. DR-RAG retrieves ~10 candidates but gives k;
    BlendFilter's filter drops some of its union: this is what the model actually read."""
    prompts = [str(e.payload.get("prompt") or "") for e in trace.of_kind("generation")
               if e.payload.get("purpose") not in NOT_ANSWERING]
    blob = "\n".join(p for p in prompts if p)
    if not blob:
        return []
    seen: dict[str, None] = {}
    for event in trace.of_kind("retrieval"):
        for hit in event.payload.get("hits") or []:
            if not isinstance(hit, dict) or not isinstance(hit.get("id"), str) or hit["id"] in seen:
                continue
            title, text = str(hit.get("title") or ""), str(hit.get("text") or "")
            shown = f"{title}: {text}" if title else text
            if text and shown in blob:
                seen[hit["id"]] = None
    return list(seen)


def score_trace(trace: Trace) -> dict[str, Any]:
    """One run's answer, retrieval and cost numbers.

    A run that did not complete scores 0 on every answer metric (it gave no answer) rather than
    being left out, so a method that fails often cannot look better for it. Metrics that do not
    apply are None: EM/F1 on yes/no questions, accuracy on the others, passage recall where the
    question has no gold passages.
    """
    gold = trace.gold if isinstance(trace.gold, dict) else {}
    answers = [a for a in gold.get("answers") or [] if isinstance(a, str)]
    prediction = (trace.answer or "") if trace.status == "complete" else ""
    out: dict[str, Any] = dict.fromkeys(ANSWER_METRICS)
    if answers:
        if is_yes_no(gold) and any(to_yes_no(a) for a in answers):
            out["accuracy"] = yes_no_accuracy(prediction, answers)
        else:
            out["em"] = exact_match(prediction, answers)
            out.update(token_scores(prediction, answers))
    found = retrieved_ids(trace)
    gold_ids = [g for g in gold.get("gold_passages") or [] if isinstance(g, str)]
    out["passage_recall"] = passage_recall(gold_ids, found)
    out["retrieved_passages"] = len(found)
    given = given_ids(trace)
    out["given_recall"] = passage_recall(gold_ids, given)
    out["given_passages"] = len(given)
    c = trace.costs
    out.update(retrievals=c.retrievals, llm_calls=c.llm_calls, forward_passes=c.forward_passes,
               sampled_sequences=c.sampled_sequences, generated_tokens=c.generated_tokens,
               discarded_tokens=c.discarded_tokens, wall_time=c.total_time)
    out["complete"] = trace.status == "complete"
    return out


@dataclass(frozen=True)
class AnswerVerdict:
    """How a run's short answer stands against its gold answers: the badge a view shows beside it.

    Decided on the extracted answer only (never the whole output, whose reasoning may name the
    gold entity while the answer names another) and under the evaluation's own normalisation, so
    a badge never says more than the run's EM/F1 in an evaluation would."""

    label: str
    #: ``ok`` (exact match, or the right yes/no), ``part`` (the gold inside a longer answer, or a
    #: partial token overlap) or ``bad``.
    kind: str
    em: float | None = None
    f1: float | None = None

    @property
    def matches(self) -> bool:
        """The answer counts as right: an exact match, the right yes/no, or the gold inside it."""
        return self.kind == "ok" or self.label == CONTAINS_GOLD


CONTAINS_GOLD = "contains gold"


def answer_verdict(trace: Trace) -> AnswerVerdict | None:
    """The verdict on ``trace.answer`` (None without gold answers or without an answer).

    ``exact match`` when EM is 1; ``contains gold`` when a normalised gold alias occurs in the
    normalised answer as whole words ("Jillian Bell, the actress"), which EM misses but token
    recall does not; ``partial`` with its F1 when only some words overlap; otherwise ``wrong``.
    Yes/no questions are right or wrong by :func:`to_yes_no`, as the evaluation scores them."""
    gold = trace.gold if isinstance(trace.gold, dict) else {}
    answers = [a for a in gold.get("answers") or [] if isinstance(a, str)]
    if not answers or trace.answer is None:
        return None
    answer = str(trace.answer)
    if is_yes_no(gold) and any(to_yes_no(a) for a in answers):
        right = yes_no_accuracy(answer, answers)
        return AnswerVerdict("right" if right else "wrong", "ok" if right else "bad")
    em, f1 = exact_match(answer, answers), token_scores(answer, answers)["f1"]
    if em:
        return AnswerVerdict("exact match", "ok", em, f1)
    if contains_answer(answer, answers):
        return AnswerVerdict(CONTAINS_GOLD, "part", em, f1)
    if f1 > 0:
        return AnswerVerdict(f"partial · F1 {f1:.2f}", "part", em, f1)
    return AnswerVerdict("wrong", "bad", em, f1)


def primary_score(scores: dict[str, Any]) -> float | None:
    """The one number a chart plots: accuracy for yes/no questions, else token F1."""
    return scores["accuracy"] if scores.get("accuracy") is not None else scores.get("f1")


@dataclass
class RunScore:
    """One stored run with its scores and the facts a per-question list shows."""

    run_id: str
    dataset: str
    question_id: str
    question: str
    method: str
    variant: str
    config: dict[str, Any]
    status: str
    answer: str | None
    gold_answers: list[str]
    created_at: str
    scores: dict[str, Any]
    label: str = ""

    @property
    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True)


def run_score(row: dict[str, Any], trace: Trace) -> RunScore:
    """A :class:`RunScore` from a store row (``RunStore.traces``) and its trace."""
    gold = trace.gold if isinstance(trace.gold, dict) else {}
    return RunScore(run_id=trace.run_id, dataset=str(row.get("dataset") or gold.get("dataset") or ""),
                    question_id=str(row.get("question_id") or gold.get("id") or ""), question=trace.question,
                    method=trace.method, variant=trace.variant, config=dict(trace.config), status=trace.status,
                    answer=trace.answer, gold_answers=[a for a in gold.get("answers") or [] if isinstance(a, str)],
                    created_at=trace.created_at, scores=score_trace(trace))


def _default_variant(method: str) -> str:
    try:
        from explorer.methods.base import get_method

        return get_method(method).variants[0]
    except Exception:  # a method from another checkout: the label then names any variant but "paper"
        return "paper"


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def varying_params(runs: list[RunScore]) -> dict[tuple[str, str], list[str]]:
    """Per (method, variant): the config fields whose value differs between its runs (a sweep's parameter)."""
    configs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        configs[(r.method, r.variant)].append(r.config)
    out = {}
    for key, cfgs in configs.items():
        names = sorted({k for c in cfgs for k in c})
        out[key] = [k for k in names if len({json.dumps(c.get(k), sort_keys=True) for c in cfgs}) > 1]
    return out


def assign_labels(runs: list[RunScore]) -> None:
    """Give every run its arm label: the method, its variant unless it is the default, and the varying config."""
    variants: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        variants[r.method].add(r.variant)
    varying = varying_params(runs)
    for r in runs:
        label = r.method
        if len(variants[r.method]) > 1 or r.variant != _default_variant(r.method):
            label += f":{r.variant}"
        extra = " ".join(f"{k}={_value_text(r.config.get(k))}" for k in varying[(r.method, r.variant)])
        r.label = f"{label} {extra}" if extra else label


def _sort_key(run: RunScore) -> tuple:
    values = tuple((0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))
                   for _, v in sorted(run.config.items()))
    return (method_rank(run.method), run.variant != _default_variant(run.method), run.variant, values)


def dedupe(runs: Iterable[RunScore]) -> list[RunScore]:
    """One run per (dataset, question, method, variant, config): a complete one before others, then the newest."""
    best: dict[tuple, RunScore] = {}
    for r in runs:
        key = (r.dataset, r.question_id, r.method, r.variant, r.config_key)
        old = best.get(key)
        if old is None or (r.status == "complete", r.created_at) > (old.status == "complete", old.created_at):
            best[key] = r
    return list(best.values())


@dataclass
class Cell:
    """Means over one arm's runs on one dataset."""

    label: str
    dataset: str
    n: int = 0
    errors: int = 0
    means: dict[str, float | None] = field(default_factory=dict)
    recall_n: int = 0


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


@dataclass
class EvaluationScores:
    """Every run of an evaluation, scored and labelled, with the arms and datasets in table order."""

    runs: list[RunScore]
    labels: list[str]
    datasets: list[str]
    _cells: dict[tuple[str, str], Cell] = field(default_factory=dict, repr=False)

    def cell(self, label: str, dataset: str) -> Cell:
        """Means of one arm on one dataset (computed once)."""
        key = (label, dataset)
        if key not in self._cells:
            self._cells[key] = self._cell(label, dataset)
        return self._cells[key]

    def _cell(self, label: str, dataset: str) -> Cell:
        chosen = [r for r in self.runs if r.label == label and r.dataset == dataset]
        cell = Cell(label=label, dataset=dataset, n=len(chosen), errors=sum(not r.scores["complete"] for r in chosen))
        for name in (*ANSWER_METRICS, "passage_recall", "retrieved_passages", "given_recall", "given_passages",
                     *COST_METRICS):
            values = [float(r.scores[name]) for r in chosen if r.scores.get(name) is not None]
            cell.means[name] = _mean(values)
            if name == "passage_recall":
                cell.recall_n = len(values)
        return cell

    def runs_of(self, label: str, dataset: str) -> list[RunScore]:
        return sorted((r for r in self.runs if r.label == label and r.dataset == dataset),
                      key=lambda r: _question_order(r.question_id))

    def has_yes_no(self, dataset: str) -> bool:
        return any(r.scores.get("accuracy") is not None for r in self.runs if r.dataset == dataset)


def _question_order(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


def score_runs(pairs: Iterable[tuple[dict[str, Any], Trace]]) -> EvaluationScores:
    """Score (row, trace) pairs as :meth:`RunStore.traces` yields them."""
    runs = dedupe(run_score(row, trace) for row, trace in pairs)
    assign_labels(runs)
    runs.sort(key=lambda r: (_sort_key(r), r.dataset, _question_order(r.question_id)))
    labels = list(dict.fromkeys(r.label for r in runs))
    datasets = list(dict.fromkeys(r.dataset for r in sorted(runs, key=lambda r: _dataset_order(r.dataset))))
    return EvaluationScores(runs=runs, labels=labels, datasets=datasets)


_DATASET_ORDER = ("2wiki", "hotpotqa", "strategyqa", "iirc", "musique", "nq", "demo")


def _dataset_order(name: str) -> tuple:
    return (_DATASET_ORDER.index(name), name) if name in _DATASET_ORDER else (len(_DATASET_ORDER), name)


def score_evaluation(store: Any, name: str) -> EvaluationScores:
    """Every run stored under evaluation ``name``, scored."""
    return score_runs(store.traces(evaluation=name))
