"""The architecture matrix: nineteen model families x the methods whose signals depend on the model.

Each family is a tiny randomly initialised model built from its config (hidden size 64, 2-3
layers, the embedded tokenizer), loaded as ``--attn auto`` loads it. Every method run must
complete, and every signal it used is checked against a direct recomputation from ONE full
forward pass of an eager copy of the same weights with ``output_attentions=True``: entropy of
every greedy token (to 1e-5 relative: entropies here are near ln|V| = 10.8), amax of every
token DRAGIN read (to 1e-5), the attention matrices of the reference DRAGIN and its QFS (to
1e-5), SEAKR's uncertainty and DR-RAG's pair judgements (finite). Mistral, Gemma-2 and Gemma-3
have a sliding window of 16 on the last layer, shorter than every prompt here, which is the case
that used to leave amax empty; their traces must also say the window size. Jamba (Mamba layers around
one attention layer) and Mamba (no attention layer) carry recurrent state in their caches, which can
be neither cut back nor repeated as keys are: on Jamba every method runs (amax and QFS read its last
attention layer); on Mamba the methods that read attention (DRAGIN) are refused with the fix and the
rest run (SEAKR on the residual stream, since a Mamba block has no MLP). GPT-1 (no cache), RWKV (its
recurrence in a state list, no attention weights: DRAGIN refused) and RecurrentGemma (its state inside its
modules; a window of 16 on its last, attending layer) re-read their whole context every pass; Zamba2 reads its
shared attention block; Llama-4 attends in chunks of 16 and its MLP is a mixture of experts.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch

from explorer.engine.generation import Engine, Generation
from explorer.engine.tiny import RECURRENT, WINDOW, WITHOUT_ATTENTION, architectures, tiny_model
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.ui.panels.strip import window_note
from explorer.ui.views.view import TraceView


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on two shared cores waiting for them costs 10x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
SHORT = {"max_length": 14, "fewshot": 1, "answer_tokens": 4}
METHOD_RUNS = {
    "dragin-paper": ("dragin", "paper", {**SHORT, "max_rounds": 3}),
    "dragin-reference": ("dragin", "reference", {**SHORT, "max_rounds": 2}),
    "flare": ("flare", "paper", {**SHORT, "max_rounds": 2}),
    "seakr": ("seakr", "paper", {**SHORT, "k": 3, "max_steps": 2, "step_tokens": 6, "candidates": 2,
                                 "compare_estimators": False}),
    "drrag": ("drrag", "paper", {**SHORT, "judge": "llm", "k": 2, "k1": 1, "k2": 2}),
}
#: Families whose probed (last attending) layer sees a window of WINDOW positions, and its kind.
WINDOWED_LAST_LAYER = {"mistral": "sliding", "gemma2": "sliding", "gemma3": "sliding", "recurrent_gemma": "sliding",
                       "llama4": "chunked"}
#: Runs refused per family, with a part of the fix the message must carry.
REFUSED = {(arch, run): "pick a method that reads no attention" for arch in WITHOUT_ATTENTION
           for run in ("dragin-paper", "dragin-reference")}
#: Families whose MLP a hook cannot find: SEAKR reads the residual stream there (and says so).
RESIDUAL_SITE = {"opt", "mamba", "zamba2"}


class RecordingEngine(Engine):
    """The real engine, keeping what each call returned so the test can recompute it."""

    def __init__(self, lm) -> None:
        super().__init__(lm)
        self.generations: list[Generation] = []
        self.matrices: list[tuple[list[int], bool, torch.Tensor]] = []

    def generate(self, *args, **kwargs) -> Generation:
        gen = super().generate(*args, **kwargs)
        self.generations.append(gen)
        return gen

    def attention_matrix(self, ids, *, per_head: bool = False, rec=None) -> torch.Tensor:
        result = super().attention_matrix(ids, per_head=per_head, rec=rec)
        self.matrices.append((list(ids), per_head, result.clone()))
        return result


@cache
def _tokenizer():
    from transformers import AutoTokenizer

    from explorer.engine.embedded import embedded_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)


def _tiny(arch: str, attn: str):
    return tiny_model(arch, seed=7, attn_implementation=attn, tokenizer=_tokenizer())


@cache
def _reference(arch: str):
    """An eager copy of the same weights (same seed), the recomputation's model."""
    return _tiny(arch, "eager")


def _full_pass(arch: str, ids: list[int], keep: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The last ``keep`` positions' logits and the last attention layer's weights (heads, seq, seq) of one eager
    pass (None for a family without attention)."""
    with torch.inference_mode():
        out = _reference(arch).model(input_ids=torch.tensor([ids]), output_attentions=True, logits_to_keep=keep)
    attentions = getattr(out, "attentions", None)
    return out.logits[0].float(), attentions[-1][0].float() if attentions else None


def _check_generation(arch: str, gen: Generation) -> int:
    """Entropy (and amax where read) of every token against the full pass; returns how many amax were checked."""
    p, n = len(gen.prompt_ids), len(gen.ids)
    logits, heads = _full_pass(arch, list(gen.prompt_ids) + list(gen.ids), keep=n + 1)
    for i, token in enumerate(gen.tokens):
        logp = torch.log_softmax(logits[i], dim=-1)  # the position before token i predicted it
        expected = float(-(logp.exp() * logp).sum())
        assert math.isfinite(token.entropy)
        assert token.entropy == pytest.approx(expected, rel=1e-5, abs=1e-5), (arch, gen.purpose, i)
    if gen._engine is None:  # a span generated without attention: amax is not one of its signals
        assert all(t.amax is None for t in gen.tokens)
        return 0
    attn = heads.mean(0)
    # Rows were folded in for every token the model was fed; a stop string may end the span on a
    # token that was cut before it was fed, so the last row can be missing (never more).
    read = [t.amax for t in gen.tokens]
    fed = max((i + 2 for i, v in enumerate(read) if v is not None), default=min(n, 1))
    assert fed >= n - (1 if gen.stopped_by == "stop_string" else 0), (arch, "amax left empty", read)
    for i in range(n):
        later = [float(attn[p + j, p + i]) for j in range(i + 1, min(fed, n))]
        if later:
            assert read[i] == pytest.approx(max(later), abs=1e-5), (arch, i)
            assert gen.tokens[i].rind is not None and math.isfinite(gen.tokens[i].rind)
        else:
            assert read[i] is None
    return max(0, min(fed, n) - 1)


@cache
def _runtime(arch: str) -> Runtime:
    from explorer.retrieval.registry import open_retriever

    engine = RecordingEngine(_tiny(arch, "auto"))
    return Runtime(engine=engine, retriever=open_retriever("demo"), corpus={"spec": "demo"})


@pytest.mark.parametrize("run_name", list(METHOD_RUNS))
@pytest.mark.parametrize("arch", architectures())
def test_method_signals_match_a_full_forward_pass(arch: str, run_name: str) -> None:
    method, variant, config = METHOD_RUNS[run_name]
    runtime = _runtime(arch)
    engine: RecordingEngine = runtime.engine
    engine.generations.clear()
    engine.matrices.clear()
    trace = run_question(method, QUESTION, runtime, variant=variant, config=config)
    if (arch, run_name) in REFUSED:  # refused before its first step, with the fix
        assert trace.status == "error" and REFUSED[(arch, run_name)] in trace.error, trace.error
        assert f"{method} ({variant}) needs attention weights" in trace.error and not engine.generations
        return
    assert trace.status == "complete", f"{arch} {run_name}: {trace.error}"
    assert engine.generations, "the method generated nothing"
    amax_checked = sum(_check_generation(arch, g) for g in engine.generations)
    for ids, per_head, matrix in engine.matrices:
        heads = _full_pass(arch, ids)[1]
        expected = heads if per_head else heads.mean(0)
        assert matrix.shape == expected.shape
        assert torch.allclose(matrix, expected, atol=1e-5, rtol=0), (arch, run_name, "attention matrix")
    notes = [e.payload for e in trace.events if e.kind == "note"]
    if run_name == "dragin-paper":
        assert amax_checked > 0, "DRAGIN read no amax"
        checks = [e.payload for e in trace.events if e.kind == "check"]
        assert checks and all(u["value"] is not None for c in checks for u in c["units"][:-1] if u["eligible"])
    if run_name == "dragin-reference":
        assert engine.matrices, "the reference DRAGIN made no attention pass"
    if run_name.startswith("dragin"):
        # The window is in the trace and the output strip says it, in words, for the reader.
        shown = window_note(TraceView(trace))
        assert bool(shown) == (arch in WINDOWED_LAST_LAYER), (arch, shown)
        if arch in WINDOWED_LAST_LAYER:
            kind = WINDOWED_LAST_LAYER[arch]
            assert trace.model["attention_window"] == {"kind": kind, "size": WINDOW}
            assert (f"last {WINDOW} positions" if kind == "sliding" else f"chunks of {WINDOW} tokens") in shown
        if run_name == "dragin-paper":  # its drafts run past the window: the run's notes say so too
            assert any(n.get("attention_window") for n in notes) == (arch in WINDOWED_LAST_LAYER), notes
    if run_name == "seakr":
        grams = [e.payload for e in trace.events if e.kind == "uncertainty" and e.payload["estimator"] == "gram"]
        assert grams and all(g["value"] is None or math.isfinite(g["value"]) for g in grams)
        assert any(g["value"] is not None for g in grams), "SEAKR never produced an uncertainty value"
        site_fallback = any(n.get("hidden_site_fallback") for n in notes)
        assert site_fallback == (arch in RESIDUAL_SITE), notes  # OPT's MLP is two loose linear layers
        assert all(g["site"] == ("residual" if arch in RESIDUAL_SITE else "mlp") for g in grams)
        if arch in RECURRENT:  # every sample's end state as one pass over prompt + sample + EOS gives it
            assert all(g["valid"] for g in grams if g["value"] is not None)
    if run_name == "drrag":
        judged = [e.payload for e in trace.events if e.kind == "classifier"]
        assert judged and all(0.0 <= j["probability"] <= 1.0 and j["judge"] == "llm" for j in judged)


@pytest.mark.parametrize("arch", architectures())
def test_sdpa_and_eager_give_the_same_signals(arch: str) -> None:
    """Both backends the probe reads agree with the full pass; a family that refuses sdpa says what to use."""
    from explorer.errors import ModelError

    prompt = "Question: " + QUESTION + " Think about both of their lives step by step.\nAnswer:"
    for attn in ("eager", "sdpa"):
        try:
            lm = _tiny(arch, attn)
        except (ValueError, ModelError) as exc:
            assert arch in ("gemma2", "mamba", "openai-gpt", "rwkv") and attn == "sdpa", exc
            continue
        engine = Engine(lm)
        if arch in WITHOUT_ATTENTION:  # nothing to read; the span itself still matches the full pass
            assert not engine.probe.has_attention and engine.fingerprint()["attention_signals"] == "none"
            with pytest.raises(ModelError, match="has no attention layer"):
                engine.generate(prompt, max_new_tokens=4)
            gen = engine.generate(prompt, max_new_tokens=10, attention=False)
            assert _check_generation(arch, gen) == 0
            continue
        if not engine.probe.readable:
            # Families outside the AttentionInterface only give trustworthy weights under eager.
            assert arch == "falcon" and attn == "sdpa"
            with pytest.raises(ModelError) as info:
                engine.generate(prompt, max_new_tokens=4)
            assert "--attn auto" in info.value.fix
            continue
        gen = engine.generate(prompt, max_new_tokens=10)
        assert len(gen.prompt_ids) > WINDOW
        assert _check_generation(arch, gen) == len(gen.ids) - 1
        # QFS's row of a middle token, replayed after the fact, is the full pass's row.
        row = torch.tensor(gen.attention_row(4))
        expected = _full_pass(arch, list(gen.prompt_ids) + gen.ids)[1].mean(0)[len(gen.prompt_ids) + 4]
        assert torch.allclose(row, expected[:row.shape[0]], atol=1e-5, rtol=0)
        assert row.shape[0] == len(gen.prompt_ids) + 5
        if arch in WINDOWED_LAST_LAYER:
            assert engine.window is not None and engine.window.size == WINDOW
            # Outside the window the layer gives no attention, and the mapped row says so.
            assert float(row[: row.shape[0] - WINDOW].abs().max()) == 0.0


@pytest.mark.parametrize("arch", sorted(RECURRENT))
def test_recurrent_caches_sample_exact_end_states_and_skip_the_prefix_cache(arch: str) -> None:
    """A recurrent layer's state cannot be masked: a sample whose already-fed token a stop string cut gets its end
    state from its own pass; every end state equals one pass over prompt + sample + EOS. The prefix cache, which
    would have to cut a state back, stores nothing and changes nothing."""
    from explorer.engine.generation import Sampling
    from explorer.engine.hidden import HiddenCapture, HiddenSpec
    from explorer.engine.prefix_cache import PrefixCache

    engine = Engine(_tiny(arch, "auto"))
    spec, prompt = HiddenSpec(site="residual"), "Question: " + QUESTION + "\nAnswer:"
    free = engine.sample(prompt, k=3, max_new_tokens=8, sampling=Sampling(seed=3), hidden=spec)
    row0 = next(s for s in free.samples if s.row == 0)
    pieces = engine.token_texts(row0.ids)
    cut_at = next(i for i in range(1, len(pieces) - 1) if "".join(pieces[:i]).strip()
                  and (pieces[i] + pieces[i + 1][:1]).strip()
                  and "".join(pieces).find(pieces[i] + pieces[i + 1][:1]) == len("".join(pieces[:i])))
    cut = engine.sample(prompt, k=3, max_new_tokens=8, sampling=Sampling(seed=3), hidden=spec,
                        stop_strings=[pieces[cut_at] + pieces[cut_at + 1][:1]])
    stopped = next(s for s in cut.samples if s.row == 0)
    assert stopped.stopped_by == "stop_string" and stopped.ids == row0.ids[:cut_at]  # fed one token past the cut
    end = engine.tokenizer.eos_token_id
    for batch in (free, cut):
        for s in batch.samples:
            with torch.inference_mode(), HiddenCapture(engine.model, spec) as capture:
                engine.model(input_ids=torch.tensor([batch.prompt_ids + s.ids + [end]]))
            assert torch.allclose(s.hidden, capture.last[0, -1], atol=1e-4), (arch, s.row, s.stopped_by)
    plain = [engine.generate(prompt + tail, max_new_tokens=6, attention=False).ids for tail in (" A", " B")]
    engine.prefix_cache = PrefixCache(min_shared=4)
    cached = [engine.generate(prompt + tail, max_new_tokens=6, attention=False).ids for tail in (" A", " B")]
    assert cached == plain and engine.prefix_cache.hits == 0 and not engine.prefix_cache._items
