"""Capturing one layer's hidden state with a forward hook, on any architecture.

SEAKR reads the hidden state of the middle layer at a sequence's final position. The authors
patch vLLM for Llama; a forward hook on the decoder layer (the residual stream after the layer)
or on its MLP (the MLP's output before it is added back, the reference's choice) gives the same
numbers on every model transformers loads, at no extra forward pass.

Some families have no MLP block a hook can find (OPT's feed-forward is two loose linear layers
inside the decoder layer). There the capture falls back to the residual stream and says so in
:attr:`HiddenCapture.fallback`, which the trace records as a note, instead of refusing the run.
A mixture-of-experts block that returns its tokens flattened to ``(batch * seq, hidden)`` (Llama-4)
is put back into the shape of its input, so every sample keeps one state per position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from explorer.engine.attention import decoder_layers
from explorer.errors import ConfigError

if TYPE_CHECKING:
    from explorer.trace import TraceRecorder

SITES = ("mlp", "residual")


@dataclass(frozen=True)
class HiddenSpec:
    """Which hidden state to capture: a layer index (negative counts from the end; None = middle) and a site."""

    layer: int | None = None
    site: str = "mlp"

    def resolve(self, num_layers: int) -> int:
        """The 0-based layer index; the middle layer L // 2 by default."""
        if self.site not in SITES:
            raise ConfigError(f"hidden-state site {self.site!r} is unknown", where="site",
                              fix=f"use one of {', '.join(SITES)}")
        index = num_layers // 2 if self.layer is None else self.layer
        if not -num_layers <= index < num_layers:
            raise ConfigError(f"layer {index} does not exist (the model has {num_layers})", where="layer",
                              fix=f"use a layer in [0, {num_layers - 1}], or leave it empty for the middle layer")
        return index % num_layers


def _mlp_of(layer: nn.Module) -> nn.Module | None:
    """The layer's MLP block, or None when the architecture has no module that is one."""
    for name in ("mlp", "feed_forward", "ffn", "block_sparse_moe", "mlp_block"):
        module = getattr(layer, name, None)
        if isinstance(module, nn.Module):
            return module
    return None


class HiddenCapture:
    """A context manager that records, for every forward call, the chosen layer's output.

    ``last`` holds the newest output as a float32 CPU tensor of shape ``(batch, seq, hidden)``.
    ``site`` is where it actually reads; ``fallback`` says why, when that is not the site asked for.
    """

    def __init__(self, model: nn.Module, spec: HiddenSpec) -> None:
        layers = decoder_layers(model)
        self.layer_index = spec.resolve(len(layers))
        self.site = spec.site
        self.fallback: str | None = None
        target = layers[self.layer_index]
        module = _mlp_of(target) if spec.site == "mlp" else target
        if module is None:
            self.site = "residual"
            self.fallback = (f"{type(target).__name__} has no MLP block whose output can be read, so the hidden "
                             f"states of layer {self.layer_index} come from the residual stream (the layer's output) "
                             "instead; set site=residual to make this the explicit choice")
            module = target
        self.module = module
        self.last: torch.Tensor | None = None
        self._handle: Any = None

    def _hook(self, _module: nn.Module, inputs: Any, output: Any) -> None:
        tensor = output[0] if isinstance(output, (tuple, list)) else output
        given = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        if given is not None and given.dim() == 3 and tensor.dim() == 2:
            # A mixture-of-experts block (Llama-4's) returns its tokens flattened to (batch * seq, hidden).
            tensor = tensor.reshape(*given.shape[:-1], -1)
        self.last = tensor.detach().float().cpu()

    def __enter__(self) -> HiddenCapture:
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def note_fallback(rec: TraceRecorder | None, capture: HiddenCapture | None) -> None:
    """Record the capture's site fallback once per run, so the trace says where states came from."""
    if capture is None or capture.fallback is None or rec is None:
        return
    if any(e.kind == "note" and e.payload.get("hidden_site_fallback") for e in rec.trace.events):
        return
    rec.add("note", level="warning", message=capture.fallback, hidden_site_fallback="residual")
