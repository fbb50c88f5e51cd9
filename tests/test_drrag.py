"""DR-RAG end to end: two stages, the pair judge (trained classifier or the model), the selection, one answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.errors import ConfigError
from explorer.methods import run_question
from explorer.methods.base import make_config
from explorer.methods.drrag.method import judge_prompt, yes_probability
from explorer.retrieval.base import Passage
from explorer.runtime import Runtime
from explorer.summary import render_text
from explorer.trace import Trace

GREEN = "Who is the spouse of the Green performer?"
# k = 3 with k1 = 1: one stage-1 passage with two stage-2 places, at most k2 = 3 pairs to judge.
SHORT = {"k": 3, "k1": 1, "k2": 3, "max_length": 24, "fewshot": 2, "answer_tokens": 8}


def check_drrag_trace(trace: Trace, cfg: dict, judge: str | None) -> None:
    trace.validate()
    assert trace.status == "complete", trace.error
    events = trace.events
    retrievals = trace.of_kind("retrieval")
    first, second = retrievals[0].payload, [r.payload for r in retrievals[1:]]
    assert first["stage"] == 1 and len(first["hits"]) <= cfg["k1"]
    assert events[first["query"]].payload["text"] == trace.question
    stage1 = [h["id"] for h in first["hits"]]
    assert [r["anchor"] for r in second] == stage1 and all(r["stage"] == 2 for r in second)
    for r in second:
        query = events[r["query"]].payload
        assert query["source"] == "qdc" and query["text"].startswith(trace.question) and query["anchor"] == r["anchor"]
        assert len(r["candidates"]) <= cfg["k2"] and not set(r["candidates"]) & set(stage1)
        assert set(r["candidates"]) <= {h["id"] for h in r["hits"]}
    selection = trace.of_kind("selection")[-1].payload
    assert selection["stage1"] == stage1 and selection["passage_ids"][: len(stage1)] == stage1
    assert len(selection["passage_ids"]) <= cfg["k"]
    assert [p["id"] for p in selection["passages"]] == selection["passage_ids"]
    assert all(p["reason"] for p in selection["passages"])
    calls = trace.of_kind("classifier")
    assert selection["pairs_judged"] == len(calls) and selection["judge"] == judge
    for c in calls:
        assert c.payload["judge"] == judge
        assert c.payload["accepted"] == (c.payload["probability"] >= c.payload["threshold"])
        assert c.payload["pair"][0] in stage1  # CFS asks about (stage-1 passage, candidate)
    if judge is not None:  # CFS: the stage-2 passages are exactly the accepted candidates
        accepted = [c.payload["pair"][1] for c in calls if c.payload["accepted"]]
        assert selection["passage_ids"][len(stage1):] == accepted
    answers = [g for g in trace.of_kind("generation") if g.payload["purpose"] == "answer"]
    assert answers[0].payload["passages"] == selection["passage_ids"]
    completed = int(trace.of_kind("answer")[-1].payload["completed_phrase"])
    judge_calls = len([g for g in trace.of_kind("generation") if g.payload["purpose"] == "judge"])
    assert selection["llm_judge_calls"] == judge_calls == (len(calls) if judge == "llm" else 0)
    # ONE call answers; the model as judge costs one more per pair
    assert trace.costs.llm_calls == 1 + completed + judge_calls
    assert trace.costs.retrievals == 1 + len(stage1)


def test_a_fresh_cache_uses_the_shipped_classifier(tiny_lm, demo_retriever, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh install: an empty cache and no benchmark data; the shipped classifier judges, so at most 2 LLM calls."""
    from explorer.methods.drrag.pair_classifier import PairClassifier

    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("EXPLORER_DATA", str(tmp_path / "no-data"))
    from explorer.paths import PROJECT_ROOT
    from explorer.runtime import corpus_facts

    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus=corpus_facts(demo_retriever, "demo"))
    trace = run_question("drrag", GREEN, runtime, config=SHORT)
    check_drrag_trace(trace, SHORT, "classifier")
    # the corpus, its index and the classifier are named by their place, not by this machine's paths
    assert trace.corpus["source"] == "corpora/demo/passages.jsonl" and not trace.corpus["index"].startswith("/")
    assert str(PROJECT_ROOT) not in trace.to_json() and str(tmp_path) not in trace.to_json()
    assert trace.of_kind("classifier"), "CFS must have judged at least one pair"
    assert trace.costs.llm_calls <= 2  # one answer (+ one completion of the phrase): no call per pair
    selection = trace.of_kind("selection")[-1].payload
    source = selection["judge_source"]
    assert source["origin"] == "shipped" and source["path"] == "explorer/data/pair_classifier"  # no machine's path
    assert PairClassifier.shipped_path().as_posix().endswith(source["path"])
    assert source["family"] in ("logreg", "mlp", "boosted-trees") and 0.0 < source["held_out_f1"] <= 1.0
    notes = [n.payload["message"] for n in trace.of_kind("note")]
    assert any("shipped with the explorer" in n for n in notes)
    assert not list((tmp_path / "empty-cache").rglob("manifest.json"))  # nothing was trained or copied


def test_llm_judge_when_asked_or_when_no_classifier_is_found(tiny_lm, demo_retriever, tmp_path: Path) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    for config, reason in (({**SHORT, "judge": "llm"}, "judge=llm was chosen"),
                           ({**SHORT, "classifier_path": str(tmp_path / "absent")}, "no trained pair classifier")):
        trace = run_question("drrag", GREEN, runtime, config=config)
        check_drrag_trace(trace, SHORT, "llm")
        assert trace.of_kind("classifier"), "CFS must have judged at least one pair"
        assert trace.of_kind("selection")[-1].payload["judge_source"]["origin"] == "model"
        note = [n.payload["message"] for n in trace.of_kind("note") if reason in n.payload["message"]]
        assert note, reason
        for c in trace.of_kind("classifier"):
            gen = trace.events[c.payload["generation"]].payload
            assert gen["purpose"] == "judge" and gen["pair"] == c.payload["pair"] and len(gen["tokens"]) <= 1


def test_judge_classifier_without_weights_is_a_clear_error(tiny_lm, demo_retriever, tmp_path: Path) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("drrag", GREEN, runtime,
                         config={**SHORT, "judge": "classifier", "classifier_path": str(tmp_path / "none")})
    assert trace.status == "error" and "train-classifier" in trace.error
    trace.validate()


def test_qdc_needs_no_judge(tiny_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    cfg = {**SHORT, "selection": "qdc", "k": 4, "k1": 2}
    trace = run_question("drrag", GREEN, runtime, config=cfg)
    check_drrag_trace(trace, cfg, None)
    selection = trace.of_kind("selection")[-1].payload
    assert len(selection["passage_ids"]) == 4 and not trace.of_kind("classifier")


@pytest.fixture(scope="module")
def small_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier trained on 15 questions per dataset, saved outside the cache."""
    from explorer.methods.drrag.pair_classifier import train
    from explorer.paths import shared_data_dir

    data = shared_data_dir()
    if not data.is_dir():
        pytest.skip(f"benchmark data not found at {data} (set EXPLORER_DATA or place ../shared/data beside "
                    "the project)")
    model, _ = train(data, limit=15, seed=0, folds=3, repeats=1)
    return model.save(tmp_path_factory.mktemp("classifier") / "pair_classifier")


@pytest.mark.slow
def test_green_performer_with_the_trained_classifier(embedded_lm, demo_retriever, small_classifier: Path) -> None:
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    cfg = {**SHORT, "classifier_path": str(small_classifier), "k": 4, "k1": 2}
    trace = run_question("drrag", GREEN, runtime, config=cfg)
    check_drrag_trace(trace, cfg, "classifier")
    assert trace.of_kind("retrieval")[0].payload["hits"][0]["id"] == "demo-0093"  # the album Green by Steve Hillage
    calls = trace.of_kind("classifier")
    assert calls and all(0.0 <= c.payload["probability"] <= 1.0 for c in calls)
    text = render_text(trace)
    assert "judge: classifier" in text and "selected" in text and "stage 2, question + [demo-0093]" in text


@pytest.mark.slow
def test_inverse_selection_with_the_trained_classifier(tiny_lm, demo_retriever, small_classifier: Path) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    cfg = {**SHORT, "classifier_path": str(small_classifier), "k": 4, "k1": 2, "selection": "cis"}
    trace = run_question("drrag", GREEN, runtime, config=cfg)
    trace.validate()
    selection = trace.of_kind("selection")[-1].payload
    calls = trace.of_kind("classifier")
    assert len(calls) == 6  # every pair of the four QDC passages
    judged = {p for c in calls for p in c.payload["pair"]}
    assert len(judged) == 4 and set(selection["passage_ids"]) <= judged
    supported = {p for c in calls if c.payload["accepted"] for p in c.payload["pair"]}
    if supported:  # a passage stays exactly when one of its pairs was accepted
        assert set(selection["passage_ids"]) == supported
        assert {d["id"] for d in selection["dropped"]} == judged - supported
    assert trace.costs.llm_calls in (1, 2)


@pytest.mark.slow
def test_green_performer_with_the_model_as_judge(embedded_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("drrag", GREEN, runtime, config={**SHORT, "judge": "llm"})
    check_drrag_trace(trace, SHORT, "llm")
    assert all(c.payload["read"] for c in trace.of_kind("classifier"))


def test_config_is_validated() -> None:
    cfg = make_config("drrag", {})
    assert (cfg.selection, cfg.k, cfg.k1, cfg.k2, cfg.judge) == ("cfs", 4, 2, 5, "auto")
    with pytest.raises(ConfigError, match="k1"):
        make_config("drrag", {"k": 3, "k1": 4})
    with pytest.raises(ConfigError):
        make_config("drrag", {"selection": "bm25"})
    with pytest.raises(ConfigError):
        make_config("drrag", {"threshold": 1.5})
    assert make_config("drrag", {"threshold": ""}).threshold is None


def test_yes_probability_reads_the_first_token() -> None:
    assert yes_probability([(" yes", 0.6), (" no", 0.2), (" the", 0.1)], " yes")[0] == pytest.approx(0.75)
    assert yes_probability([(" No", 0.5), ("Yes", 0.5)], " No")[0] == pytest.approx(0.5)
    assert yes_probability([(" maybe", 0.9)], " yes")[0] == 1.0
    assert yes_probability([(" maybe", 0.9)], " No.")[0] == 0.0
    assert yes_probability([], "")[0] == 0.0
    prompt = judge_prompt(GREEN, Passage("a", "A", "word " * 200), Passage("b", "B", "short text"), words=10)
    assert prompt.count("word") == 9 and prompt.rstrip().endswith("Together they answer it:")
