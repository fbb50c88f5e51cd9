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
model fingerprint records it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from explorer.errors import ModelError

#: The backends the probe can wrap, and the name each is registered under.
PROBED = {"sdpa": "explorer-sdpa", "eager": "explorer-eager"}
_registered = False


def _eager_for(module: nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
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
        probe: AttentionProbe | None = getattr(module, "_explorer_probe", None)
        if probe is not None and probe.active:
            mask = _additive(attention_mask, query, key) if base == "sdpa" else attention_mask
            out, weights = _eager_for(module)(module, query, key, value, mask, **kwargs)
            probe.receive(weights)
            return out, weights
        if base == "sdpa":
            from transformers.integrations.sdpa_attention import sdpa_attention_forward

            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return _eager_for(module)(module, query, key, value, attention_mask, **kwargs)

    return attention


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
    for _, module in layer.named_modules():
        if "Attention" in type(module).__name__:
            return module
    raise ModelError(f"cannot find the attention block of {type(layer).__name__}",
                     fix="use a standard transformers causal LM")


class AttentionProbe:
    """Collects one layer's attention weights while it is active.

    ``receive`` stores the head-mean (and, if asked, per-head) weights of the newest call as
    float32 on the CPU: shape ``(batch, queries, keys)`` or ``(batch, heads, queries, keys)``.
    """

    def __init__(self, model: nn.Module, layer: int = -1) -> None:
        layers = decoder_layers(model)
        self.layer_index = layer % len(layers)
        self.module = attention_module(layers[self.layer_index])
        self.model = model
        self.active = False
        self.per_head = False
        self.last_mean: torch.Tensor | None = None
        self.last_heads: torch.Tensor | None = None
        self.mode = self._install()

    def _install(self) -> str:
        """Switch the model to the probed backend; ``output_attentions`` if it cannot be switched."""
        current = self.model.config._attn_implementation
        base = next((b for b, n in PROBED.items() if n == current), current)
        if base not in PROBED:
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
        w = weights.detach().float()
        self.last_mean = w.mean(dim=1).cpu()
        self.last_heads = w.cpu() if self.per_head else None

    def take_from_outputs(self, attentions: Any) -> None:
        """Fallback path: pick this layer from a full ``output_attentions`` tuple."""
        if attentions is None or attentions[self.layer_index] is None:
            raise ModelError("the model returned no attention weights",
                             fix='load it with attn_implementation="eager" to use attention signals')
        self.receive(attentions[self.layer_index])

    @property
    def needs_output_attentions(self) -> bool:
        return self.mode == "output_attentions"
