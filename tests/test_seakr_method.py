"""SEAKR as a method: its query rule and answer choice, and whole runs on the embedded model and the demo corpus."""

from __future__ import annotations

import json

import pytest

from explorer.engine.generation import Engine, Generation
from explorer.errors import ConfigError
from explorer.methods import run_question
from explorer.methods.base import make_config
from explorer.methods.seakr.answer import _choose, without_answer
from explorer.methods.seakr.query import build_query
from explorer.runtime import Runtime
from explorer.summary import render_text
from explorer.trace import TokenSignal, Trace

JODOROWSKY = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
INCEPTION = "Where was the director of the film Inception born?"
# Small enough for the slow tests to stay modest; the defaults stay the paper's.
SMALL = {"k": 3, "step_tokens": 16, "max_steps": 2, "candidates": 2, "max_length": 32, "answer_tokens": 12,
         "fewshot": 2}


def _pseudo(pieces: list[tuple[str, float]]) -> Generation:
    tokens = [TokenSignal(id=i, text=t, prob=p, entropy=0.0, top=[]) for i, (t, p) in enumerate(pieces)]
    return Generation(purpose="pseudo", prompt="", prompt_ids=[], segments=[], ids=[t.id for t in tokens],
                      tokens=tokens, text="".join(t for t, _ in pieces), stopped_by="sentence_end")


def test_query_keeps_sure_or_grounded_content_words(language) -> None:
    pseudo = _pseudo([(" Alejandro", 0.99), (" Jod", 0.97), ("orowsky", 0.95), (" was", 0.99), (" born", 0.92),
                      (" on", 0.99), (" 7", 0.30), (" July", 0.40), (" 1929", 0.2), (" in", 0.99),
                      (" Tocopilla", 0.5), (".", 0.99)])
    q = build_query(pseudo, JODOROWSKY, last_step="", threshold=0.1)
    words = {w["text"]: w for w in q.words}
    assert q.text == "Alejandro Jodorowsky born"
    assert not words["1929"]["sure"] and not words["1929"]["kept"], "unsure numbers are the gap retrieval fills"
    assert words["was"]["sure"] and not words["was"]["content"] and not words["was"]["kept"]
    assert not words["Tocopilla"]["kept"]
    # A word the previous step already wrote is kept however unsure the model was of it now.
    grounded = build_query(pseudo, JODOROWSKY, last_step="He was born in Tocopilla.", threshold=0.1)
    assert "Tocopilla" in grounded.text.split()
    # Nothing usable: the question's content words are the query.
    empty = build_query(_pseudo([(" the", 0.2), (" of", 0.3)]), JODOROWSKY, last_step="", threshold=0.1)
    assert empty.fallback and "Jodorowsky" in empty.text and "Saville" in empty.text


def test_answer_sentences_are_removed_from_the_rationales(language) -> None:
    steps = ["Philip Saville died in 2016.", "Jodorowsky is still alive. So the answer is Alejandro Jodorowsky."]
    assert without_answer(steps) == ["Philip Saville died in 2016.", "Jodorowsky is still alive."]
    assert without_answer(["So the answer is yes."]) == []


def test_answer_choice_rules() -> None:
    def opt(strategy: str, answer: str | None, value: float | None) -> dict:
        return {"strategy": strategy, "answer": answer, "value": value}

    assert _choose([opt("rationales", "A", -5.0), opt("knowledge", "B", -4.0)])[0]["strategy"] == "rationales"
    assert _choose([opt("rationales", "A", -3.0), opt("knowledge", "B", -4.0)])[0]["strategy"] == "knowledge"
    assert _choose([opt("rationales", None, -9.0), opt("knowledge", "B", 1.0)])[0]["strategy"] == "knowledge"
    assert _choose([opt("rationales", "unknown", -9.0), opt("knowledge", "B", 1.0)])[0]["strategy"] == "knowledge"
    assert _choose([opt("rationales", "A", None), opt("knowledge", "B", 1.0)])[0]["strategy"] == "knowledge"


def test_config_defaults_are_the_papers_and_bad_values_are_refused() -> None:
    cfg = make_config("seakr", {})
    assert (cfg.k, cfg.temperature, cfg.sample_top_k, cfg.sample_top_p) == (20, 1.0, 50, 0.9)
    assert (cfg.alpha, cfg.delta, cfg.candidates, cfg.max_steps, cfg.max_docs) == (1e-3, -6.0, 3, 7, 5)
    assert (cfg.layer, cfg.site, cfg.estimator) == (None, "mlp", "gram")
    assert make_config("seakr", {"layer": "12", "estimator": "energy"}).layer == 12
    for bad in ({"k": 1}, {"estimator": "vibes"}, {"site": "attention"}, {"alpha": 0}, {"sample_top_p": 1.5}):
        with pytest.raises(ConfigError):
            make_config("seakr", bad)


# -- whole runs ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runtime(embedded_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    """The tiny random model: for what the method's own logic decides, whatever the model writes."""
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def _comparable(trace: Trace) -> dict:
    """The trace without what legitimately differs between identical runs: ids, dates and timings."""
    d = trace.to_dict()
    for key in ("run_id", "created_at"):
        d.pop(key)
    d["costs"].pop("wall_time")
    d["costs"].pop("total_time")
    for e in d["events"]:
        e.pop("t")
        e["payload"].pop("seconds", None)
    return d


def _check_run(trace: Trace, k: int) -> None:
    assert trace.status == "complete", trace.error
    trace.validate()
    json.loads(trace.to_json())
    checks = [e for e in trace.of_kind("check") if e.payload["unit"] == "step"]
    assert checks, "every step records its decision"
    reference = trace.variant == "reference"
    for c in checks:
        unit = c.payload["units"][0]
        fired = unit["value"] is not None and unit["value"] > c.payload["threshold"]
        if reference:  # the authors' rule: an empty step retrieves too, a step stating an answer never does
            fired = (fired or c.payload["empty"]) and not c.payload["answered"]
        assert (c.payload["fired"] is not None) == fired
        assert trace.event(c.payload["span"]).kind == "generation"
    grams = [e for e in trace.of_kind("uncertainty") if e.payload["estimator"] == "gram"]
    for g in grams:
        p = g.payload
        # SmolLM2 has 30 layers: the middle one is 15; the reference takes L // 2 - 1 (the authors' 15 of 32).
        assert p["layer"] == (14 if reference else 15) and p["site"] == "mlp" and p["k"] == k
        assert len(p["samples"]) + p["empty"] == k and p["valid"] == len(p["samples"])
        if p["value"] is not None:
            assert len(p["eigenvalues"]) == p["valid"] and min(p["eigenvalues"]) >= p["alpha"] * 0.999
    for r in trace.of_kind("rerank"):
        cands = r.payload["candidates"]
        scored = [c for c in cands if c["value"] is not None and c["rationale"].strip()]
        if scored:
            assert r.payload["chosen"] == min(scored, key=lambda c: c["value"])["id"]
        assert all("rank" in c and "score" in c for c in cands)
    choice = trace.of_kind("choice")
    assert len(choice) == 1 and {o["strategy"] for o in choice[0].payload["options"]} == {"rationales", "knowledge"}
    assert "the answer is" in trace.output.lower()
    costs = trace.costs
    assert costs.retrievals == len(trace.of_kind("retrieval"))
    assert costs.sampled_sequences == k * len(grams)
    batches = [e for e in trace.of_kind("generation") if "batch" in e.payload]
    completions = [e for e in trace.of_kind("generation") if "batch" not in e.payload]
    assert len(batches) == len(grams)
    assert costs.llm_calls == len(batches) + len(completions)
    text = render_text(trace)
    assert text.count("~ U(gram)") == len(grams) and "⚖ rationales:" in text
    assert text.count("re-ranked by") == len(trace.of_kind("rerank"))


@pytest.mark.slow
def test_seakr_on_the_case_study_question(runtime: Runtime) -> None:
    trace = run_question("seakr", JODOROWSKY, runtime, config=SMALL)
    _check_run(trace, k=3)


def test_a_seeded_run_repeats_itself_and_another_seed_samples_otherwise(tiny_runtime: Runtime) -> None:
    """Seeding is the method's and the engine's, not the model's: the tiny model repeats a run as the embedded
    one would, in a fraction of the time. A retrieval on every step, so the re-ranking's samples repeat too."""
    config = {**SMALL, "delta": -1e6}
    trace = run_question("seakr", JODOROWSKY, tiny_runtime, config=config)
    assert trace.status == "complete", trace.error
    assert trace.of_kind("rerank"), "the run retrieved and re-ranked"
    again = run_question("seakr", JODOROWSKY, tiny_runtime, config=config)
    assert _comparable(again) == _comparable(trace), "a seeded run must repeat itself exactly"
    other_seed = run_question("seakr", JODOROWSKY, tiny_runtime, config={**SMALL, "seed": 1, "max_steps": 1,
                                                                         "delta": 1e6})
    samples = [[s["text"] for s in e.payload["samples"]] for e in trace.of_kind("uncertainty")
               if e.payload["estimator"] == "gram"]
    other = [[s["text"] for s in e.payload["samples"]] for e in other_seed.of_kind("uncertainty")
             if e.payload["estimator"] == "gram"]
    assert samples[0] != other[0], "the seed must change the samples"


@pytest.mark.slow
def test_seakr_reference_variant_on_another_demo_question(runtime: Runtime) -> None:
    trace = run_question("seakr", INCEPTION, runtime, variant="reference", config=SMALL)
    _check_run(trace, k=3)
    assert trace.variant == "reference"
    # The reference carries every kept passage in later contexts.
    kept = [r.payload["chosen"] for r in trace.of_kind("rerank")]
    if kept:
        later = [e for e in trace.of_kind("generation") if e.id > trace.of_kind("rerank")[0].id
                 and e.payload["purpose"] in ("pseudo", "rerank")]
        for e in later:
            assert any(label == "context" for label, _s, _e in e.payload["prompt_segments"])


def test_threshold_and_estimator_decide(tiny_runtime: Runtime) -> None:
    """The threshold and the estimator decide whatever the model: on the tiny model, as on any."""
    runtime = tiny_runtime
    never = run_question("seakr", JODOROWSKY, runtime, config={**SMALL, "delta": 1e6, "estimator": "ln_entropy"})
    assert never.status == "complete", never.error
    assert never.costs.retrievals == 0 and all(c.payload["fired"] is None for c in never.of_kind("check"))
    assert all(c.payload["signal"] == "U(ln_entropy)" for c in never.of_kind("check"))
    primary = [e for e in never.of_kind("uncertainty") if e.payload["primary"]]
    assert primary and all(e.payload["estimator"] == "ln_entropy" for e in primary)
    always = run_question("seakr", JODOROWSKY, runtime, config={**SMALL, "delta": -1e6, "max_steps": 1})
    assert always.costs.retrievals == 1 and always.of_kind("check")[0].payload["fired"] == 0
    assert len(always.of_kind("rerank")) == 1
