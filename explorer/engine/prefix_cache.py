"""Reusing the key/value states of a prompt's opening for the next prompt that opens the same way.

Every method's prompt starts with the same instruction and few-shot exemplars (hundreds of
tokens); only the question, the passages and the text so far differ. Encoding that opening again
is nearly all the time before a run's first token on a CPU (1.89 s of 1.91 s for DRAGIN's
prompt on SmolLM2-135M, profiled on a busy machine). A :class:`PrefixCache` keeps the states of
the last few prompts and, for a new prompt, copies the entry sharing the longest opening, cuts it
to the shared tokens and encodes only the rest. Causal attention makes the states of the shared tokens independent of
what follows them, so the result is the same computation split in two (equal up to float
rounding of the differently shaped matrix products).

Only caches that can be cut back are kept: a sliding-window layer that has filled its window has
already dropped keys, so such prompts are encoded whole, as without the cache.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch


def shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens two prompts share from their start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def cache_bytes(cache: Any) -> int:
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


class PrefixCache:
    """The key/value states of recent prompts (an engine's ``prefix_cache``; off unless set).

    ``entries`` prompts are kept, newest first, within ``max_bytes``; a prompt shares its
    opening only when at least ``min_shared`` tokens match (shorter ones are cheap to encode).
    ``hits`` and ``saved_tokens`` count what it spared.
    """

    def __init__(self, entries: int = 4, *, min_shared: int = 32, max_bytes: int = 512 * 2**20) -> None:
        self.entries = entries
        self.min_shared = min_shared
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.saved_tokens = 0

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def _best(self, prompt_ids: list[int]) -> tuple[int, Any]:
        best, found = 0, None
        for ids, cache in self._items.items():
            n = shared_length(ids, prompt_ids)
            if n > best:
                best, found = n, (ids, cache)
        if found is not None:
            self._items.move_to_end(found[0])
            return best, found[1]
        return 0, None

    def prefill(self, engine: Any, prompt_ids: list[int]) -> tuple[Any, Any]:
        """Encode ``prompt_ids`` for ``engine``: returns (its cache, the forward pass's output)."""
        from explorer.engine.generation import can_roll_back

        with self._lock:
            shared, stored = self._best(prompt_ids)
            shared = min(shared, len(prompt_ids) - 1)  # at least one token is fed, for the next-token logits
            cache = None
            if stored is not None and shared >= self.min_shared:
                cache = copy.deepcopy(stored)
                if cache.get_seq_length() > shared:
                    cache.crop(shared - cache.get_seq_length())
        if cache is not None:
            self.hits += 1
            self.saved_tokens += shared
            rest = prompt_ids[shared:]
        else:
            cache, rest = engine.new_cache(), prompt_ids
        # The attention probe is off during a prompt's pass, so this is the engine's plain cached pass.
        out = engine.forward_batch(torch.tensor([rest], device=engine.device), cache)
        if can_roll_back(cache):
            kept = copy.deepcopy(cache)
            with self._lock:
                self._items[tuple(prompt_ids)] = kept
                self._items.move_to_end(tuple(prompt_ids))
                while len(self._items) > self.entries or (
                        len(self._items) > 1 and sum(cache_bytes(c) for c in self._items.values()) > self.max_bytes):
                    self._items.popitem(last=False)
        return cache, out
