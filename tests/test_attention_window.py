"""Attention rows of windowed layers, put back on absolute positions for any cache layout.

A sliding-window or chunked layer keeps only its last W keys, so a generated token's attention
row has W columns. These tests check the mapping itself (sliding, sinks, chunked), that the amax
tracker refuses a row it would otherwise slice into nothing, and a chunked-attention model
(Llama-4 text, chunks of 8) end to end against one full eager forward pass.
"""

from __future__ import annotations

import pytest
import torch

from explorer.engine.attention import Window, absolute_row, probed_window
from explorer.engine.signals import AmaxTracker
from explorer.errors import ModelError


def test_a_full_row_is_kept_as_it_is() -> None:
    row = torch.tensor([0.1, 0.2, 0.7])
    assert absolute_row(row, 3) is row


def test_a_sliding_row_lands_on_the_last_positions_with_zeros_before() -> None:
    row = torch.tensor([0.5, 0.3, 0.2])  # window of 3, the query itself last
    assert absolute_row(row, 6).tolist() == pytest.approx([0, 0, 0, 0.5, 0.3, 0.2])


def test_sink_tokens_keep_their_positions_at_the_start() -> None:
    row = torch.tensor([0.4, 0.1, 0.3, 0.2])  # 1 sink token + a window of 3
    assert absolute_row(row, 8, sinks=1).tolist() == pytest.approx([0.4, 0, 0, 0, 0, 0.1, 0.3, 0.2])


def test_a_row_longer_than_the_context_is_an_error_not_a_guess() -> None:
    with pytest.raises(ModelError, match="cache layout is not understood"):
        absolute_row(torch.ones(5), 4)


def test_the_amax_tracker_refuses_a_row_too_short_for_the_context() -> None:
    tracker = AmaxTracker(prompt_len=20)
    tracker.add_token()
    tracker.add_token()
    with pytest.raises(ValueError, match="absolute_row"):
        tracker.add_row(1, torch.full((16,), 0.1))  # a window's 16 columns for a 22-position context
    tracker.add_row(1, absolute_row(torch.full((16,), 0.1), 22))
    assert tracker.values == [pytest.approx(0.1), None]


def test_the_window_of_the_probed_layer_is_read_from_the_config() -> None:
    from transformers import AutoConfig

    gemma2 = AutoConfig.for_model("gemma2", num_hidden_layers=4, sliding_window=32)
    assert probed_window(gemma2, 0) == Window("sliding", 32)
    assert probed_window(gemma2, 3) is None  # Gemma-2 alternates; its last layer is global
    llama = AutoConfig.for_model("llama", num_hidden_layers=2)
    assert probed_window(llama, 1) is None
    chunked = AutoConfig.for_model("llama4_text", num_hidden_layers=4, attention_chunk_size=8)
    assert probed_window(chunked, 0) == Window("chunked", 8)
    assert "chunks of 8" in Window("chunked", 8).describe()


@pytest.fixture(scope="module")
def chunked_pair():
    """A tiny Llama-4 text model with chunked attention (chunks of 8) and an eager copy of its weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from explorer.engine.embedded import embedded_tokenizer_dir
    from explorer.engine.loader import make_deterministic
    from explorer.engine.model import LoadedModel

    tok = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)
    fields = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, intermediate_size_mlp=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  attention_chunk_size=8, num_local_experts=2, interleave_moe_layer_step=1, no_rope_layers=[1, 1],
                  max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    models = []
    for attn in ("sdpa", "eager"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            # Separate configs: the engine switches its model's backend, which must not touch the copy.
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama4_text", **fields),
                                                     attn_implementation=attn)
        make_deterministic(model, tok)
        models.append(model)
    lm = LoadedModel(model=models[0], tokenizer=tok, name="tiny-llama4-chunked", source="tiny-random",
                     dtype="float32", device="cpu", attn_implementation="sdpa")
    return lm, models[1]


def test_chunked_attention_signals_match_a_full_forward_pass(chunked_pair) -> None:
    from explorer.engine.generation import Engine

    lm, reference = chunked_pair
    engine = Engine(lm)
    assert engine.window == Window("chunked", 8)
    gen = engine.generate("Question: Where did the Lewiston Maineiacs play their home games, and for how long?\n"
                          "Answer:", max_new_tokens=14)
    p, n = len(gen.prompt_ids), len(gen.ids)
    with torch.inference_mode():
        attn = reference(input_ids=torch.tensor([gen.prompt_ids + gen.ids]), output_attentions=True)
    heads = attn.attentions[-1][0]
    mean = heads.mean(0)
    for i, token in enumerate(gen.tokens):
        later = [float(mean[p + j, p + i]) for j in range(i + 1, n)]
        assert token.amax == (pytest.approx(max(later), abs=1e-5) if later else None)
    zeros = [t.amax for t in gen.tokens[:-1] if t.amax == 0.0]
    assert zeros, "tokens at the end of a chunk get no attention from the next chunk, so some amax must be 0"
    row = torch.tensor(gen.attention_row(9))
    assert torch.allclose(row, mean[p + 9, : p + 10], atol=1e-5)
    matrix = engine.attention_matrix(gen.prompt_ids + gen.ids, per_head=True)
    assert torch.allclose(matrix, heads, atol=1e-5)


def test_attention_rows_are_the_matrix_rows_without_the_matrix(tiny_lm) -> None:
    """The reference QFS reads only the last rows of a re-encoded text: computed alone (the text before them through
    the fast kernel into a cache), they equal the whole matrix's rows, so memory grows with n, not n squared."""
    from explorer.engine.attention_rows import attention_rows
    from explorer.engine.generation import Engine

    engine = Engine(tiny_lm)
    ids = engine.tokenize("Question: Who lived longer, Alejandro Jodorowsky or Philip Saville? The answer is "
                          "that Philip Saville was born in 1930 and died in 2016.", special=True)
    whole = engine.attention_matrix(ids)
    for start in (1, len(ids) // 2, len(ids) - 1):
        rows = attention_rows(engine, ids, start)
        assert rows.shape == (len(ids) - start, len(ids))
        assert torch.allclose(rows, whole[start:], atol=1e-6), start
