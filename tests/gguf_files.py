"""A small GGUF file of a user's kind, written with the ``gguf`` package for the loader's tests.

It keeps everything of the embedded SmolLM2 GGUF that the converter reads except the size: the
llama architecture with grouped-query attention, the same tokenizer (vocabulary, merges, special
tokens, chat template), tied embeddings, and the same tensor types (Q8_0 embeddings, Q4_1
matrices, float32 norms), but two layers of width 64 with seeded random weights. Converting it
goes through exactly the code a real file does, in seconds rather than minutes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The tiny model's shape: what the file's ``llama.*`` keys say instead of the embedded model's.
TINY_LLAMA = {"block_count": 2, "embedding_length": 64, "feed_forward_length": 128, "head_count": 4,
              "head_count_kv": 2}


def write_tiny_gguf(source: Path, out: Path, *, seed: int = 0) -> Path:
    """Write ``out``: ``source``'s metadata and tokenizer with a tiny random llama's weights."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import quantize

    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    width, layers = TINY_LLAMA["embedding_length"], TINY_LLAMA["block_count"]
    head_dim = width // TINY_LLAMA["head_count"]
    overrides = {
        f"{arch}.block_count": layers, f"{arch}.embedding_length": width,
        f"{arch}.feed_forward_length": TINY_LLAMA["feed_forward_length"],
        f"{arch}.attention.head_count": TINY_LLAMA["head_count"],
        f"{arch}.attention.head_count_kv": TINY_LLAMA["head_count_kv"],
        f"{arch}.rope.dimension_count": head_dim, "general.name": "tiny llama",
    }
    writer = GGUFWriter(out, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # the writer adds these itself
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, overrides.get(key, field.contents()), vtype, sub_type=sub_type)

    vocab = int(reader.fields[f"{arch}.vocab_size"].contents())
    ffn, kv = TINY_LLAMA["feed_forward_length"], TINY_LLAMA["head_count_kv"] * head_dim
    rng = np.random.default_rng(seed)

    def matrix(name: str, rows: int, cols: int, qtype: GGMLQuantizationType) -> None:
        weights = rng.normal(0.0, 0.08, size=(rows, cols)).astype(np.float32)
        writer.add_tensor(name, quantize(weights, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, (1.0 + rng.normal(0.0, 0.05, size=width)).astype(np.float32))

    matrix("token_embd.weight", vocab, width, GGMLQuantizationType.Q8_0)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", width, width, GGMLQuantizationType.Q4_1)
        matrix(f"blk.{i}.attn_k.weight", kv, width, GGMLQuantizationType.Q4_1)
        matrix(f"blk.{i}.attn_v.weight", kv, width, GGMLQuantizationType.Q4_1)
        matrix(f"blk.{i}.attn_output.weight", width, width, GGMLQuantizationType.Q4_1)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", ffn, width, GGMLQuantizationType.Q4_1)
        matrix(f"blk.{i}.ffn_up.weight", ffn, width, GGMLQuantizationType.Q4_1)
        matrix(f"blk.{i}.ffn_down.weight", width, ffn, GGMLQuantizationType.Q4_1)
    norm("output_norm.weight")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
