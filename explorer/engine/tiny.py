"""Tiny randomly initialised models of the common causal-LM architectures, built from configs.

A user's model can be any of a dozen families whose attention differs in ways that matter to
the signals: grouped key/value heads, partial rotary embeddings, soft-capping, sliding windows on
some or all layers, learned positions, parallel attention, state-space layers beside attention
(Jamba, Zamba2) or instead of it (Mamba, RWKV), a forward without a cache (GPT-1), recurrent state
kept inside the model (RecurrentGemma), a mixture-of-experts MLP (Llama-4). These builders give one small model
per family (hidden size 64, a few layers, the embedded tokenizer's vocabulary) so the
architecture matrix test and the README's support table exercise the real transformers code of
each family in seconds. The output head is never tied to the embeddings: a tied random model
only repeats its last prompt token, an untied one writes varied words, which the methods need.
"""

from __future__ import annotations

import time
from typing import Any

from explorer.engine.model import LoadedModel
from explorer.errors import ModelError

HIDDEN = 64
HEADS = 4
#: The window given to sliding-window families: shorter than any prompt the methods build.
WINDOW = 16

#: architecture -> (transformers model_type, config fields beyond the shared ones, human note)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any], str]] = {
    "llama": ("llama", {"num_key_value_heads": 2}, "grouped key/value heads"),
    "qwen2": ("qwen2", {"num_key_value_heads": 2}, "grouped key/value heads, qkv bias"),
    "mistral": ("mistral", {"num_key_value_heads": 2, "sliding_window": WINDOW},
                f"sliding window of {WINDOW} on every layer"),
    "gpt2": ("gpt2", {}, "learned positions, fused qkv"),
    "gpt_neox": ("gpt_neox", {}, "partial rotary, parallel residual"),
    "phi": ("phi", {}, "partial rotary, parallel attention and MLP"),
    "phi3": ("phi3", {"num_key_value_heads": 2}, "fused qkv, grouped heads"),
    "gemma": ("gemma", {"num_key_value_heads": 2, "head_dim": 16}, "scaled embeddings"),
    "gemma2": ("gemma2", {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": WINDOW, "num_hidden_layers": 3},
               f"soft-capping; sliding window of {WINDOW} on alternate layers, the last one included"),
    "gemma3": ("gemma3_text", {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": WINDOW},
               f"sliding window of {WINDOW} on 5 layers in 6, the last one included"),
    "opt": ("opt", {"ffn_dim": 2 * HIDDEN, "word_embed_proj_dim": HIDDEN}, "learned positions, no named MLP block"),
    "falcon": ("falcon", {}, "multi-query attention, parallel attention"),
    "jamba": ("jamba", {"num_key_value_heads": 2, "num_hidden_layers": 3, "attn_layer_period": 2,
                        "attn_layer_offset": 1, "num_experts": 1, "expert_layer_period": 100, "mamba_d_state": 8,
                        "mamba_dt_rank": 8},
              "hybrid: Mamba layers around one attention layer (not the last), recurrent state in the cache"),
    "mamba": ("mamba", {"state_size": 8, "time_step_rank": 8, "num_hidden_layers": 1},
              "state-space: no attention layer at all"),
    "openai-gpt": ("openai-gpt", {}, "GPT-1: learned positions, a forward that keeps no cache"),
    "rwkv": ("rwkv", {"attention_hidden_size": HIDDEN},
             "linear recurrence instead of attention, its state outside the cache API"),
    "recurrent_gemma": ("recurrent_gemma", {"num_hidden_layers": 3, "lru_width": HIDDEN, "num_key_value_heads": 1,
                                            "attention_window_size": WINDOW,
                                            "block_types": ["recurrent", "recurrent", "attention"]},
                        f"Griffin: recurrent blocks holding their state in the model, attention with a window of "
                        f"{WINDOW} last"),
    "zamba2": ("zamba2", {"num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"], "mamba_d_state": 8,
                          "n_mamba_heads": 2, "num_key_value_heads": 4, "adapter_rank": 8, "chunk_size": 16,
                          "use_mamba_kernels": False},
               "hybrid: one attention block shared by its hybrid layers, Mamba-2 mixers"),
    "llama4": ("llama4_text", {"num_key_value_heads": 2, "head_dim": 16, "intermediate_size_mlp": 2 * HIDDEN,
                               "num_local_experts": 2, "attention_chunk_size": WINDOW},
               f"mixture-of-experts MLP (a router beside the experts), attention in chunks of {WINDOW}"),
}
#: Families with recurrent (state-space) layers: their caches cannot be cut back or repeated as keys are.
RECURRENT = {"jamba", "mamba", "zamba2", "rwkv", "recurrent_gemma"}
#: Families without any attention layer: methods that read attention weights are refused on them.
WITHOUT_ATTENTION = {"mamba", "rwkv"}
#: Families without a cache the engine can hold: every pass re-reads the whole context
#: (:mod:`explorer.engine.context_cache`).
RECOMPUTED = {"openai-gpt", "rwkv", "recurrent_gemma"}


def architectures() -> list[str]:
    return list(ARCHITECTURES)


def tiny_model(arch: str, *, seed: int = 0, attn_implementation: str | None = "eager", layers: int | None = None,
               tokenizer: Any = None) -> LoadedModel:
    """A tiny random model of ``arch`` with the embedded tokenizer (or ``tokenizer``), ready for the engine.

    ``attn_implementation`` may be ``"auto"`` (or ``None``), which picks as the loader's ``auto``
    does: sdpa where the family supports it, eager otherwise.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from explorer.engine.attention import auto_implementation
    from explorer.engine.embedded import embedded_tokenizer_dir
    from explorer.engine.loader import make_deterministic

    if arch not in ARCHITECTURES:
        raise ModelError(f"no tiny model for architecture {arch!r}", fix=f"use one of {', '.join(ARCHITECTURES)}")
    started = time.perf_counter()
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)
    model_type, extra, _ = ARCHITECTURES[arch]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 2, "num_attention_heads": HEADS, "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": pad, **extra,
    }
    if layers is not None:
        fields["num_hidden_layers"] = layers
    config = AutoConfig.for_model(model_type, **fields)
    if attn_implementation in (None, "auto"):
        attn_implementation = auto_implementation(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                 dtype=torch.float32)
    make_deterministic(model, tokenizer)
    chosen = str(model.config._attn_implementation)
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"tiny-random-{arch}", source="tiny-random",
                       dtype="float32", device="cpu", attn_implementation=chosen,
                       load_seconds=time.perf_counter() - started, extra={"seed": seed, "architecture": arch})
