"""Differential tests: SEAKR's reference variant and an independent oracle of the authors' reasoner agree.

The oracle (tests/seakr_oracle.py) re-implements ``MultiHopReasoner`` from the authors' code. A run
of the reference variant records every call the engine makes (prompt, stop strings, greedy
tokens, the samples and their end states); the oracle then runs the authors' loop on those very
outputs, checking that each prompt and stop list the engine was given is the one the authors'
loop builds at that point, and deciding every step, query, kept passage and final choice itself.
The decisions must be identical. The rules are also compared one by one on hand-made inputs.
"""

from __future__ import annotations

import math

import pytest

from explorer.engine.generation import Engine
from explorer.methods import common, run_question
from explorer.methods import prompts as project_prompts
from explorer.methods.base import make_config
from explorer.methods.seakr import reference as rules
from explorer.runtime import Runtime
from tests import seakr_oracle as oracle

QUESTIONS = ("Who lived longer, Alejandro Jodorowsky or Philip Saville?",
             "Where was the director of the film Inception born?",
             "Which country is the birthplace of the composer of Jurassic Park's score?")
FAST = {"k": 3, "step_tokens": 16, "max_steps": 4, "max_length": 24, "answer_tokens": 8, "fewshot": 2}


def _oracle_decisions(runtime: Runtime, question: str, config: dict, calls: list[oracle.Call]) -> list:
    cfg = make_config("seakr", config)
    reasoner = oracle.Reasoner(question, common.shots(cfg, question), calls, runtime.retriever.search,
                               runtime.engine.tokenizer, eigen_threshold=cfg.delta,
                               prob_threshold=cfg.query_threshold, alpha=cfg.alpha)
    return reasoner.solve(cfg.max_steps, cfg.max_docs)


def run_both(runtime: Runtime, question: str, config: dict) -> list[tuple[str, object]]:
    """Run the reference variant, replay its calls through the oracle, require identical decisions."""
    with oracle.recorder(runtime.engine) as calls:
        trace = run_question("seakr", question, runtime, variant="reference", config=config)
    assert trace.status == "complete", trace.error
    theirs = _oracle_decisions(runtime, question, config, calls)
    ours = oracle.trace_decisions(trace)
    assert ours == theirs, (question, config["delta"])
    return ours


# -- rule by rule, on hand-made inputs ------------------------------------------------------------

ANSWERS = ["So the answer is Paris.", "so the answer is: Rome, Italy", "The answer is 1963", "the answer is, yes.",
           "He died. London is the answer", "Thus London is the answer.", "", "No answer here.",
           "The Answer Is\nTokyo."]


@pytest.mark.parametrize("text", ANSWERS)
def test_answer_pattern_matches_the_authors(text: str) -> None:
    assert rules.final_answer(text) == oracle.check_final_answer(text)


def test_answer_choice_matches_the_authors() -> None:
    cases = [(None, 1.0, "x", 2.0), ("unknown", 0.0, "x", 2.0), ("a", 1.0, None, 0.0), ("a", 1.0, "Unknown x", 0.0),
             ("a", 1.0, "b", 1.0), ("a", 0.5, "b", 1.0), ("a", 2.0, "b", 1.0), ("", 3.0, "b", 1.0)]
    for step, su, read, ru in cases:
        r = oracle.Reasoner("q", "", [], None, None, eigen_threshold=0.0, prob_threshold=0.1, alpha=1e-3)
        r.final_step_answer, r.final_step_score, r.final_read_answer, r.final_read_answer_score = step, su, read, ru
        want = r.compare_answer()
        assert {"steps": "rationales", "docs": "knowledge"}[rules.choose(step, su, read, ru)[0]] == want


def test_rerank_keeps_search_order_on_ties_and_when_every_step_is_empty() -> None:
    assert rules.rerank_order([("", 0.1), (" ", -3.0), ("", 5.0)]) == [0, 1, 2]
    assert rules.rerank_order([("a", 2.0), ("", -9.0), ("b", 2.0), ("c", 1.0)]) == [3, 0, 2, 1]


def test_query_rules_match_the_authors(language) -> None:
    """Sure words, grounding by case-sensitive substring, the last sentence only, tagging of the joined query."""
    engine_tokens = [
        ("The film Inception was directed by Christopher Nolan", ["The", " film", " In", "ception", " was",
                                                                   " directed", " by", " Christopher", " Nolan"]),
        ("Nolan was born in London. Thus he is British", ["N", "olan", " was", " born", " in", " London", ".",
                                                          " Thus", " he", " is", " British"]),
        ("It cannot be U.S.-based", ["It", " cannot", " be", " U", ".", "S", ".-", "based"]),
    ]
    question = rules.clean_question("Where was the director of the film Inception born? He was famous.")
    for text, pieces in engine_tokens:
        for probs in ([0.95] * len(pieces), [0.5 if i % 2 else 0.99 for i in range(len(pieces))], [0.3] * len(pieces)):
            for last in ("", "Christopher Nolan directed it"):
                ours = rules.build_query(text, pieces, probs, question, last, 0.1, language)
                r = oracle.Reasoner(question, "", [], None, None, eigen_threshold=0.0, prob_threshold=0.1, alpha=1e-3)
                if last:
                    r.running_steps = [oracle.Step(last)]
                raw = r.build_query(oracle.Step(text, pieces=pieces, probs=probs))
                theirs = r.filter_words(raw) or r.filter_words(r.question)
                assert ours.raw == raw and ours.query == theirs, (text, probs, last)


def test_prompt_template_matches_the_authors() -> None:
    shots = project_prompts.exemplars("Who?", "auto", 2)
    r = oracle.Reasoner("Who was St. Peter?", shots, [], None, None, eigen_threshold=0.0, prob_threshold=0.1,
                        alpha=1e-3)
    question = rules.clean_question("Who was St. Peter?")
    for steps, docs in (([], []), (["A. B was here.", ""], []), ([], ["d1", "d2"]), (["x"], ["d"])):
        text = "".join(t for _, t in rules.prompt_segments(question, shots, steps, docs))
        assert text == r.template(steps or None, docs or None)
        stops = r.prepare([oracle.Step(s) for s in steps] or None, docs)[1]
        assert set(rules.step_stops(bool(steps))) == set(stops)


def test_a_single_sample_is_scored_and_none_reads_as_zero() -> None:
    import torch

    from explorer.engine.sampling import Sample
    from explorer.engine.uncertainty import gram

    state = torch.randn(16)
    one = [Sample(row=0, ids=[1], text="x", stopped_by="eos", logprobs=[0.0], entropies=[0.0], energies=[0.0],
                  hidden=state)]
    assert gram(one).value is None
    scored = gram(one, min_samples=1).value
    assert scored is not None and math.isclose(scored, oracle.eigen_score([state], 1e-3), rel_tol=1e-9)
    assert rules.read_u(None) == 0.0


# -- whole runs -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def test_tiny_model_runs_decide_as_the_authors(tiny_runtime: Runtime) -> None:
    """Three questions at three thresholds on the tiny random model (its U lies near log α, about -6.7)."""
    decisions = []
    for question, delta in zip(QUESTIONS, (-6.72, -7.0, -6.0), strict=True):
        decisions += run_both(tiny_runtime, question, {**FAST, "delta": delta})
    kinds = {k for k, _ in decisions}
    retrieved = [v for k, v in decisions if k == "retrieve"]
    assert any(retrieved) and not all(retrieved)
    assert {"query", "kept", "final"} <= kinds


@pytest.fixture(scope="module")
def embedded_runtime(embedded_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})


@pytest.mark.slow
def test_embedded_model_runs_decide_as_the_authors(embedded_runtime: Runtime) -> None:
    decisions = []
    for question, delta in ((QUESTIONS[1], -6.0), (QUESTIONS[0], 4.8)):
        decisions += run_both(embedded_runtime, question, {**FAST, "delta": delta, "max_steps": 2, "fewshot": 1,
                                                           "step_tokens": 12, "max_length": 16, "answer_tokens": 6})
    assert {"retrieve", "query", "kept", "final"} <= {k for k, _ in decisions}


def test_reference_layer_is_the_authors_index_on_llama_depth() -> None:
    """L // 2 - 1: index 15 of Llama-2-7B's 32 layers (the paper variant's L // 2 would be 16), 14 of SmolLM2's 30."""
    from types import SimpleNamespace

    import torch.nn as nn

    from explorer.methods.seakr.reference_loop import reference_layer

    def stack(n: int) -> nn.Module:
        model = nn.Module()
        model.config = SimpleNamespace(num_hidden_layers=n)
        model.layers = nn.ModuleList(nn.Identity() for _ in range(n))
        return model

    assert [reference_layer(stack(n)) for n in (32, 30, 18, 2)] == [15, 14, 8, 0]
