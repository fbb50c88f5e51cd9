"""Whether the methods asked for can run on the model asked for, told before the model loads.

A method declares what it needs of the model (:attr:`explorer.methods.base.Method.needs`); DRAGIN
reads attention weights. Two set-ups have none: an attention backend whose kernels never
materialise them (flash attention, flex attention), and a state-space model with no attention
layer (Mamba). Both can be told from the command line and the model's config.json, so ``run``,
``eval`` and ``sweep`` refuse such a method before a model is loaded, naming the method and the
fix; a model built in the process (a test's random model, the app's background load) is checked
when the run starts, by the engine's attention probe.
"""

from __future__ import annotations

from collections.abc import Iterable

from explorer.errors import ModelError
from explorer.methods.base import get_method


def attention_readers(methods: Iterable[tuple[str, str | None]]) -> list[str]:
    """The methods (``name (variant)``) among ``methods`` that read attention weights."""
    out = []
    for name, variant in methods:
        cls = get_method(name)
        if "attention_weights" in cls.needs:
            label = f"{name} ({variant or cls.variants[0]})"
            if label not in out:
                out.append(label)
    return out


def check_before_loading(methods: Iterable[tuple[str, str | None]], model: str, attn: str | None) -> None:
    """Refuse a method the model set-up cannot serve, before any weights are read."""
    from explorer.engine.attention import ATTN_FIX, NO_ATTENTION_FIX
    from explorer.engine.capabilities import attention_layer_indices
    from explorer.engine.loader import SIGNAL_ATTN, config_before_loading

    readers = attention_readers(methods)
    if not readers:
        return
    who = ", ".join(readers)
    verb = "reads" if len(readers) == 1 else "read"
    backend = str(attn or "auto").strip()
    if backend not in SIGNAL_ATTN:
        raise ModelError(f"{who} {verb} attention weights, but --attn {backend} kernels never materialise them",
                         where="--attn", fix=ATTN_FIX + "; methods that read no attention run on any backend")
    config = config_before_loading(model)
    if config is not None and attention_layer_indices(config) == []:
        kind = getattr(config, "model_type", "this model")
        raise ModelError(f"{who} {verb} attention weights, but {model} ({kind}) has no attention layer: every layer "
                         "is a state-space mixer", where="--model", fix=NO_ATTENTION_FIX)
