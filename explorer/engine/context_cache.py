"""Decoding a model whose forward keeps no usable cache: every pass re-reads the whole context.

The engine decodes one token per forward pass, the model's cache holding what came before. A few
families cannot be decoded that way, and fed one token they silently compute something else:

* a forward that takes no cache at all (GPT-1 ``openai-gpt``, Reformer, XLNet): the token is seen
  alone, at position 0, so its attention row has one column and its next-token distribution
  ignores the context;
* RWKV, whose recurrence travels in a ``state`` list the forward returns instead of a cache object;
* RecurrentGemma, whose recurrent and convolution states live inside its own modules: each new
  sequence overwrites the last one's state, and a change in the number of rows (a sampled batch)
  resets it to zeros.

For them :class:`ContextCache` stands in for the cache. It holds the token ids fed so far, one
row per sequence, and each pass runs the model over the whole context without a cache, keeping
only the newest positions' outputs. The signals are then those of one full forward pass, exact by
construction, at a cost quadratic in the span's length (these are small or old families).
It reports itself as holding recurrent state (``recurrent``): like a state-space layer it cannot
mask a token it was fed, so the sampler recomputes such a row on its own, and it is never copied
into the batched decoder's slots.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

#: Families whose recurrent state lives in the model's modules, not in the cache the engine passes.
STATE_IN_MODULES = frozenset({"recurrent_gemma"})


def recompute_reason(model: Any) -> str | None:
    """Why ``model`` must re-read its whole context every pass (a sentence for the trace), or None."""
    name = type(model).__name__
    if str(getattr(model.config, "model_type", "")) in STATE_IN_MODULES:
        return (f"{name} keeps its recurrent state inside its own modules, where the next sequence overwrites it, "
                "so every pass re-reads the whole context")
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    if "past_key_values" in params or "cache_params" in params:
        return None
    if "state" in params:
        return (f"{name} carries its recurrence in a state list outside the cache interface, so every pass re-reads "
                "the whole context")
    return f"{name} keeps no cache between forward passes, so every pass re-reads the whole context"


class ContextCache:
    """The ids fed so far, ``(rows, length)``; what a pass over the full context needs instead of a cache."""

    #: Behaves as a recurrent state would: it cannot mask a fed token, cut back cheaply or join the slots.
    recurrent = True
    layers: tuple[Any, ...] = ()

    def __init__(self) -> None:
        self.ids: torch.Tensor | None = None

    def extend(self, new_ids: torch.Tensor) -> torch.Tensor:
        """Append ``new_ids`` (rows, n) and return the whole context."""
        self.ids = new_ids if self.ids is None else torch.cat([self.ids, new_ids.to(self.ids.device)], dim=1)
        return self.ids

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0 if self.ids is None else int(self.ids.shape[1])

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions (a negative value drops that many from the end)."""
        if self.ids is None:
            return
        keep = max_length if max_length >= 0 else self.ids.shape[1] + max_length
        self.ids = self.ids[:, :max(0, keep)]

    def reorder_cache(self, index: torch.Tensor) -> None:
        if self.ids is not None:
            self.ids = self.ids[index.to(self.ids.device)]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.ids is not None:
            self.ids = self.ids.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, index: torch.Tensor) -> None:
        self.reorder_cache(index)
