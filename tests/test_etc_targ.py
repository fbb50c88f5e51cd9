"""ETC and TARG: their signals against a recomputation from one full forward pass, and their decisions.

The recomputation runs the first span's prompt and generated tokens through the model once and
derives, by the textbook definitions, the token entropies (ETC's series, then its differences and
moving averages written out again here) and the top-1/top-2 logit gaps (TARG's margin); the runs'
check events must hold the same numbers and decide by the stated rules.
"""

from __future__ import annotations

import math

import pytest
import torch

from explorer.engine.generation import Engine
from explorer.engine.signals import Word
from explorer.methods import common, prompts
from explorer.methods.base import make_config, run_question
from explorer.methods.etc.trend import sentence_scores, trend, word_entropies
from explorer.runtime import Runtime
from explorer.trace import Trace

QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"


def _runtime(lm, retriever) -> Runtime:
    return Runtime(engine=Engine(lm), retriever=retriever, corpus={"name": "demo"})


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return _runtime(tiny_lm, demo_retriever)


def _first_span_logits(runtime: Runtime, trace: Trace) -> tuple[list[dict], torch.Tensor]:
    """The first generation's tokens and, from one full forward pass, the raw logits each was chosen from."""
    gen = trace.of_kind("generation")[0]
    cfg = make_config(trace.method, trace.config)
    segments = prompts.build_prompt(trace.question, shots=common.shots(cfg, trace.question))
    engine = runtime.engine
    _, prompt_ids, _ = engine.encode_prompt(segments)
    assert len(prompt_ids) == gen.payload["prompt_tokens"]
    ids = [t["id"] for t in gen.payload["tokens"]]
    with torch.inference_mode():
        logits = engine.lm.model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float()
    p = len(prompt_ids)
    return gen.payload["tokens"], logits[p - 1: p - 1 + len(ids)]


def _entropy(logits: torch.Tensor) -> list[float]:
    logp = torch.log_softmax(logits, dim=-1)
    return [float(-(row.exp() * row).sum()) for row in logp]


def _authors_series(entropy: list[float], content: list[bool]) -> tuple[list[float], list[float], list[float]]:
    """The authors' differences and dynamic smoothing, written again as their loops read (indices and all)."""
    n = len(entropy)
    s1, s2, mt = [0.0] * n, [0.0] * n, [0.0] * n
    for i in range(1, n):
        if content[i]:
            j = i - 1
            while j >= 0:
                if content[j]:
                    s1[i] = entropy[i] - entropy[j]
                    break
                if j == 0:
                    break
                j -= 1
    for i in range(2, n):
        if content[i]:
            j = i - 1
            while j >= 1:
                if s1[j] != 0:
                    s2[i] = s1[i] - s1[j]
                    break
                if j == 1:
                    break
                j -= 1
    count, total, prev = 0, 0.0, 0.0
    for i in range(2, n):
        if s2[i] != 0:
            count += 1
            total += s2[i]
            mean = total / count
            w = abs(prev - mean) / (abs(s2[i] - mean) + abs(prev - mean))
            a = 0.9 + 0.1 * w
            mt[i] = a * s2[i] + (1 - a) * prev
            prev = s2[i]
    return s1, s2, mt


def test_trend_differences_and_dynamic_smoothing_on_a_written_series() -> None:
    entropy = [2.0, 0.5, 1.0, 3.0, 0.2, 2.5, 4.0]
    content = [True, False, True, True, False, True, True]
    tr = trend(entropy, content)
    # ΔH skips the function words: word 2 is compared with word 0, word 5 with word 3.
    assert tr.d1 == pytest.approx([0.0, 0.0, -1.0, 2.0, 0.0, -0.5, 1.5])
    # Δ²H compares with the previous NON-ZERO ΔH: word 5 with word 3's, word 6 with word 5's.
    assert tr.d2 == pytest.approx([0.0, 0.0, 0.0, 3.0, 0.0, -2.5, 2.0])
    # First non-zero Δ²H: E = 3, w = |0 - 3| / (0 + 3) = 1, α = 1, M = 3.
    assert tr.smooth[3] == pytest.approx(3.0) and tr.weight[3] == pytest.approx(1.0)
    # Then E = 0.25, w = 2.75 / (2.75 + 2.75) = 0.5, α = 0.95, M = 0.95(-2.5) + 0.05(3).
    assert tr.mean[5] == pytest.approx(0.25) and tr.smooth[5] == pytest.approx(0.95 * -2.5 + 0.05 * 3.0)
    s1, s2, mt = _authors_series(entropy, content)
    assert (tr.d1, tr.d2) == (pytest.approx(s1), pytest.approx(s2)) and tr.smooth == pytest.approx(mt)
    assert word_entropies([1.0, 3.0, 2.0], [Word(0, 2, "ab"), Word(2, 3, "c")]) == [3.0, 2.0]  # max per word
    # The indicator: attention scaled to mean 1 in each sentence, times M.
    assert sentence_scores([1.0, 3.0, 2.0], [2.0, 1.0, 5.0], [(0, 2), (2, 3)]) == pytest.approx([1.0, 1.5, 5.0])


def check_etc(runtime: Runtime, config: dict) -> Trace:
    trace = run_question("etc", QUESTION, runtime, config=config)
    assert trace.status == "complete", trace.error
    trace.validate()
    tokens, logits = _first_span_logits(runtime, trace)
    token_entropy = _entropy(logits)
    assert [t["signals"]["entropy"] for t in tokens] == pytest.approx(token_entropy, abs=2e-5)
    check = trace.of_kind("check")[0]
    units = check.payload["units"]
    # Words: max token entropy; the series by the authors' loops over the recorded content flags.
    entropy = [max(token_entropy[a:b]) for a, b in (u["tokens"] for u in units)]
    assert [u["entropy"] for u in units] == pytest.approx(entropy, abs=2e-5)
    s1, s2, mt = _authors_series([u["entropy"] for u in units], [u["content"] for u in units])
    assert [u["d1"] for u in units] == pytest.approx(s1, abs=1e-9)
    assert [u["d2"] for u in units] == pytest.approx(s2, abs=1e-9)
    assert [u["smooth"] for u in units] == pytest.approx(mt, abs=1e-9)
    # Attention from one eager pass over prompt + span: a word's largest share on one span word.
    gen = trace.of_kind("generation")[0]
    engine = runtime.engine
    p = gen.payload["prompt_tokens"]
    span = [t["id"] for t in tokens]
    cfg = make_config(trace.method, trace.config)
    _, prompt_ids, _ = engine.encode_prompt(prompts.build_prompt(trace.question, shots=common.shots(cfg, QUESTION)))
    with torch.inference_mode():
        out = engine.lm.model(input_ids=torch.tensor([prompt_ids + span]), output_attentions=True)
    rows = out.attentions[-1][0].float().mean(dim=0)[p:]
    for u in units:
        a, b = u["tokens"]
        row = rows[a:b].mean(dim=0)
        best = max(float(row[p + c:p + d].sum()) for c, d in (v["tokens"] for v in units))
        assert u["attention"] == pytest.approx(best / float(row.sum()), abs=1e-4)
    # The indicator and the decision by the stated rule (and the cut at that word).
    for n in {u["sentence"] for u in units if u["sentence"] >= 0}:
        members = [u for u in units if u["sentence"] == n]
        total = sum(u["attention"] for u in members)
        for u in members:
            assert u["value"] == pytest.approx(u["attention"] * len(members) / total * u["smooth"], abs=1e-6)
    theta = trace.config["threshold"]
    expected = next((i for i, u in enumerate(units) if u["eligible"] and u["value"] > theta), None)
    assert check.payload["fired"] == expected
    assert all(not u["eligible"] for u in units if not u["content"])
    if expected is not None:
        trigger = trace.of_kind("trigger")[0]
        assert trigger.payload["token_index"] == units[expected]["tokens"][0]
        assert trace.of_kind("truncation")[0].payload["token_index"] == units[expected]["tokens"][0]
        retrieval = trace.of_kind("retrieval")[0]
        query = trace.event(retrieval.payload["query"]).payload
        assert query["text"] and len(query["chosen"]) <= trace.config["top_n"]
    return trace


def test_etc_series_and_trigger_on_the_tiny_model(tiny_runtime) -> None:
    # The tiny model's entropies sit near log(vocab) and wobble by ~1e-4: a negative θ fires at once.
    trace = check_etc(tiny_runtime, {"max_length": 16, "answer_tokens": 2, "threshold": -1.0, "max_rounds": 2})
    assert trace.of_kind("trigger")
    quiet = check_etc(tiny_runtime, {"max_length": 16, "answer_tokens": 2, "threshold": 50.0, "max_rounds": 1})
    assert not quiet.of_kind("trigger") and not quiet.of_kind("retrieval")


def check_targ(runtime: Runtime, config: dict) -> Trace:
    trace = run_question("targ", QUESTION, runtime, config=config)
    assert trace.status == "complete", trace.error
    trace.validate()
    tokens, logits = _first_span_logits(runtime, trace)
    assert len(tokens) <= trace.config["prefix_tokens"]
    top = torch.topk(logits, 2, dim=-1).values
    margins = [math.exp(-(float(a) - float(b))) for a, b in top]
    entropies = _entropy(logits)
    assert [t["signals"]["margin"] for t in tokens] == pytest.approx(margins, rel=1e-4, abs=1e-6)
    check = trace.of_kind("check")[0]
    unit = check.payload["units"][0]
    gate = trace.config["gate"]
    score = sum(margins if gate == "margin" else entropies) / len(tokens)
    assert unit["value"] == pytest.approx(score, rel=1e-4)
    assert unit["scores"]["entropy"] == pytest.approx(sum(entropies) / len(tokens), abs=2e-5)
    opened = unit["value"] > trace.config["threshold"]
    assert (check.payload["fired"] == 0) == opened
    retrievals = trace.of_kind("retrieval")
    assert len(retrievals) == (1 if opened else 0)
    if opened:
        assert trace.event(retrievals[0].payload["query"]).payload["text"] == QUESTION
        assert trace.of_kind("continuation"), "the answer is written with the passages"
    else:
        assert gen_text_starts_output(trace)
    return trace


def gen_text_starts_output(trace: Trace) -> bool:
    """With the gate shut the answer continues the draft."""
    return trace.output.startswith(trace.of_kind("generation")[0].payload["text"].strip())


def test_targ_margin_and_gate_on_the_tiny_model(tiny_runtime) -> None:
    base = {"max_length": 24, "answer_tokens": 4, "prefix_tokens": 8}
    check_targ(tiny_runtime, {**base, "threshold": 0.5})  # the tiny model's runner-up is nearly tied: opens
    check_targ(tiny_runtime, {**base, "threshold": 1.0})  # p2/p1 never exceeds 1: shut
    check_targ(tiny_runtime, {**base, "gate": "entropy", "threshold": 5.0})


@pytest.mark.slow
def test_etc_and_targ_signals_on_the_embedded_model(embedded_lm, demo_retriever) -> None:
    runtime = _runtime(embedded_lm, demo_retriever)
    # One round each, short: the series and the score are what is checked, not the answer.
    check_etc(runtime, {"max_length": 16, "answer_tokens": 2, "max_rounds": 1, "fewshot": 1})
    check_targ(runtime, {"max_length": 8, "answer_tokens": 2, "prefix_tokens": 8, "gate": "entropy", "fewshot": 1,
                         "threshold": 0.5})


def test_etc_and_targ_run_in_an_evaluation_with_untouched_controls(tiny_runtime, tmp_db) -> None:
    """The evaluation surface: both methods with every control at its default (only the length is shortened)."""
    from explorer.eval.runner import EvalSettings, build_arms, run_evaluation
    from explorer.store import RunStore

    store = RunStore(tmp_db)
    arms = build_arms(["etc", "targ"], settings=["max_length=12"])
    settings = EvalSettings(name="recent", datasets=["demo"], arms=arms, limit=1, model="embedded", corpus="demo",
                            batch_size=8)
    run_evaluation(settings, store, runtime=tiny_runtime, show_progress=False)
    traces = [trace for _, trace in store.traces(evaluation="recent")]
    assert sorted(t.method for t in traces) == ["etc", "targ"]
    for trace in traces:
        assert trace.status == "complete", trace.error
        trace.validate()
        defaults = make_config(trace.method, {}).to_dict()
        changed = {k for k, v in trace.config.items() if defaults.get(k) != v}
        assert changed <= {"max_length"}, changed
        assert trace.of_kind("check"), "the decision is in the trace"
