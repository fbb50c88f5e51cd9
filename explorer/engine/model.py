"""The loaded-model handle every other part of the engine receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The facts of a loaded model that its fingerprint names (in this order), before any ``extra``.
FINGERPRINT_FACTS = ("name", "source", "dtype", "device", "attn_implementation", "num_layers", "num_heads",
                     "num_parameters")

@dataclass
class LoadedModel:
    """A causal LM, its tokenizer and the facts a trace records about them.

    ``attn_implementation`` is the backend the model was loaded with (what ``--attn auto``
    resolved to); DRAGIN's attention signals are read on ``eager`` and ``sdpa`` (see
    :mod:`explorer.engine.attention`), every other method runs on any backend. ``source`` says
    where the weights came from (a path, ``hub:ID``, or ``embedded`` / ``gemma3-270m`` for the
    packaged models).
    """

    model: Any
    tokenizer: Any
    name: str
    source: str
    dtype: str
    device: str
    attn_implementation: str
    load_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    @property
    def num_parameters(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters()))

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", 2048) or 2048)

    def fingerprint(self) -> dict[str, Any]:
        """What a trace records so two runs can be told apart by model and decoding backend."""
        return {**{fact: getattr(self, fact) for fact in FINGERPRINT_FACTS}, **self.extra}
