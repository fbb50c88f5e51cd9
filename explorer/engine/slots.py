"""A key/value cache with one fixed row per sequence: what lets many sequences decode as one batch.

transformers' ``DynamicCache`` holds one batch whose rows all have the same length and grows by
concatenation, so sequences of different lengths that join and leave at different times cannot
share it without padding and re-copying every step. A :class:`SlotCache` instead keeps, per
layer, one preallocated buffer ``(rows, kv_heads, capacity, head_dim)``; sequence ``r`` lives in
row ``r``, its token ``t`` at column ``t``. A decode step feeds one token per row at that row's
own position: :class:`SlotView` (what the model receives as ``past_key_values``) writes each new
key and value into its row at that position and hands attention the whole buffer, and the
step's mask lets row ``r`` see columns ``0..pos_r`` only. Nothing is copied per step and the
buffers never move, which is also what a captured CUDA graph needs.

Rows are kept dense: the live sequences occupy rows ``0..n-1``. A sequence that leaves hands its
row to the last live one (:meth:`SlotCache.move`), so a step always runs on the prefix ``[:n]``.
A sequence's prompt is encoded by the engine's ordinary prefill (with its prefix cache) into a
``DynamicCache`` and copied into a row (:meth:`SlotCache.load`), so its first logits are exactly
those of a single run; a span that keeps its states for attention rows gets them back as a
``DynamicCache`` (:meth:`SlotCache.export`).

Only plain full-attention caches fit this layout (every layer a ``DynamicLayer``); sliding-window,
chunked, linear-attention and other hybrid caches keep decoding one sequence at a time.
"""

from __future__ import annotations

from typing import Any

import torch

#: Capacity grows in steps of this many positions (a captured graph is kept per capacity).
LENGTH_STEP = 256


def round_up(value: int, step: int) -> int:
    return max(step, -(-value // step) * step)


def row_bucket(rows: int) -> int:
    """The batch size a step runs at for ``rows`` live rows: the next power of two (graphs are kept per size)."""
    size = 1
    while size < rows:
        size *= 2
    return size


def plain_layers(cache: Any) -> str | None:
    """Why a prefilled ``DynamicCache`` cannot be copied into slots, or None when it can."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return "the model's cache has no per-layer key/value tensors"
    for index, layer in enumerate(layers):
        kind = type(layer).__name__
        if kind != "DynamicLayer":
            return (f"layer {index} keeps a {kind} (sliding-window, chunked or recurrent state), not plain keys "
                    "and values")
        keys = getattr(layer, "keys", None)
        if not isinstance(keys, torch.Tensor) or keys.dim() != 4:
            return f"layer {index} holds no 4-d key tensor"
    return None


class SlotCache:
    """Per-layer key/value buffers with one row per live sequence, plus per-row signal buffers.

    Besides keys and values it holds, per row, the running amax of every position (the largest
    probed attention a position received from a later token, -1 where none yet) and the latest
    captured hidden state of each requested site: both are written on the device by the decode
    step and read once, when a span ends.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rows = 0
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.amax: torch.Tensor | None = None
        self.hidden: dict[Any, torch.Tensor] = {}
        #: Bumped whenever the buffers are reallocated (captured graphs point at the old ones).
        self.generation = 0

    @property
    def allocated(self) -> bool:
        return bool(self.keys)

    def bytes_per_position(self) -> int:
        return sum(k[0, :, 0].numel() * k.element_size() * 2 for k in self.keys)

    def ensure(self, rows: int, length: int, like: Any = None) -> bool:
        """Room for ``rows`` rows of ``length`` positions (growing in buckets); True when buffers moved."""
        if not self.keys and like is None:
            raise ValueError("the first ensure() needs a prefilled cache to take the layer shapes from")
        rows_needed, length_needed = row_bucket(rows), round_up(length, LENGTH_STEP)
        if self.keys and rows_needed <= self.rows and length_needed <= self.capacity:
            return False
        new_rows, new_len = max(rows_needed, self.rows), max(length_needed, self.capacity)
        if self.keys:
            shapes = [(k.shape[1], k.shape[3], k.dtype) for k in self.keys]
            vshapes = [(v.shape[1], v.shape[3], v.dtype) for v in self.values]
        else:
            shapes = [(layer.keys.shape[1], layer.keys.shape[3], layer.keys.dtype) for layer in like.layers]
            vshapes = [(layer.values.shape[1], layer.values.shape[3], layer.values.dtype) for layer in like.layers]
        keys = [torch.zeros(new_rows, h, new_len, d, dtype=t, device=self.device) for h, d, t in shapes]
        values = [torch.zeros(new_rows, h, new_len, d, dtype=t, device=self.device) for h, d, t in vshapes]
        amax = torch.full((new_rows, new_len), -1.0, device=self.device)
        for old, new in zip(self.keys + self.values, keys + values, strict=False):  # nothing to copy at first
            new[:old.shape[0], :, :old.shape[2]].copy_(old)
        if self.amax is not None:
            amax[:self.amax.shape[0], :self.amax.shape[1]].copy_(self.amax)
        hidden = {}
        for site, old in self.hidden.items():
            hidden[site] = torch.zeros(new_rows, old.shape[1], device=self.device)
            hidden[site][:old.shape[0]].copy_(old)
        self.keys, self.values, self.amax, self.hidden = keys, values, amax, hidden
        self.rows, self.capacity = new_rows, new_len
        self.generation += 1
        return True

    def hidden_buffer(self, site: Any, width: int) -> torch.Tensor:
        """The per-row buffer of one capture site (allocated on first use)."""
        buf = self.hidden.get(site)
        if buf is None:
            buf = self.hidden[site] = torch.zeros(self.rows, width, device=self.device)
        return buf

    def load(self, row: int, cache: Any, length: int) -> None:
        """Copy the first ``length`` positions of a prefilled batch-1 ``DynamicCache`` into ``row``."""
        for layer, keys, values in zip(cache.layers, self.keys, self.values, strict=True):
            keys[row, :, :length].copy_(layer.keys[0, :, :length])
            values[row, :, :length].copy_(layer.values[0, :, :length])
        assert self.amax is not None
        self.amax[row].fill_(-1.0)

    def copy_row(self, src: int, dst: int) -> None:
        """Copy everything row ``src`` holds into row ``dst`` (a prompt shared by several samples)."""
        for buf in (*self.keys, *self.values, self.amax, *self.hidden.values()):
            buf[dst].copy_(buf[src])

    def move(self, src: int, dst: int) -> None:
        """Hand row ``dst`` (being freed) the sequence in row ``src`` (the last live one)."""
        if src != dst:
            self.copy_row(src, dst)

    def export(self, row: int, length: int, config: Any) -> Any:
        """Positions ``0..length-1`` of ``row`` as a batch-1 ``DynamicCache`` (a span kept for attention rows)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=config)
        for index, (keys, values) in enumerate(zip(self.keys, self.values, strict=True)):
            cache.update(keys[row:row + 1, :, :length].clone(), values[row:row + 1, :, :length].clone(), index)
        return cache


class SlotView:
    """What the model receives as ``past_key_values`` during one decode step over rows ``[:batch]``.

    ``index`` is the step's ``(batch, 1, 1, 1)`` column index (each row's position); the model's
    attention layers call :meth:`update` with the step's new keys and values, which are written
    into the rows at those columns, and get the whole buffers back.
    """

    is_compileable = True

    def __init__(self, slots: SlotCache, batch: int, positions: torch.Tensor) -> None:
        self.slots = slots
        self.batch = batch
        self.positions = positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.slots.keys[layer_idx][:self.batch]
        values = self.slots.values[layer_idx][:self.batch]
        index = self.positions.view(-1, 1, 1, 1).expand(-1, key_states.shape[1], 1, key_states.shape[3])
        keys.scatter_(2, index, key_states.to(keys.dtype))
        index = self.positions.view(-1, 1, 1, 1).expand(-1, value_states.shape[1], 1, value_states.shape[3])
        values.scatter_(2, index, value_states.to(values.dtype))
        return keys, values

    # What model code may ask of a cache; a step always passes positions and a 4-d mask itself.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return self.slots.capacity, 0

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self.slots.keys)

    def __len__(self) -> int:
        return len(self.slots.keys)
