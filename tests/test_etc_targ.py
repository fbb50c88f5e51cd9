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
from explorer.methods import common, prompts
from explorer.methods.base import make_config, run_question
from explorer.methods.etc.trend import first_trigger, trend
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


def _ema(values: list[float | None], alpha: float) -> list[float | None]:
    """The bias-corrected moving average, written as the weighted mean it equals."""
    present: list[float] = []
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        present.append(v)
        weights = [(1 - alpha) ** (len(present) - 1 - k) for k in range(len(present))]
        out.append(sum(w * x for w, x in zip(weights, present, strict=True)) / sum(weights))
    return out


def test_trend_differences_smoothing_and_trigger_on_a_written_series() -> None:
    tr = trend([1.0, 1.0, 2.0, 4.0, 4.5], alpha=1.0)
    assert tr.d1 == [None, 0.0, 1.0, 2.0, 0.5]
    assert tr.d2 == [None, None, 1.0, 1.0, -1.5]
    assert tr.smooth_d2 == tr.d2  # α = 1: no smoothing
    assert first_trigger(tr, slope=0.0, curvature=0.5) == 2
    assert first_trigger(tr, slope=0.0, curvature=0.5, start=4) is None  # Δ²H falls at the last token
    assert first_trigger(tr, slope=1.5, curvature=0.5) == 3  # the slope must be steep enough too
    smoothed = trend([1.0, 1.0, 2.0, 4.0, 4.5], alpha=0.3)
    assert smoothed.smooth_d1 == pytest.approx(_ema(smoothed.d1, 0.3))
    assert smoothed.smooth_d1[1] == 0.0 and smoothed.smooth_d2[2] == pytest.approx(1.0)  # the first is not damped


def check_etc(runtime: Runtime, config: dict) -> Trace:
    trace = run_question("etc", QUESTION, runtime, config=config)
    assert trace.status == "complete", trace.error
    trace.validate()
    tokens, logits = _first_span_logits(runtime, trace)
    entropy = _entropy(logits)
    alpha = trace.config["smoothing"]
    d1 = [None] + [b - a for a, b in zip(entropy, entropy[1:], strict=False)]
    d2 = [None, None] + [b - a for a, b in zip(d1[1:], d1[2:], strict=False)]
    s1, s2 = _ema(d1, alpha), _ema(d2, alpha)
    check = trace.of_kind("check")[0]
    units = check.payload["units"]
    assert [u["entropy"] for u in units] == pytest.approx(entropy, abs=2e-5)
    assert [t["signals"]["entropy"] for t in tokens] == [u["entropy"] for u in units]
    for u, a, b in zip(units, s1, s2, strict=True):
        assert (u["smooth_d1"] is None) == (a is None) and (u["smooth_d2"] is None) == (b is None)
        if a is not None:
            assert u["smooth_d1"] == pytest.approx(a, abs=5e-5)
        if b is not None:
            assert u["smooth_d2"] == pytest.approx(b, abs=1e-4) and u["value"] == u["smooth_d2"]
    # The decision follows the stated rule over the recorded series (and cuts right there).
    slope, theta = trace.config["slope"], trace.config["threshold"]
    expected = next((i for i, u in enumerate(units) if u["smooth_d1"] is not None and u["smooth_d2"] is not None
                     and u["smooth_d1"] > slope and u["smooth_d2"] > theta), None)
    assert check.payload["fired"] == expected
    if expected is not None:
        trigger = trace.of_kind("trigger")[0]
        assert trigger.payload["token_index"] == expected
        assert trace.of_kind("truncation")[0].payload["token_index"] == expected
        assert trace.of_kind("retrieval"), "a trigger retrieves"
    return trace


def test_etc_series_and_trigger_on_the_tiny_model(tiny_runtime) -> None:
    # The tiny model's entropies sit near log(vocab) and wobble by ~1e-4: θ = 0 fires on a rise.
    trace = check_etc(tiny_runtime, {"max_length": 16, "answer_tokens": 2, "threshold": 0.0, "max_rounds": 2})
    assert trace.of_kind("trigger")
    quiet = check_etc(tiny_runtime, {"max_length": 16, "answer_tokens": 2, "threshold": 1.0, "max_rounds": 1})
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
