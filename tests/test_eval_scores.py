"""Per-run scores read from traces, arm labels, de-duplication, and per-cell means, on hand-worked traces."""

from __future__ import annotations

import pytest
from eval_helpers import make_trace, small_evaluation

from explorer.eval.scores import primary_score, retrieved_ids, score_runs, score_trace


def _pairs(traces):
    return [({"dataset": t.gold["dataset"], "question_id": t.gold["id"]}, t) for t in traces]


def test_alias_aware_answer_scores() -> None:
    s = score_trace(make_trace("sr", "New York City", ["Big Apple", "New York"]))
    # best alias "New York": precision 2/3, recall 1, F1 0.8; no exact match
    assert s["em"] == 0.0 and s["f1"] == pytest.approx(0.8)
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == 1.0
    assert s["accuracy"] is None
    assert score_trace(make_trace("sr", "the Big Apple!", ["Big Apple", "New York"]))["em"] == 1.0


def test_yes_no_questions_are_scored_by_accuracy() -> None:
    right = score_trace(make_trace("wo", "Yes, because it is.", ["yes"], dataset="strategyqa", qtype="yesno"))
    wrong = score_trace(make_trace("wo", "no", ["yes"], dataset="strategyqa", qtype="yesno"))
    unclear = score_trace(make_trace("wo", "perhaps", ["no"], dataset="strategyqa", qtype="yesno"))
    assert (right["accuracy"], wrong["accuracy"], unclear["accuracy"]) == (1.0, 0.0, 0.0)
    assert right["em"] is None and right["f1"] is None
    assert primary_score(right) == 1.0
    # a HotpotQA comparison question answered "yes" is scored the HotpotQA way: EM/F1, no partial credit
    hotpot = score_trace(make_trace("wo", "yes", ["yes"], qtype="comparison"))
    assert (hotpot["em"], hotpot["f1"], hotpot["accuracy"]) == (1.0, 1.0, None)
    assert score_trace(make_trace("wo", "yes they are", ["yes"], qtype="comparison"))["f1"] == 0.0


def test_gold_recall_over_every_retrieval_of_the_run() -> None:
    trace = make_trace("fs", "x", ["y"], gold_passages=["g1#0", "g2#0", "g3#0"],
                       hits=[["g1#0", "n#0"], ["n#0", "g3#0"], ["g1#0"]])
    assert retrieved_ids(trace) == ["g1#0", "n#0", "g3#0"]
    s = score_trace(trace)
    assert s["passage_recall"] == pytest.approx(2 / 3)
    assert s["retrieved_passages"] == 3 and s["retrievals"] == 3
    assert score_trace(make_trace("wo", "x", ["y"], gold_passages=["g#0"]))["passage_recall"] == 0.0
    assert score_trace(make_trace("wo", "x", ["y"]))["passage_recall"] is None  # no gold: not averaged


def test_a_failed_run_scores_zero_even_with_a_partial_answer() -> None:
    s = score_trace(make_trace("sr", "Paris", ["Paris"], status="error"))
    assert s["em"] == 0.0 and s["f1"] == 0.0 and s["complete"] is False


def test_cells_of_a_small_evaluation() -> None:
    scores = score_runs(_pairs(small_evaluation()))
    assert scores.labels == ["wo", "sr"]  # paper order, not insertion order
    assert scores.datasets == ["hotpotqa", "strategyqa"]
    sr = scores.cell("sr", "hotpotqa")
    assert sr.n == 2 and sr.errors == 0
    assert sr.means["em"] == pytest.approx(0.5) and sr.means["f1"] == pytest.approx(0.9)
    assert sr.means["precision"] == pytest.approx((1 + 2 / 3) / 2) and sr.means["recall"] == pytest.approx(1.0)
    assert sr.means["passage_recall"] == pytest.approx(0.75)
    assert sr.means["retrievals"] == 1.0 and sr.means["llm_calls"] == 2.0
    assert sr.means["generated_tokens"] == 25.0 and sr.means["wall_time"] == pytest.approx(3.0)
    wo = scores.cell("wo", "hotpotqa")
    assert wo.n == 2 and wo.errors == 1 and wo.means["em"] == 0.0 and wo.means["retrievals"] == 0.0
    assert scores.cell("sr", "strategyqa").means["accuracy"] == 1.0
    assert scores.cell("wo", "strategyqa").means["accuracy"] == 0.0
    assert scores.cell("wo", "strategyqa").means["passage_recall"] is None
    assert scores.has_yes_no("strategyqa") and not scores.has_yes_no("hotpotqa")
    assert [r.question_id for r in scores.runs_of("sr", "hotpotqa")] == ["q1", "q2"]


def test_labels_name_variants_and_swept_values() -> None:
    traces = [make_trace("dragin", "a", ["a"], qid=str(i), config={"threshold": th, "top_k": 3})
              for i in range(2) for th in (0.4, 1.2)]
    traces.append(make_trace("dragin", "a", ["a"], variant="reference", config={"threshold": 1.2, "top_k": 3}))
    scores = score_runs(_pairs(traces))
    assert scores.labels == ["dragin:paper threshold=0.4", "dragin:paper threshold=1.2", "dragin:reference"]
    assert scores.cell("dragin:paper threshold=0.4", "hotpotqa").n == 2


def test_a_rerun_question_counts_once_preferring_the_complete_run() -> None:
    failed = make_trace("sr", None, ["Paris"], status="error")
    done = make_trace("sr", "Paris", ["Paris"])
    failed.created_at, done.created_at = "2026-01-02T00:00:00+00:00", "2026-01-01T00:00:00+00:00"
    scores = score_runs(_pairs([failed, done]))
    assert len(scores.runs) == 1 and scores.runs[0].run_id == done.run_id
    assert scores.cell("sr", "hotpotqa").means["em"] == 1.0


def test_the_answer_badge_follows_the_normalised_scores_not_the_gold_string() -> None:
    from explorer.eval.scores import answer_verdict
    from explorer.ui.panels import header
    from explorer.ui.views.view import TraceView, ViewOptions

    def verdict(answer: str, answers: list[str], output: str = "", **kw):
        trace = make_trace("sr", answer, answers, **kw)
        trace.output = output or trace.output
        return answer_verdict(trace), header.render(TraceView(trace), ViewOptions())

    # the gold string is there, but the answer does not match it under normalisation
    wrong, html = verdict("1923", ["Alejandro Jodorowsky"], output="Alejandro Jodorowsky was born in 1923. "
                          "So the answer is 1923.")  # only the reasoning names the gold
    assert wrong.label == "wrong" and 'dre-badge bad">wrong' in html and "contains gold" not in html
    assert verdict("13,677", ["3,677"])[0].label == "wrong"  # "3,677" is a substring, 13677 is another number
    bellamy = verdict("Jillian Bellamy", ["Jillian Bell"])[0]
    assert bellamy.kind == "part" and bellamy.label == "partial · F1 0.50" and not bellamy.matches
    # no literal gold string, yet a match once normalised (punctuation, articles, case)
    assert verdict("3677.", ["3,677"])[0].label == "exact match"
    exact, html = verdict("THE  Colisée!", ["Colisée"])
    assert exact.kind == "ok" and exact.em == 1.0 and 'dre-badge ok">exact match' in html
    inside = verdict("Jillian Bell, the actress", ["Jillian Bell"])[0]
    assert inside.label == "contains gold" and inside.matches and inside.em == 0.0
    assert verdict("Yes, both are.", ["yes"], qtype="yesno")[0].label == "right"
    assert verdict("x", [])[0] is None
