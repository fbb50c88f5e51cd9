"""What the decoding loops need of an engine, named apart from the engine that provides it.

:class:`~explorer.engine.generation.Engine` owns the model and drives both decoding loops; the
modules it builds on (:mod:`explorer.engine.decode`, :mod:`explorer.engine.signal_check`,
:mod:`explorer.engine.sampling`) call back into it. They name it by :class:`EngineLike`, declared
here below all of them, so that no module under the engine has to import the engine's own module
and the engine package reads bottom-up without a circle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from explorer.engine.attention import AttentionProbe

#: A labelled stretch of a prompt's token ids: ``(label, start, end)``.
Span = tuple[str, int, int]
#: A prompt as plain text or as ``(label, text)`` segments.
PromptLike = str | Sequence[tuple[str, str]]


class EngineLike(Protocol):
    """The surface of :class:`~explorer.engine.generation.Engine` that its decoding loops call."""

    model: Any
    tokenizer: Any
    device: torch.device
    probe: AttentionProbe
    #: Serialises use of the model across threads (a ``threading.RLock``).
    lock: Any
    #: Why every pass re-reads the whole context, or None where the model keeps a cache.
    recompute: str | None
    eos_ids: frozenset[int]
    #: The batcher concurrent runs share (None: each span decodes alone).
    batcher: Any

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str: ...

    def encode_prompt(self, prompt: PromptLike) -> tuple[str, list[int], list[Span]]: ...

    def check_fits(self, prompt_len: int, max_new_tokens: int, where: str = "prompt") -> None: ...

    def new_cache(self) -> Any: ...

    def forward_batch(self, input_ids: torch.Tensor, cache: Any, *, attention_mask: torch.Tensor | None = None,
                      position_ids: torch.Tensor | None = None) -> Any: ...

    def _forward(self, ids: torch.Tensor, cache: Any, *, logits: bool = True) -> Any: ...

    def _prefill(self, prompt_ids: list[int]) -> tuple[Any, Any]: ...

    def _last_row(self, cache: Any, total: int) -> torch.Tensor: ...
