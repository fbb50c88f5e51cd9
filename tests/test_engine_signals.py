"""The engine's per-token signals against a straightforward recomputation from one full forward pass.

The loop computes everything incrementally (KV cache, one token per pass, attention from a probe
on the last layer only); the reference here runs the whole prompt + generated sequence once with
eager attention on every layer and ``output_attentions=True``, and derives each signal by its
textbook definition.
"""

from __future__ import annotations

import math

import pytest
import torch

from explorer.engine.generation import Engine, Sampling
from explorer.engine.language import is_stopword
from explorer.engine.loader import tiny_random_model

PROMPT = "Question: Where did the Lewiston Maineiacs play their home games?\nAnswer:"


def _reference(lm, prompt_ids: list[int], ids: list[int]):
    seq = torch.tensor([prompt_ids + ids])
    with torch.inference_mode():
        out = lm.model(input_ids=seq, output_attentions=True)
    logits = out.logits[0].float()
    attn = out.attentions[-1][0].float().mean(0)  # (q, k), head mean, last layer
    p = len(prompt_ids)
    dists = torch.log_softmax(logits[p - 1: p - 1 + len(ids)], dim=-1)
    return dists, attn, p


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def engine(request):
    return Engine(tiny_random_model(seed=3, attn_implementation=request.param))


def test_signals_match_a_full_forward_pass(engine: Engine) -> None:
    # The reference pass is eager on every layer; an sdpa engine runs different kernels below the
    # probed layer, so it agrees to 1e-5 relative rather than to the last bit.
    rel = 1e-5 if engine.probe.base == "sdpa" else None
    gen = engine.generate(PROMPT, max_new_tokens=24)
    assert len(gen.ids) == 24, gen.stopped_by
    reference_lm = tiny_random_model(seed=3, attn_implementation="eager")
    dists, attn, p = _reference(reference_lm, gen.prompt_ids, gen.ids)
    n = len(gen.ids)
    for i, tok in enumerate(gen.tokens):
        logp = dists[i]
        assert tok.id == int(torch.argmax(logp)), "greedy must pick the most probable token"
        assert tok.prob == pytest.approx(math.exp(float(logp[tok.id])), abs=1e-5)
        assert tok.entropy == pytest.approx(float(-(logp.exp() * logp).sum()), abs=1e-5, rel=rel)
        top = torch.topk(logp.exp(), 5)
        assert [prob for _, prob in tok.top] == pytest.approx(top.values.tolist(), abs=1e-5)
        later = [float(attn[p + j, p + i]) for j in range(i + 1, n)]
        if later:
            assert tok.amax == pytest.approx(max(later), abs=1e-5)
            content = 0.0 if is_stopword(tok.text) else 1.0
            assert tok.rind == pytest.approx(tok.entropy * max(later) * content, abs=1e-5)
        else:
            assert tok.amax is None and tok.rind is None
    # Rows replayed from the cache equal the full pass's rows, in any order of asking.
    for i in (n - 1, 3, 10, 0):
        row = gen.attention_row(i)
        assert len(row) == p + i + 1
        assert row == pytest.approx(attn[p + i, : p + i + 1].tolist(), abs=1e-5)


def test_sampling_is_seeded_and_records_the_warped_entropy() -> None:
    engine = Engine(tiny_random_model(seed=1))
    a = engine.generate(PROMPT, max_new_tokens=12, sampling=Sampling(seed=7))
    b = engine.generate(PROMPT, max_new_tokens=12, sampling=Sampling(seed=7))
    c = engine.generate(PROMPT, max_new_tokens=12, sampling=Sampling(seed=8))
    assert a.ids == b.ids
    assert a.ids != c.ids
    for tok in a.tokens:
        # Top-k/top-p warping removes mass, so the sampled-from distribution is sharper than the raw one.
        assert tok.entropy_warped is not None and tok.entropy_warped <= tok.entropy + 1e-6
    greedy = engine.generate(PROMPT, max_new_tokens=12)
    assert all(t.entropy_warped is None for t in greedy.tokens)


def test_stop_strings_cut_the_text_and_the_tokens(engine: Engine) -> None:
    free = engine.generate(PROMPT, max_new_tokens=20, attention=False)
    # Pick a piece of the free-running text as a stop string: generation must end right before it.
    marker = free.tokens[6].text + free.tokens[7].text
    assert marker.strip(), "the random model produced whitespace; choose another seed"
    cut = engine.generate(PROMPT, max_new_tokens=20, stop_strings=[marker], attention=False)
    assert cut.stopped_by == "stop_string"
    assert marker not in cut.text
    assert free.text.startswith(cut.text)
    assert "".join(cut.token_texts) == cut.text
    assert len(cut.tokens) == len(cut.ids)


def test_token_texts_join_to_the_decoded_text(engine: Engine) -> None:
    ids = engine.tokenize("Alejandro Jodorowsky — Colisée, naïve café ☕ 3,677")
    pieces = engine.token_texts(ids)
    assert "".join(pieces) == engine.decode(ids)
    assert len(pieces) == len(ids)


def test_hidden_state_capture_matches_output_hidden_states() -> None:
    from explorer.engine.hidden import HiddenSpec

    lm = tiny_random_model(seed=2, layers=4)
    engine = Engine(lm)
    gen = engine.generate(PROMPT, max_new_tokens=8, hidden=HiddenSpec(layer=2, site="residual"), attention=False)
    seq = torch.tensor([gen.prompt_ids + gen.ids])
    with torch.inference_mode():
        out = lm.model(input_ids=seq, output_hidden_states=True)
    # hidden_states[0] is the embeddings, so layer 2's output is hidden_states[3].
    assert gen.hidden is not None
    assert gen.hidden.tolist() == pytest.approx(out.hidden_states[3][0, -1].tolist(), abs=1e-5)


def test_a_prompt_longer_than_the_context_is_refused(engine: Engine) -> None:
    from explorer.errors import ExplorerError

    with pytest.raises(ExplorerError, match="context holds"):
        engine.generate("word " * 3000, max_new_tokens=10)


def test_a_cancelled_generation_keeps_its_partial_span_in_the_trace() -> None:
    import threading

    from explorer.trace import Cancelled, Trace, TraceRecorder

    engine = Engine(tiny_random_model(seed=4))
    cancel = threading.Event()
    rec = TraceRecorder(Trace(question="q", method="wo", variant="paper", config={}, model={}), cancel=cancel)
    seen: list[str] = []

    def listener(kind: str, data: dict) -> None:
        if kind == "token":
            seen.append(data["text"])
            if len(seen) == 5:
                cancel.set()

    rec.listeners.append(listener)
    with pytest.raises(Cancelled):
        engine.generate(PROMPT, max_new_tokens=40, rec=rec)
    span = rec.trace.of_kind("generation")[0].payload
    assert span["stopped_by"] == "cancelled"
    assert [t["text"] for t in span["tokens"]] == seen
    assert rec.costs.generated_tokens == 5 and rec.costs.llm_calls == 1
