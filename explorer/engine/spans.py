"""What one span of generation is: its settings, the resolved request, the finished span and its stop rule.

Both decoding loops (:meth:`explorer.engine.generation.Engine.generate` one sequence at a time,
:mod:`explorer.engine.batch_jobs` a row of a shared batch) and the sampler
(:mod:`explorer.engine.sampling`) build and return these; they live below all three so that none
of them imports another to name what they share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from explorer.engine.decode import text_end
from explorer.engine.hidden import HiddenSpec
from explorer.engine.protocols import PromptLike, Span
from explorer.errors import ExplorerError
from explorer.trace import TokenSignal

__all__ = ["Generation", "PromptLike", "Sampling", "Span", "SpanRequest", "stop_after"]


@dataclass(frozen=True)
class Sampling:
    """Sampling settings; ``None`` in :meth:`Engine.generate` means greedy decoding."""

    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float | None = 0.9
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}


@dataclass(frozen=True)
class SpanRequest:
    """One call of :meth:`Engine.generate`, resolved: what to generate and what to measure."""

    prompt: str
    prompt_ids: list[int]
    segments: list[Span]
    max_new_tokens: int
    purpose: str
    sampling: Sampling | None
    stop_strings: tuple[str, ...]
    attention: bool
    until: Callable[[list[TokenSignal]], bool] | None
    hidden: HiddenSpec | None
    stream: bool
    ignore_eos: bool = False
    keep_special: bool = False
    signals: tuple[str, ...] = ()


class _RowReader(Protocol):
    """The engine that generated a span, as the span sees it: it can replay a token's attention row."""

    def attention_over(self, gen: Generation, index: int) -> list[float]: ...


@dataclass
class Generation:
    """A finished span: the tokens with their signals, the text, and why it stopped.

    ``stopped_by`` is one of ``eos``, ``max_tokens``, ``stop_string``, ``callback`` or ``cancelled``.
    ``event_id`` is the id of the trace's ``generation`` event (None without a recorder).
    """

    purpose: str
    prompt: str
    prompt_ids: list[int]
    segments: list[Span]
    ids: list[int]
    tokens: list[TokenSignal]
    text: str
    stopped_by: str
    event_id: int | None = None
    hidden: torch.Tensor | None = None
    _engine: _RowReader | None = field(default=None, repr=False)
    _cache: Any = field(default=None, repr=False)

    @property
    def token_texts(self) -> list[str]:
        return [t.text for t in self.tokens]

    def offsets(self) -> list[int]:
        """Character offset in ``text`` where each token starts."""
        out, pos = [], 0
        for t in self.tokens:
            out.append(pos)
            pos += len(t.text)
        return out

    def attention_row(self, index: int) -> list[float]:
        """:meth:`Engine.attention_over` of the engine that generated this span."""
        if self._engine is None:
            raise ExplorerError("this generation kept no KV cache, so its attention rows cannot be read",
                                fix="generate with attention=True")
        return self._engine.attention_over(self, index)


def stop_after(req: SpanRequest, text: str, tokens: list[TokenSignal]) -> str | tuple[str, int] | None:
    """Why the span stops after its newest token: a stop string (with where to cut), the callback, the limit."""
    end = text_end(text, req.stop_strings) if req.stop_strings else None
    if end is not None:
        return end[1], end[0]
    if req.until is not None and req.until(tokens):
        return "callback"
    if len(tokens) >= req.max_new_tokens:
        return "max_tokens"
    return None
