"""Families whose cache, attention or MLP the engine once read wrongly, each checked against one full forward pass.

GPT-1 (``openai-gpt``) keeps no cache, RWKV carries its recurrence in a ``state`` list, RecurrentGemma keeps
its state inside its modules: fed one token at a time over a cache they ignore, they gave plausible and wrong
signals (amax = 0 on every GPT-1 token, entropies off by up to 2e-3). Zamba2 hides its attention inside a
shared block the probe first sat beside; Llama-4's mixture-of-experts MLP returns its tokens flattened.
The engine's own check (explorer.engine.signal_check) refuses a model whose stepwise signals disagree with
one full eager pass, and flex attention is refused on a CPU before anything loads.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

from explorer.engine import signal_check
from explorer.engine.context_cache import ContextCache
from explorer.engine.generation import Engine, Sampling
from explorer.engine.hidden import HiddenCapture, HiddenSpec
from explorer.engine.tiny import tiny_model
from explorer.errors import ModelError
from explorer.methods.base import run_question
from explorer.runtime import Runtime

PROMPT = "Question: Who lived longer, Alejandro Jodorowsky or Philip Saville? Think step by step.\nAnswer:"
QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
SHORT = {"max_length": 10, "fewshot": 1, "answer_tokens": 4}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@cache
def _tokenizer():
    from transformers import AutoTokenizer

    from explorer.engine.embedded import embedded_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)


@cache
def _lm(arch: str):
    return tiny_model(arch, seed=7, attn_implementation="auto", tokenizer=_tokenizer())


@cache
def _eager(arch: str):
    return tiny_model(arch, seed=7, attn_implementation="eager", tokenizer=_tokenizer()).model


def _full(arch: str, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities at every position and the last attention layer's head-mean weights, from one eager pass."""
    model = _eager(arch)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=False, output_attentions=True)
    attentions = [a for a in (getattr(out, "attentions", None) or ()) if isinstance(a, torch.Tensor) and a.dim() == 4]
    weights = attentions[-1][0].float().mean(0) if attentions else None
    return torch.log_softmax(out.logits[0].float(), dim=-1), weights


def _entropy(logp: torch.Tensor) -> float:
    return float(-(logp.exp() * logp).sum())


# -- amax of GPT-1, and the check that refuses a stepwise path that disagrees ---------------------------------
def test_gpt1_amax_is_the_full_pass_value_and_a_step_that_loses_its_context_is_refused() -> None:
    engine = Engine(_lm("openai-gpt"))
    assert engine.recompute is not None and isinstance(engine.new_cache(), ContextCache)
    assert "keeps no cache" in engine.fingerprint()["context_recomputed"]
    gen = engine.generate(PROMPT, max_new_tokens=6)
    p, n = len(gen.prompt_ids), len(gen.ids)
    _, attn = _full("openai-gpt", list(gen.prompt_ids) + gen.ids)
    for i in range(n - 1):
        expected = max(float(attn[p + j, p + i]) for j in range(i + 1, n))
        assert expected > 1e-3 and gen.tokens[i].amax == pytest.approx(expected, abs=1e-6), i
    assert any(t.rind is not None and t.rind > 0 for t in gen.tokens[:n - 1])  # RIND is no longer 0 throughout

    # The old path (one token fed over a cache the model ignores) is what the check exists for: refused, with why.
    broken = Engine(_lm("openai-gpt"))
    broken.recompute = None
    assert not signal_check.checked(broken)
    with pytest.raises(ModelError) as info:
        broken.generate(PROMPT, max_new_tokens=4)
    assert "disagree with one full forward pass" in info.value.message and "attention row" in info.value.message
    assert "--attn eager" in info.value.fix and "seakr" in info.value.fix
    assert signal_check.checked(broken)  # the verdict is kept: the next span is refused without a pass
    with pytest.raises(ModelError, match="disagree"):
        broken.attention_matrix(broken.tokenize("a few words here"))


def test_a_run_on_a_model_whose_signals_disagree_stops_with_the_reason(demo_retriever) -> None:
    engine = Engine(tiny_model("openai-gpt", seed=3, tokenizer=_tokenizer()))
    engine.recompute = None
    runtime = Runtime(engine=engine, retriever=demo_retriever, corpus={"spec": "demo"})
    trace = run_question("dragin", QUESTION, runtime, config=SHORT)
    assert trace.status == "error" and "disagree with one full forward pass" in trace.error, trace.error
    assert "Traceback" not in trace.error


# -- tracebacks once: GPT-1 and Llama-4 under SEAKR, RWKV under DRAGIN ----------------------------------------
@pytest.mark.parametrize("arch", ["openai-gpt", "llama4"])
def test_sampled_end_states_are_one_vector_per_sample_equal_to_a_full_pass(arch: str) -> None:
    engine = Engine(_lm(arch))
    spec = HiddenSpec()  # the middle layer's MLP: Llama-4's is a mixture of experts
    batch = engine.sample(PROMPT, k=3, max_new_tokens=5, sampling=Sampling(seed=2), hidden=spec)
    assert batch.samples and batch.site == "mlp"
    end = engine.tokenizer.eos_token_id
    for s in batch.samples:
        assert s.hidden is not None and s.hidden.shape == (engine.model.config.hidden_size,)
        with torch.inference_mode(), HiddenCapture(engine.model, spec) as capture:
            engine.model(input_ids=torch.tensor([batch.prompt_ids + s.ids + [end]]), use_cache=False)
        assert torch.allclose(s.hidden, capture.last[0, -1], atol=1e-5), (arch, s.row)


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_seakr_runs_on_gpt1(demo_retriever, variant: str) -> None:
    runtime = Runtime(engine=Engine(_lm("openai-gpt")), retriever=demo_retriever, corpus={"spec": "demo"})
    config = {**SHORT, "k": 3, "max_steps": 1, "step_tokens": 5, "candidates": 1, "compare_estimators": False}
    trace = run_question("seakr", QUESTION, runtime, variant=variant, config=config)
    assert trace.status == "complete", trace.error
    grams = [e.payload for e in trace.events if e.kind == "uncertainty" and e.payload["estimator"] == "gram"]
    assert grams and any(g["value"] is not None for g in grams)


def test_dragin_on_rwkv_is_refused_before_it_starts(demo_retriever) -> None:
    engine = Engine(_lm("rwkv"))
    assert not engine.probe.has_attention and engine.fingerprint()["attention_signals"] == "none"
    runtime = Runtime(engine=engine, retriever=demo_retriever, corpus={"spec": "demo"})
    trace = run_question("dragin", QUESTION, runtime, variant="paper", config=SHORT)
    assert trace.status == "error" and "has no attention layer" in trace.error, trace.error
    assert "pick a method that reads no attention" in trace.error and not trace.of_kind("generation")


# -- Zamba2's shared attention, and stepwise entropies of the families without a usable cache -------------------
def test_zamba2_amax_is_read_from_its_shared_attention_block() -> None:
    engine = Engine(_lm("zamba2"))
    assert type(engine.probe.module).__name__ == "Zamba2Attention"
    gen = engine.generate(PROMPT, max_new_tokens=6)
    p, n = len(gen.prompt_ids), len(gen.ids)
    _, attn = _full("zamba2", list(gen.prompt_ids) + gen.ids)
    for i in range(n - 1):
        expected = max(float(attn[p + j, p + i]) for j in range(i + 1, n))
        assert gen.tokens[i].amax == pytest.approx(expected, abs=1e-6), i
    # A probe left on the block around the attention (where it once sat) gets nothing: the error says that,
    # not that the attention implementation changed (it did not).
    block = engine.model.model.layers[1].shared_transformer
    del engine.probe.module._explorer_probe
    block._explorer_probe, engine.probe.module = engine.probe, block
    with pytest.raises(ModelError) as info:
        engine.generate(PROMPT, max_new_tokens=3)
    assert "changed after" not in info.value.message
    assert "Zamba2AttentionDecoderLayer) was not run through the attention implementation" in info.value.message


@pytest.mark.parametrize("arch", ["rwkv", "openai-gpt", "recurrent_gemma"])
def test_stepwise_entropies_equal_a_full_pass(arch: str) -> None:
    """Greedy spans and sampled rows (some leaving the batch early, which reset RecurrentGemma's state)."""
    engine = Engine(_lm(arch))
    assert isinstance(engine.new_cache(), ContextCache)
    gen = engine.generate(PROMPT, max_new_tokens=8, attention=False)
    logp, _ = _full(arch, list(gen.prompt_ids) + gen.ids)
    p = len(gen.prompt_ids)
    for i, token in enumerate(gen.tokens):
        assert token.entropy == pytest.approx(_entropy(logp[p - 1 + i]), abs=2e-5), (arch, i)
    batch = engine.sample(PROMPT, k=4, max_new_tokens=10, stop_strings=["s"],
                          sampling=Sampling(seed=1, temperature=3.0, top_k=None, top_p=None))
    lengths = {len(s.ids) for s in batch.samples}
    assert len(lengths) > 1  # rows left the batch at different steps
    for s in batch.samples:
        logp, _ = _full(arch, batch.prompt_ids + s.ids)
        for i, entropy in enumerate(s.entropies):
            assert entropy == pytest.approx(_entropy(logp[p - 1 + i]), abs=2e-5), (arch, s.row, i)


# -- flex attention on a CPU ------------------------------------------------------------------------------------
def test_flex_attention_on_a_cpu_is_refused_with_the_alternative(tmp_path) -> None:
    from explorer.engine.loader import load_model
    from explorer.engine.random_models import load_random_model

    with pytest.raises(ModelError) as info:
        load_random_model("random:tiny", attn_implementation="flex_attention")
    assert "--attn flex_attention on a CPU" in info.value.message and "--attn sdpa" in info.value.fix
    folder = tmp_path / "llama"
    lm = tiny_model("llama", seed=1)
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    with pytest.raises(ModelError) as info:
        load_model(str(folder), attn_implementation="flex_attention", device="cpu", progress=lambda _m: None)
    assert "on a CPU" in info.value.message and "--device cuda" in info.value.fix
