"""What a model's layers are, read from its config alone (no weights): which layers attend, which carry a state.

Hybrid families (Jamba, Zamba, Falcon-H1, Nemotron-H, Qwen3-Next, ...) mix attention layers with
state-space or linear-recurrent ones; pure state-space families (Mamba, Mamba-2) have no
attention at all. transformers says which is which in ``config.layer_types``. The attention probe
reads the last layer that attends (the last layer itself on a transformer), and a method that
needs attention weights is refused on a model with none, before its weights load where the model
is a folder or a cached hub id.

A recurrent layer keeps a running state instead of a key per position, so its cache cannot be
cut back to an earlier position (``crop``) nor repeated per row the way keys are; the engine
recomputes from the prefix where it would have cut (:func:`holds_recurrent_state`).
"""

from __future__ import annotations

from typing import Any

#: ``layer_types`` values of layers that compute softmax attention (``hybrid``: attention and a
#: state-space mixer side by side in one layer, as in Falcon-H1).
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention", "hybrid"})


#: Families whose every layer mixes tokens by a linear recurrence, not softmax attention, though their config lists
#: no layer types (RWKV's "attention" is its time-mixing recurrence: there are no weights over positions to read).
NO_SOFTMAX_ATTENTION = frozenset({"rwkv"})


def attention_layer_indices(config: Any) -> list[int] | None:
    """The indices of the layers that attend; None when the config does not list layer types (every layer of a
    plain transformer attends). An empty list: a state-space model with no attention layer."""
    if str(getattr(config, "model_type", "")) in NO_SOFTMAX_ATTENTION:
        return []
    types = getattr(config, "layer_types", None) or getattr(config, "layers_block_type", None)
    if not types:
        return None
    return [i for i, kind in enumerate(types) if str(kind) in ATTENTION_LAYER_TYPES]


def family_kind(config: Any) -> str:
    """``transformer``, ``hybrid`` (attention and state-space layers) or ``state-space`` (no attention layer)."""
    layers = attention_layer_indices(config)
    types = getattr(config, "layer_types", None) or []
    if layers is None or (layers and len(layers) == len(types) and "hybrid" not in types):
        return "transformer"
    return "hybrid" if layers else "state-space"


def cache_argument(model: Any) -> str:
    """The keyword under which the model's forward takes its cache: ``past_key_values``, or ``cache_params`` for
    the Mamba families (which would otherwise ignore the cache and see only the newest token)."""
    import inspect

    try:
        names = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache_params" if "cache_params" in names and "past_key_values" not in names else "past_key_values"


def holds_recurrent_state(cache: Any) -> bool:
    """Whether a cache has a layer with a recurrent (state-space or linear-attention) state, which cannot be cut
    back to an earlier position or repeated per row with the key/value cache's own methods."""
    if getattr(cache, "recurrent", False):  # a ContextCache (explorer.engine.context_cache) behaves as one
        return True
    for layer in getattr(cache, "layers", ()):
        if hasattr(layer, "recurrent_states") or hasattr(layer, "conv_states"):
            return True
    return False


def repeat_rows(cache: Any, n: int) -> None:
    """Make a one-row cache ``n`` identical rows (every layer kind: keys and values, recurrent and conv states)."""
    import torch

    if not holds_recurrent_state(cache):
        cache.batch_repeat_interleave(n)
        return
    cache.reorder_cache(torch.zeros(n, dtype=torch.long))


def select_rows(cache: Any, index: Any) -> None:
    """Keep only the rows ``index`` of a batched cache (every layer kind)."""
    if not holds_recurrent_state(cache):
        cache.batch_select_indices(index)
        return
    cache.reorder_cache(index)
