"""Hand-made traces and stored evaluations for the scoring, report and Evaluations-tab tests.

The traces are built field by field (no model), so every number the tests expect can be worked
out by hand from what is written here.
"""

from __future__ import annotations

from typing import Any

from explorer.store import RunStore
from explorer.trace import Costs, Event, Trace


def make_trace(method: str, answer: str | None, answers: list[str], *, dataset: str = "hotpotqa", qid: str = "q1",
               gold_passages: list[str] | None = None, hits: list[list[str]] | None = None, variant: str = "paper",
               config: dict[str, Any] | None = None, status: str = "complete", llm_calls: int = 1,
               generated: int = 10, seconds: float = 1.0, question: str | None = None,
               qtype: str = "bridge") -> Trace:
    """A trace whose retrieval events returned the passage ids in ``hits`` (one list per retrieval)."""
    events = []
    for ids in hits or []:
        events.append(Event(kind="query", payload={"text": "q", "source": "question"}, id=len(events)))
        events.append(Event(kind="retrieval", payload={
            "query": len(events) - 1, "hits": [{"id": i, "title": i, "text": "t", "score": 1.0, "rank": r + 1}
                                               for r, i in enumerate(ids)]}, id=len(events)))
    costs = Costs(retrievals=len(hits or []), llm_calls=llm_calls, generated_tokens=generated,
                  wall_time={"generation": seconds})
    return Trace(question=question or f"question {qid}?", method=method, variant=variant, config=config or {},
                 model={"name": "hand-made"}, corpus={"name": "test"}, events=events, answer=answer,
                 output=f"So the answer is {answer}.", costs=costs, status=status,
                 error=None if status == "complete" else "it failed",
                 gold={"dataset": dataset, "id": qid, "type": qtype, "answers": answers,
                       "gold_passages": gold_passages or []})


def store_evaluation(store: RunStore, name: str, traces: list[Trace], settings: dict[str, Any] | None = None) -> None:
    """Store ``traces`` under evaluation ``name`` the way the runner does (dataset and question id per run)."""
    store.start_evaluation(name, settings or {"model": "hand-made", "corpus": "test", "seed": 0})
    for t in traces:
        store.save(t, evaluation=name, dataset=t.gold["dataset"], question_id=t.gold["id"])
    store.finish_evaluation(name)


def small_evaluation() -> list[Trace]:
    """Two methods on two HotpotQA questions and one StrategyQA question.

    sr, hotpotqa: q1 exact ("Paris" vs "paris"), q2 half right ("New York City" vs alias "New York":
    P 2/3, R 1, F1 0.8) -> EM 0.5, F1 0.9; gold recall q1 1/2, q2 2/2 -> 0.75; 1 retrieval each.
    wo, hotpotqa: q1 wrong, q2 failed run -> EM 0, F1 0, 0 retrievals, 1 failure.
    strategyqa s1 (gold yes): sr "Yes." right, wo "no" wrong.
    """
    return [
        make_trace("sr", "paris", ["Paris"], qid="q1", gold_passages=["a#0", "b#0"], hits=[["a#0", "x#0", "y#0"]],
                   llm_calls=2, generated=20, seconds=2.0),
        make_trace("sr", "New York City", ["Big Apple", "New York"], qid="q2", gold_passages=["c#0", "d#0"],
                   hits=[["c#0", "d#0", "x#0"]], llm_calls=2, generated=30, seconds=4.0),
        make_trace("wo", "Lyon", ["Paris"], qid="q1", gold_passages=["a#0", "b#0"], generated=12, seconds=1.0),
        make_trace("wo", None, ["Big Apple", "New York"], qid="q2", gold_passages=["c#0", "d#0"], status="error",
                   generated=0, seconds=0.5),
        make_trace("sr", "Yes.", ["yes"], dataset="strategyqa", qid="s1", hits=[["z#0"]], qtype="yesno"),
        make_trace("wo", "no", ["yes"], dataset="strategyqa", qid="s1", qtype="yesno"),
    ]
