"""Reading one layer's attention weights without paying for all of them.

DRAGIN needs the LAST layer's attention of every generated token over all earlier positions.
Asking transformers for ``output_attentions=True`` forces the slow eager kernel on every layer
and returns every layer's weights, most of which would be thrown away. Instead the explorer
registers its own attention implementation with transformers' ``AttentionInterface``: every
layer runs the fast kernel of the model's chosen backend (``sdpa`` or ``eager``), except a layer
carrying an :class:`AttentionProbe`, which runs the model's own eager attention (so soft-capping,
sinks and sliding windows behave as the architecture defines them) and hands its weights to the
probe. The probe is inactive while a prompt is pre-filled, so the quadratic prompt-by-prompt
matrix is never built unless a caller asks for it.

Models whose attention does not go through the interface fall back to ``output_attentions``
(eager everywhere); :attr:`AttentionProbe.mode` says which path a model uses, and the trace's
model fingerprint records it. Backends that never materialise weights (flash attention, flex
attention) leave the probe off: methods that need no attention run on them unchanged, and a
method that does gets an error naming the ``--attn`` setting that works.

A row's columns are not always the whole context. A sliding-window (or chunked) layer keeps only
its last W keys in the KV cache, so a generated token's row has W columns, the last of which is
the token itself; a cache with sink tokens keeps its first few positions as well.
:func:`absolute_row` puts a row back on the context's absolute positions, with 0 attention where
the layer cannot look (which is what the layer computes), and :func:`probed_window` reads the
window of the probed layer so the trace can say it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from explorer.errors import ModelError

#: The backends the probe can wrap, and the name each is registered under.
PROBED = {"sdpa": "explorer-sdpa", "eager": "explorer-eager"}
_registered = False


def eager_for(module: nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The architecture's own eager attention function (Gemma's soft-cap, GPT-OSS's sinks...)."""
    owner = sys.modules.get(type(module).__module__)
    fn = getattr(owner, "eager_attention_forward", None)
    if fn is None:
        from transformers.models.llama.modeling_llama import eager_attention_forward as fn
    return fn


def _additive(mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """Turn an sdpa-style mask (boolean, or None meaning plain causal) into the additive form eager expects."""
    q_len, k_len = query.shape[2], key.shape[2]
    if mask is None:
        if q_len == 1:
            return None
        # Bottom-right aligned causal mask: query i sits at absolute position k_len - q_len + i.
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril(k_len - q_len)
        mask = allowed[None, None]
    if mask.dtype == torch.bool:
        out = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
        return out.masked_fill(~mask, torch.finfo(query.dtype).min)
    return mask


def _make_impl(base: str) -> Callable[..., tuple[torch.Tensor, Any]]:
    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        shared = getattr(module, "_explorer_prefix", None)
        if shared is not None:  # rows continuing one prompt held once (explorer.engine.shared_prefix)
            return shared.attend(module, query, key, value, attention_mask, _backend(base, module), **kwargs)
        probe: AttentionProbe | None = getattr(module, "_explorer_probe", None)
        if probe is not None and probe.active:
            mask = _additive(attention_mask, query, key) if base == "sdpa" else attention_mask
            out, weights = eager_for(module)(module, query, key, value, mask, **kwargs)
            probe.receive(weights)
            return out, weights
        if base == "sdpa":
            from transformers.integrations.sdpa_attention import sdpa_attention_forward

            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return eager_for(module)(module, query, key, value, attention_mask, **kwargs)

    return attention


def _backend(base: str, module: nn.Module) -> Callable[..., tuple[torch.Tensor, Any]]:
    """The unprobed attention function of ``base`` for ``module``."""
    if base == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    return eager_for(module)


def register_implementations() -> None:
    """Register the probed backends with transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    for base, name in PROBED.items():
        AttentionInterface.register(name, _make_impl(base))
        AttentionMaskInterface.register(name, sdpa_mask if base == "sdpa" else eager_mask)
    _registered = True


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The stack of decoder layers, found by shape so any architecture works (Llama, GPT-2, Qwen...)."""
    n = int(getattr(model.config, "num_hidden_layers", 0) or getattr(model.config, "n_layer", 0))
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n and n > 0:
            return module
    raise ModelError(f"cannot find the {n} decoder layers of {type(model).__name__}",
                     fix="use a standard transformers causal LM (Llama, Qwen, Mistral, GPT-2, SmolLM...)")


def attention_module(layer: nn.Module) -> nn.Module:
    """The self-attention block inside a decoder layer."""
    for name in ("self_attn", "attn", "attention", "self_attention"):
        module = getattr(layer, name, None)
        if isinstance(module, nn.Module):
            return module
    # By class name: the attention itself, not a block around it (Zamba2's hybrid layer holds a shared
    # "AttentionDecoderLayer" whose own self_attn is the module the probe must sit on).
    found = [m for _, m in layer.named_modules() if "Attention" in type(m).__name__]
    for module in found:
        if not any(word in type(module).__name__ for word in ("Layer", "Block", "Decoder")):
            return module
    if found:
        return found[0]
    raise ModelError(f"cannot find the attention block of {type(layer).__name__}",
                     fix="use a standard transformers causal LM")


class AttentionProbe:
    """Collects one layer's attention weights while it is active.

    ``receive`` stores the head-mean (and, if asked, per-head) weights of the newest call as
    float32 on the CPU: shape ``(batch, queries, keys)`` or ``(batch, heads, queries, keys)``.
    """

    def __init__(self, model: nn.Module, layer: int = -1) -> None:
        from explorer.engine.capabilities import attention_layer_indices

        layers = decoder_layers(model)
        self.layer_index = layer % len(layers)
        attending = attention_layer_indices(model.config)
        #: False on a state-space model: no layer attends, so there are no weights to read.
        self.has_attention = attending is None or bool(attending)
        if attending and self.layer_index not in attending:
            if layer != -1:
                raise ModelError(f"layer {self.layer_index} of {type(model).__name__} is a state-space layer, with no "
                                 "attention to read", fix=f"probe one of its attention layers: {attending}")
            self.layer_index = attending[-1]  # a hybrid: the last layer that attends
        self.module = attention_module(layers[self.layer_index]) if self.has_attention else None
        self.model = model
        self.active = False
        self.per_head = False
        self.last_mean: torch.Tensor | None = None
        self.last_heads: torch.Tensor | None = None
        #: While set, weights go to this callable on the device instead (a batched decode step folds
        #: them into amax there, so no row comes back to the host per token).
        self.sink: Callable[[torch.Tensor], None] | None = None
        self.mode = self._install()

    def _install(self) -> str:
        """Switch the model to the probed backend; ``output_attentions`` if it cannot be switched."""
        if not self.has_attention:
            return "none"
        current = self.model.config._attn_implementation
        base = next((b for b, n in PROBED.items() if n == current), current)
        if base not in PROBED or not follows_attention_interface(type(self.model)):
            return "output_attentions"
        register_implementations()
        try:
            self.model.set_attn_implementation(PROBED[base])
        except (ValueError, KeyError, ImportError):
            return "output_attentions"
        if self.model.config._attn_implementation != PROBED[base]:
            return "output_attentions"
        self.module._explorer_probe = self
        return f"probe:{base}"

    @property
    def base(self) -> str:
        """The backend every other layer runs (``sdpa`` or ``eager``)."""
        return self.mode.split(":", 1)[1] if self.mode.startswith("probe:") else "eager"

    def receive(self, weights: torch.Tensor) -> None:
        if self.sink is not None:
            self.sink(weights.detach())
            return
        w = weights.detach().float()
        self.last_mean = w.mean(dim=1).cpu()
        self.last_heads = w.cpu() if self.per_head else None

    def take_from_outputs(self, attentions: Any) -> None:
        """Fallback path: pick this layer from a full ``output_attentions`` tuple."""
        if not attentions or len(attentions) <= self.layer_index or attentions[self.layer_index] is None:
            raise ModelError(f"the model returned no attention weights with attention implementation "
                             f"{self.implementation!r}", fix=EAGER_FIX)
        weights = attentions[self.layer_index]
        if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or weights.shape[-1] < weights.shape[-2]:
            shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ModelError(f"{type(self.model).__name__} returned {shape} as the attentions of layer "
                             f"{self.layer_index}, not weights of shape (batch, heads, queries, keys)",
                             fix=NO_ATTENTION_FIX)
        self.receive(weights)

    def keep_last_queries(self, n: int) -> None:
        """Keep the rows of the newest ``n`` queries (a pass that re-read its whole context computed them all)."""
        if self.last_mean is not None:
            self.last_mean = self.last_mean[:, -n:]
        if self.last_heads is not None:
            self.last_heads = self.last_heads[:, :, -n:]

    def no_weights_error(self) -> ModelError:
        """Why an active probe received nothing during a pass, as it happened."""
        current = str(self.model.config._attn_implementation)
        if self.mode.startswith("probe:") and current != PROBED[self.base]:
            return ModelError(f"the attention probe on layer {self.layer_index} received no weights: the model's "
                              f"attention implementation is now {current!r}, changed after the engine was built",
                              fix="build a new engine (reload the model) after changing its attention implementation")
        module = type(self.module).__name__ if self.module is not None else "none"
        return ModelError(f"the attention probe on layer {self.layer_index} of {type(self.model).__name__} received "
                          f"no weights: its attention block ({module}) was not run through the attention "
                          f"implementation {current!r} during the pass, so this family's attention cannot be read",
                          fix=NO_ATTENTION_FIX)

    @property
    def needs_output_attentions(self) -> bool:
        return self.mode == "output_attentions"

    @property
    def implementation(self) -> str:
        """The model's attention backend as the user chose it (without the probe's wrapper name)."""
        current = str(self.model.config._attn_implementation)
        return next((b for b, n in PROBED.items() if n == current), current)

    @property
    def readable(self) -> bool:
        """Whether attention weights can be read: through the probe, or from ``output_attentions`` of eager.

        ``output_attentions`` of any other backend is not trusted: some families compute it on a
        path that is only exercised with eager (Falcon under sdpa adds a boolean mask as numbers
        and returns non-causal weights).
        """
        return self.mode.startswith("probe:") or (self.has_attention and self.implementation == "eager")

    def require(self, purpose: str) -> None:
        """Refuse, before any work, a call that needs attention weights on a backend that has none."""
        if not self.has_attention:
            raise ModelError(f"{purpose} needs attention weights, but {type(self.model).__name__} has no attention "
                             "layer (every layer is a state-space mixer)", fix=NO_ATTENTION_FIX)
        if not self.readable:
            raise ModelError(f"{purpose} needs the last layer's attention weights, but the model runs with "
                             f"attention implementation {self.implementation!r}, whose kernels never materialise "
                             "them (methods without attention signals, such as wo, sr, flare, seakr, drrag and "
                             "blendfilter, run on it unchanged)", fix=ATTN_FIX)


#: What a user can do on a model without attention layers.
NO_ATTENTION_FIX = ("run this method on a model with attention layers (a transformer, or a hybrid such as Jamba), or "
                    "pick a method that reads no attention: wo, sr, fl, fs, flare, seakr, drrag or blendfilter")
#: What a user can do when attention weights are missing: every command and the app take ``--attn``.
ATTN_FIX = ("load the model with --attn auto or --attn eager (EXPLORER_ATTN for the app); auto picks a backend "
            "whose attention weights the explorer can read")


def follows_attention_interface(model_class: type) -> bool:
    """Whether a model class routes attention through transformers' AttentionInterface (so it can be probed)."""
    check = getattr(model_class, "_can_set_attn_implementation", None)
    try:
        return bool(check()) if callable(check) else False
    except (OSError, TypeError):  # source not inspectable: treat it as a family that cannot be switched
        return False


def auto_implementation(model_class: type) -> str | None:
    """What ``--attn auto`` loads a model class with.

    ``None`` lets transformers pick (sdpa where the family supports it, eager where not, as for
    Gemma-2); families that do not go through the AttentionInterface get eager, the one backend
    whose ``output_attentions`` the explorer reads, so attention signals work on them too.
    """
    return None if follows_attention_interface(model_class) else "eager"
EAGER_FIX = "load the model with --attn eager (EXPLORER_ATTN=eager for the app)"


@dataclass(frozen=True)
class Window:
    """The attention span of the probed layer: ``kind`` is ``sliding`` or ``chunked``, ``size`` in tokens."""

    kind: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "size": self.size}

    def describe(self) -> str:
        if self.kind == "chunked":
            return f"attends only within chunks of {self.size} tokens"
        return f"attends only to the last {self.size} positions (sliding window)"


def probed_window(config: Any, layer_index: int) -> Window | None:
    """The window of layer ``layer_index`` as the KV cache will apply it, or None for full attention."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        types, kwargs = get_layer_types_and_kwargs(config)
        kind, size = types[layer_index], kwargs[layer_index].get("sliding_window")
    except (ImportError, AttributeError, IndexError, KeyError, TypeError, ValueError):
        types = getattr(config, "layer_types", None)
        kind = types[layer_index] if types else ("sliding_attention" if getattr(config, "sliding_window", None)
                                                 else "full_attention")
        size = getattr(config, "attention_chunk_size" if kind == "chunked_attention" else "sliding_window", None)
    if not size or kind not in ("sliding_attention", "chunked_attention"):
        return None
    return Window("chunked" if kind == "chunked_attention" else "sliding", int(size))


def sink_tokens(cache: Any, layer_index: int) -> int:
    """How many leading positions a cache layer keeps besides its window (StreamingLLM-style sinks)."""
    layers = getattr(cache, "layers", None)
    if not layers or layer_index >= len(layers):
        return 0
    layer = layers[layer_index]
    for name in ("num_sink_tokens", "sink_tokens", "sink_size"):
        value = getattr(layer, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def absolute_row(row: torch.Tensor, total: int, sinks: int = 0) -> torch.Tensor:
    """One query's attention over its keys, put on the context's ``total`` absolute positions.

    The keys a layer attends over are the context itself (``len(row) == total``), or, with a
    windowed cache, the first ``sinks`` positions followed by the most recent ones, the query's
    own position last. Positions the layer no longer holds get 0, the attention it gave them.
    """
    n = int(row.shape[-1])
    if n == total:
        return row
    if n > total or sinks > n:
        raise ModelError(f"the attention row has {n} columns for a context of {total} positions "
                         f"({sinks} sink tokens): this cache layout is not understood", fix=EAGER_FIX)
    out = row.new_zeros(total)
    out[:sinks] = row[:sinks]
    out[total - (n - sinks):] = row[sinks:]
    return out
