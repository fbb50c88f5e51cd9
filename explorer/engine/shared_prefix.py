"""Rows that continue one prompt read its keys and values once, not once per row.

The sampler decodes k rows after the same prompt. Repeating the prompt's key/value cache to k
rows (what a batched ``DynamicCache`` needs) makes every decode step read k copies of the same
prompt states and, because the cache grows by concatenation, copy all of them once more: with
k = 20 rows after a 500-token prompt that is ~0.5 GB moved per token on SmolLM2-135M, more than
the model's weights. Here the prompt's cache stays one row (:class:`SharedPrefix`) and the rows'
own cache holds only the tokens they were fed. Each attention layer then attends over both:
the scores of all rows' queries against the prompt's keys are ONE matrix product per key/value
head, the scores against a row's own keys another, and a single softmax over the two score
blocks side by side gives exactly the weights attention over ``prompt + own tokens`` gives. The
outputs are the same computation as the repeated cache up to float rounding (the products are
shaped differently); the sampler checks this once per engine against the repeated cache before
relying on it (:func:`verify`).

Only plain full-attention layers take this path (no sliding window, soft-capping or attention
sinks: those are read from the call and the layer, and such a call attends over the prompt
repeated, as before); other caches keep the repeated prompt.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.engine.attention import attention_module, decoder_layers


class SharedPrefix:
    """A one-row prompt cache that every layer's attention reads beside the rows' own cache.

    Use as a context manager around the decode passes: while entered, each attention module of
    the model carries it, and :func:`explorer.engine.attention` hands such a layer's call to
    :meth:`attend`.
    """

    def __init__(self, model: Any, prefix_cache: Any) -> None:
        self.model = model
        self.keys = [layer.keys for layer in prefix_cache.layers]
        self.values = [layer.values for layer in prefix_cache.layers]
        self.length = int(self.keys[0].shape[-2]) if self.keys else 0
        self._modules = [attention_module(layer) for layer in decoder_layers(model)]
        #: Layers whose call asked for what the fast path does not do, and attended over the repeated prompt.
        self.general_calls = 0

    def __enter__(self) -> SharedPrefix:
        for module in self._modules:
            module._explorer_prefix = self
        return self

    def __exit__(self, *exc: Any) -> None:
        for module in self._modules:
            if getattr(module, "_explorer_prefix", None) is self:
                del module._explorer_prefix

    def attend(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, base: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """Attention of ``query`` (rows, heads, q, d) over the prompt and the rows' own ``key``/``value``.

        ``attention_mask`` is the mask transformers built for the rows' own cache (None, boolean
        with True = may attend, or additive); the prompt is visible to every row. ``base`` is the
        backend's own function, used over the repeated prompt where the fast path does not apply.
        """
        layer = int(module.layer_idx)
        pk, pv = self.keys[layer], self.values[layer]
        if (kwargs.get("sliding_window") or kwargs.get("softcap") or getattr(module, "sinks", None) is not None
                or kwargs.get("dropout")):
            return self._general(module, query, key, value, attention_mask, base, pk, pv, **kwargs)
        rows, heads, q_len, dim = query.shape
        kv_heads = pk.shape[1]
        group = heads // kv_heads
        scaling = kwargs.get("scaling")
        scale = float(scaling) if scaling is not None else dim ** -0.5
        # Queries of every row, grouped under the key/value head they read: (kv_heads, rows * group * q, d).
        grouped = query.reshape(rows, kv_heads, group, q_len, dim)
        flat = grouped.permute(1, 0, 2, 3, 4).reshape(kv_heads, rows * group * q_len, dim)
        prefix_scores = torch.bmm(flat, pk[0].transpose(1, 2)).mul_(scale)
        prefix_scores = prefix_scores.view(kv_heads, rows, group, q_len, -1).permute(1, 0, 2, 3, 4)
        own_scores = torch.matmul(grouped.reshape(rows, kv_heads, group * q_len, dim), key.transpose(-1, -2))
        own_scores = own_scores.mul_(scale).view(rows, kv_heads, group, q_len, -1)
        own_scores = _masked(own_scores, attention_mask, q_len)
        scores = torch.cat([prefix_scores, own_scores], dim=-1)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        prefix_w, own_w = weights.split([self.length, key.shape[-2]], dim=-1)
        prefix_out = torch.bmm(prefix_w.permute(1, 0, 2, 3, 4).reshape(kv_heads, rows * group * q_len, -1), pv[0])
        prefix_out = prefix_out.view(kv_heads, rows, group, q_len, dim).permute(1, 0, 2, 3, 4)
        own_out = torch.matmul(own_w.reshape(rows, kv_heads, group * q_len, -1), value)
        out = prefix_out + own_out.view(rows, kv_heads, group, q_len, dim)
        return out.reshape(rows, heads, q_len, dim).transpose(1, 2).contiguous(), None

    def _general(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, base: Any, pk: torch.Tensor, pv: torch.Tensor,
                 **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """The backend's own attention over the prompt repeated per row and the rows' tokens (what the repeated
        cache would hold), with the mask widened to the prompt's columns."""
        self.general_calls += 1
        rows = query.shape[0]
        keys = torch.cat([pk.expand(rows, -1, -1, -1), key], dim=2)
        values = torch.cat([pv.expand(rows, -1, -1, -1), value], dim=2)
        mask = _widened(attention_mask, query, self.length, key.shape[-2])
        return base(module, query, keys, values, mask, **kwargs)


def _masked(scores: torch.Tensor, mask: torch.Tensor | None, q_len: int) -> torch.Tensor:
    """Apply transformers' mask of the rows' own columns to scores shaped (rows, kv, group, q, own)."""
    if mask is None:
        return scores
    own = scores.shape[-1]
    m = mask[..., -q_len:, -own:]
    m = m.reshape(m.shape[0], 1, 1, q_len, own) if m.dim() == 4 else m
    if m.dtype == torch.bool:
        return scores.masked_fill(~m, torch.finfo(scores.dtype).min)
    return scores + m.to(scores.dtype)


def _widened(mask: torch.Tensor | None, query: torch.Tensor, prefix: int, own: int) -> torch.Tensor | None:
    """A mask over the rows' own columns, with the prompt's columns in front made visible (same kind of mask)."""
    if mask is None:
        if query.shape[2] == 1:
            return None
        allowed = torch.ones(query.shape[2], own, dtype=torch.bool, device=query.device).tril(own - query.shape[2])
        mask = allowed[None, None].expand(query.shape[0], 1, -1, -1)
    m = mask[..., -query.shape[2]:, -own:]
    if m.dtype == torch.bool:
        front = torch.ones(*m.shape[:-1], prefix, dtype=torch.bool, device=m.device)
    else:
        front = torch.zeros(*m.shape[:-1], prefix, dtype=m.dtype, device=m.device)
    return torch.cat([front.expand(m.shape[0], *front.shape[1:]), m], dim=-1)


def for_rows(engine: Any, cache: Any, rows: int, positions: bool) -> SharedPrefix | None:
    """A :class:`SharedPrefix` over the prefilled ``cache`` for ``rows`` rows, or None where the rows repeat it.

    It needs more than one row, plain key/value layers, a model that takes position ids and whose
    attention goes through the explorer's implementation, and the engine's ``shares_prefix`` not
    set to False; the first time, :func:`verify` checks it against the repeated cache on this model.
    """
    from explorer.engine.slots import plain_layers

    if rows < 2 or not positions or engine.shares_prefix is False or not engine.probe.mode.startswith("probe:"):
        return None
    if plain_layers(cache) is not None:
        return None
    if engine.shares_prefix is None:
        engine.shares_prefix = verify(engine, cache)
        if not engine.shares_prefix:
            return None
    return SharedPrefix(engine.model, cache)


def verify(engine: Any, cache: Any) -> bool:
    """Whether two rows fed after ``cache`` get the same logits over the shared prompt as over it repeated.

    Tolerance as for the shared decode batch: 1e-3 of the logits' scale in float32, 5e-2 in lower
    precision. The check runs once per engine, on the first prompt sampled, and costs two one-token
    passes of two rows.
    """
    import copy

    from explorer.engine.capabilities import repeat_rows

    p = int(cache.get_seq_length())
    device = engine.device
    ids = torch.tensor([[0], [min(1, engine.model.config.vocab_size - 1)]], device=device)
    positions = torch.full((2, 1), p, dtype=torch.long, device=device)
    try:
        repeated = copy.deepcopy(cache)
        repeat_rows(repeated, 2)
        expected = engine.forward_batch(ids, repeated, attention_mask=torch.ones(2, p + 1, dtype=torch.long,
                                                                                 device=device),
                                        position_ids=positions).logits[:, -1].float()
        with SharedPrefix(engine.model, cache):
            got = engine.forward_batch(ids, engine.new_cache(), attention_mask=torch.ones(2, 1, dtype=torch.long,
                                                                                          device=device),
                                       position_ids=positions).logits[:, -1].float()
    except Exception:  # noqa: BLE001 - any failure means this family keeps the repeated prompt
        return False
    scale = 1.0 + float(expected.abs().max())
    tolerance = 1e-3 if engine.model.dtype == torch.float32 else 5e-2
    return float((got - expected).abs().max()) <= tolerance * scale
