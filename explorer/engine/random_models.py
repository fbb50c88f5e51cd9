"""Randomly initialised models named by a spec, for tests and throughput benchmarks only.

``random:tiny`` is the 2-layer Llama-style model of :func:`explorer.engine.loader.tiny_random_model`
(seed 0, the tests' model), ``random:1b`` a ~1B-parameter Llama-style model (Llama-3.2-1B's
shape: hidden 2048, MLP 8192, 32/8 heads, 16 layers) and ``random:8b`` Llama-3-8B's shape (hidden
4096, MLP 14336, 32/8 heads, 32 layers, untied output head) for GPU timing. Both use the embedded
model's tokenizer and are built from a fixed seed, so every process that builds one from its
spec gets the same weights: that is what lets a Ray worker open "the same model" as the driver
without shipping weights. Their text is noise; only costs and plumbing mean anything with them.

An optional ``:N`` suffix sets the seed of ``random:tiny`` (``random:tiny:3``) and the layer
count of ``random:1b`` and ``random:8b`` (``random:1b:4``).
"""

from __future__ import annotations

import time

from explorer.engine.model import LoadedModel
from explorer.errors import ModelError

PREFIX = "random:"
KINDS = ("tiny", "1b", "8b")
#: The Llama shapes: hidden size, MLP size, attention heads, key/value heads, layers, tied output head.
SHAPES = {"1b": (2048, 8192, 32, 8, 16, True), "8b": (4096, 14336, 32, 8, 32, False)}


def is_random_spec(spec: str) -> bool:
    return isinstance(spec, str) and spec.strip().startswith(PREFIX)


def parse_random_spec(spec: str) -> tuple[str, int | None]:
    """``random:KIND[:N]`` as (kind, N), or a ModelError naming the accepted forms."""
    body = spec.strip()[len(PREFIX):]
    kind, _, number = body.partition(":")
    if kind not in KINDS or (number and not number.isdigit()):
        raise ModelError(f"unknown random model {spec!r}",
                         fix="use random:tiny[:SEED], random:1b[:LAYERS] or random:8b[:LAYERS] (test and benchmark "
                             "models with random "
                             "weights), or a real model")
    return kind, int(number) if number else None


def load_random_model(spec: str, *, dtype: str = "float32", device: str = "cpu",
                      attn_implementation: str = "sdpa") -> LoadedModel:
    """The random model a ``random:`` spec names, on ``device`` in ``dtype``."""
    from explorer.engine.loader import check_attention, check_device, normalise_dtype, tiny_random_model

    kind, number = parse_random_spec(spec)
    dtype, device = normalise_dtype(dtype), check_device(device)
    check_attention(attn_implementation, False, device)
    if kind == "tiny":
        lm = tiny_random_model(seed=number or 0, attn_implementation=attn_implementation)
        if dtype != "float32" or device != "cpu":
            import torch

            lm.model.to(device=device, dtype=getattr(torch, dtype))
            lm.dtype, lm.device = dtype, device
    else:
        lm = random_llama(kind, device, dtype, number, attn_implementation=attn_implementation)
    lm.source = spec.strip()
    return lm


def random_llama_1b(device: str, dtype: str, layers: int = 16, *, attn_implementation: str = "sdpa") -> LoadedModel:
    """A ~1B-parameter Llama-style model with random weights (seed 0), built directly on ``device``."""
    return random_llama("1b", device, dtype, layers, attn_implementation=attn_implementation)


def random_llama(kind: str, device: str, dtype: str, layers: int | None = None, *,
                 attn_implementation: str = "sdpa") -> LoadedModel:
    """A Llama-style model of the shape ``kind`` names (:data:`SHAPES`), random weights (seed 0), built on ``device``.

    The weights are created in ``dtype`` on the device itself (an 8B shape in float32 first would
    need twice the memory), with the embedded tokenizer's vocabulary.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from explorer.engine.embedded import embedded_tokenizer_dir
    from explorer.engine.loader import make_deterministic

    hidden, mlp, heads, kv_heads, default_layers, tied = SHAPES[kind]
    layers = layers or default_layers
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=mlp,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4096, tie_word_embeddings=tied,
                         attn_implementation=attn_implementation, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    previous = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            with torch.device(device):
                model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
    model.to(getattr(torch, dtype))
    make_deterministic(model, tokenizer)
    name = f"random-llama-{layers}x{hidden}"
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, source="random", dtype=dtype, device=device,
                       attn_implementation=attn_implementation, load_seconds=time.perf_counter() - started,
                       extra={"seed": 0})
