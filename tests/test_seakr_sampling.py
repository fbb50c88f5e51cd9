"""The batched k-sample loop against full forward passes over each prompt + sample, on the tiny random model.

The loop pre-fills once, repeats the cache per row, masks tokens a stop string cut after they were
fed, drops finished rows and feeds EOS to read each sample's end state; the reference here runs
``prompt + sample (+ EOS)`` in one plain forward pass and reads the same quantities.
"""

from __future__ import annotations

import pytest
import torch

from explorer.engine.decode import text_end
from explorer.engine.generation import Engine, Sampling
from explorer.engine.hidden import HiddenCapture, HiddenSpec
from explorer.engine.loader import tiny_random_model
from explorer.engine.sampling import sample
from explorer.engine.uncertainty import measure
from explorer.errors import ConfigError
from explorer.trace import Trace, TraceRecorder

PROMPT = "Question: Where did the Lewiston Maineiacs play their home games?\nAnswer:"


@pytest.fixture(scope="module")
def lm():
    return tiny_random_model(seed=2, layers=4)


@pytest.fixture()
def engine(lm) -> Engine:
    return Engine(lm)


def _full(lm, ids: list[int], spec: HiddenSpec):
    """Logits, every layer's output and the hooked site's output of one plain forward pass."""
    with torch.inference_mode(), HiddenCapture(lm.model, spec) as cap:
        out = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return out.logits[0].float(), out.hidden_states, cap.last[0]


def _check_against_full_pass(lm, engine: Engine, batch, spec: HiddenSpec) -> None:
    end = engine.tokenizer.eos_token_id
    p = len(batch.prompt_ids)
    layer = spec.resolve(lm.num_layers)
    assert batch.layer == layer and batch.site == spec.site
    for s in batch.samples:
        logits, states, site = _full(lm, batch.prompt_ids + s.ids + [end], spec)
        logp = torch.log_softmax(logits, dim=-1)
        # Every kept token's log-probability, entropy and energy come from the same distribution a
        # fresh prefill of the prompt and the sample so far gives (the shared, repeated cache is exact).
        for j, token in enumerate(s.ids):
            assert s.logprobs[j] == pytest.approx(float(logp[p - 1 + j, token]), abs=1e-4)
            assert s.entropies[j] == pytest.approx(float(-(logp[p - 1 + j].exp() * logp[p - 1 + j]).sum()), abs=1e-4)
            assert s.energies[j] == pytest.approx(float(torch.logsumexp(logits[p - 1 + j], -1)), abs=1e-4)
        # The end state is the chosen site at the EOS fed after the kept tokens.
        expected = states[layer + 1][0, -1] if spec.site == "residual" else site[-1]
        assert s.hidden is not None
        assert torch.allclose(s.hidden, expected, atol=1e-4), f"row {s.row} ({s.stopped_by})"


@pytest.mark.parametrize("site", ["residual", "mlp"])
def test_end_states_and_signals_match_a_full_pass(lm, engine: Engine, site: str) -> None:
    spec = HiddenSpec(layer=2, site=site)
    batch = sample(engine, PROMPT, k=4, max_new_tokens=10, sampling=Sampling(seed=5), hidden=spec)
    assert len(batch.samples) == 4 and all(s.stopped_by == "max_tokens" and len(s.ids) == 10 for s in batch.samples)
    _check_against_full_pass(lm, engine, batch, spec)
    # The hook agrees with output_hidden_states for the residual site on a plain pass too.
    ids = batch.prompt_ids + batch.samples[0].ids
    _logits, states, site_out = _full(lm, ids, HiddenSpec(layer=2, site="residual"))
    assert torch.allclose(site_out, states[3][0], atol=1e-5)


def test_stop_strings_mask_cut_tokens_and_eos_ends_rows(lm, engine: Engine) -> None:
    spec = HiddenSpec(layer=1, site="mlp")
    free = sample(engine, PROMPT, k=6, max_new_tokens=16, sampling=Sampling(seed=3), hidden=spec)
    pieces = engine.token_texts(free.samples[0].ids)
    # A stop string spanning two tokens: row 0 has fed the first one before the second completes it,
    # so that token must vanish from its attention before EOS is fed.
    stop = pieces[5] + pieces[6][:2]
    assert stop.strip() and stop not in "".join(pieces[:5])
    eos_like = free.samples[1].ids[6]
    engine.eos_ids = frozenset({*engine.eos_ids, eos_like})
    cut = sample(engine, PROMPT, k=6, max_new_tokens=16, sampling=Sampling(seed=3), stop_strings=[stop],
                 hidden=spec)
    by_row = {s.row: s for s in cut.samples}
    assert by_row[0].stopped_by == "stop_string" and by_row[0].ids == free.samples[0].ids[:5]
    assert by_row[1].stopped_by == "eos" and eos_like not in by_row[1].ids
    for s in cut.samples:
        assert stop not in s.text
        assert len(s.ids) <= 16 and s.text.strip()
        if s.stopped_by == "max_tokens":
            assert len(s.ids) == 16
    assert len(cut.samples) + cut.empty == 6
    _check_against_full_pass(lm, engine, cut, spec)


def test_the_authors_end_state_takes_the_place_of_the_last_sampled_token(lm, engine: Engine) -> None:
    """``replace_last``: EOS is fed where the last sampled token was; a stop string's earlier tokens stay fed."""
    spec = HiddenSpec(layer=1, site="mlp")
    free = sample(engine, PROMPT, k=6, max_new_tokens=16, sampling=Sampling(seed=3), hidden=spec)
    pieces = engine.token_texts(free.samples[0].ids)
    stop = pieces[5] + pieces[6][:2]
    kept = sample(engine, PROMPT, k=6, max_new_tokens=16, sampling=Sampling(seed=3), stop_strings=[stop],
                  hidden=spec)
    cut = sample(engine, PROMPT, k=6, max_new_tokens=16, sampling=Sampling(seed=3), stop_strings=[stop],
                 hidden=spec, end_state="replace_last")
    assert [s.text for s in cut.samples] == [s.text for s in kept.samples]
    end, generated = engine.tokenizer.eos_token_id, {s.row: s for s in free.samples}
    for s in cut.samples:
        ids = generated[s.row].ids  # the same seed samples the same tokens until a stop rule ends the row
        if s.stopped_by == "eos":
            fed = ids
        else:
            n = next((i for i in range(1, len(ids) + 1) if text_end(engine.decode(ids[:i]), [stop])), len(ids))
            fed = ids[:n - 1]
        _logits, _states, site = _full(lm, cut.prompt_ids + fed + [end], spec)
        assert torch.allclose(s.hidden, site[-1], atol=1e-4), f"row {s.row} ({s.stopped_by})"
    row0 = {s.row: s for s in cut.samples}[0]
    assert row0.stopped_by == "stop_string"
    assert not torch.allclose(row0.hidden, {s.row: s for s in kept.samples}[0].hidden, atol=1e-4)
    with pytest.raises(ConfigError):
        sample(engine, PROMPT, k=2, max_new_tokens=4, end_state="last")


@pytest.mark.parametrize("text,stops,sentence,expected", [
    (" Philip Saville was born in 1930. He", (), True, (33, "sentence_end")),
    (" It opened in 1958.\n", (), True, (19, "sentence_end")),
    (" It is 3.5 metres", (), True, None),  # a decimal point is no sentence end
    (" J. R. R. Tolkien wrote it", (), True, None),  # nor are initials
    (" He said \"no.\" Then", (), True, (14, "sentence_end")),  # closing quotes stay with the sentence
    (". Then", (), True, None),  # punctuation with no sentence before it
    (" one\n\nQuestion: two. x", ("\n\n",), True, (4, "stop_string")),  # the earliest end wins
    (" one. two\n\n", ("\n\n",), False, (9, "stop_string")),
])
def test_where_a_row_ends(text: str, stops: tuple[str, ...], sentence: bool, expected) -> None:
    assert text_end(text, stops, sentence) == expected


def test_same_seed_same_samples_and_rows_do_not_depend_on_k(engine: Engine) -> None:
    a = sample(engine, PROMPT, k=5, max_new_tokens=8, sampling=Sampling(seed=9))
    b = sample(engine, PROMPT, k=5, max_new_tokens=8, sampling=Sampling(seed=9))
    c = sample(engine, PROMPT, k=5, max_new_tokens=8, sampling=Sampling(seed=10))
    fewer = sample(engine, PROMPT, k=2, max_new_tokens=8, sampling=Sampling(seed=9))
    assert [s.ids for s in a.samples] == [s.ids for s in b.samples]
    assert [s.ids for s in a.samples] != [s.ids for s in c.samples]
    assert len({tuple(s.ids) for s in a.samples}) > 1, "rows of one batch must differ"
    assert [s.ids for s in fewer.samples] == [s.ids for s in a.samples[:2]]


def test_first_step_of_the_shared_cache_equals_a_fresh_prefill(lm, engine: Engine) -> None:
    batch = sample(engine, PROMPT, k=6, max_new_tokens=1, sampling=Sampling(seed=4))
    logits, _states, _site = _full(lm, batch.prompt_ids, HiddenSpec(layer=0, site="residual"))
    logp = torch.log_softmax(logits[-1], dim=-1)
    allowed = set(torch.topk(logits[-1], 50).indices.tolist())
    for s in batch.samples:
        assert s.ids[0] in allowed, "top-k 50 must hold"
        assert s.logprobs[0] == pytest.approx(float(logp[s.ids[0]]), abs=1e-5)


def test_greedy_row_equals_plain_greedy_generation(engine: Engine) -> None:
    batch = sample(engine, PROMPT, k=3, max_new_tokens=12, sampling=Sampling(seed=1), greedy=True,
                   hidden=HiddenSpec())
    plain = engine.generate(PROMPT, max_new_tokens=12, attention=False)
    assert batch.greedy is not None
    assert batch.greedy.ids == plain.ids and batch.greedy.text == plain.text
    assert [t.prob for t in batch.greedy.tokens] == pytest.approx([t.prob for t in plain.tokens], abs=1e-5)


def test_costs_and_the_recorded_span(engine: Engine) -> None:
    trace = Trace(question="q", method="seakr", variant="paper", config={}, model={})
    rec = TraceRecorder(trace)
    m = measure(engine, PROMPT, k=4, max_new_tokens=6, sampling=Sampling(seed=2), hidden=HiddenSpec(), rec=rec,
                estimators=("gram", "perplexity", "ln_entropy", "multi_perplexity", "energy", "prompting"))
    c = trace.costs
    assert c.llm_calls == 2  # the batch, and the prompting estimator's own pass
    assert c.sampled_sequences == 4
    assert c.forward_passes == m.batch.forward_passes + 1
    kinds = [e.kind for e in trace.events]
    assert kinds[0] == "generation" and kinds.count("uncertainty") == 6
    gram_event = next(e for e in trace.events if e.kind == "uncertainty" and e.payload["estimator"] == "gram")
    assert gram_event.payload["span"] == 0 and len(gram_event.payload["samples"]) == 4
    assert len(gram_event.payload["eigenvalues"]) == 4 and gram_event.payload["valid"] == 4
    prompting = next(e for e in trace.events if e.kind == "uncertainty" and e.payload["estimator"] == "prompting")
    assert 0.0 <= prompting.payload["value"] <= 1.0
    trace.validate()


def test_bad_arguments_are_user_errors(engine: Engine) -> None:
    with pytest.raises(ConfigError):
        sample(engine, PROMPT, k=0, max_new_tokens=4)
    with pytest.raises(ConfigError):
        measure(engine, PROMPT, k=2, max_new_tokens=4, sampling=Sampling(), hidden=HiddenSpec(), primary="vibes")
    with pytest.raises(ConfigError):
        sample(engine, PROMPT, k=2, max_new_tokens=4, hidden=HiddenSpec(layer=99))


def test_cancel_ends_greedy_and_sampled_decoding_the_same_way(engine) -> None:
    """Both loops stop at a Cancel with stopped_by="cancelled", record the span and its costs, then unwind."""
    from explorer.trace import Cancelled

    for decode in ("greedy", "sampled"):
        rec = TraceRecorder(Trace(question="q", method="wo", variant="paper", config={}, model={}))
        rec.cancel.set()
        with pytest.raises(Cancelled):
            if decode == "greedy":
                engine.generate(PROMPT, max_new_tokens=8, rec=rec, attention=False)
            else:
                engine.sample(PROMPT, k=3, max_new_tokens=8, sampling=Sampling(seed=1), greedy=True, rec=rec)
        (span,) = rec.trace.of_kind("generation")
        assert span.payload["stopped_by"] == "cancelled" and span.payload["tokens"] == []
        assert rec.costs.llm_calls == 1 and rec.costs.forward_passes == 1, decode  # the prompt's pass only
