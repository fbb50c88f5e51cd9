"""Per-token signals, computed once in the engine and read everywhere else.

Each function here has one job and one signature, so a method combines signals instead of
re-deriving them: the distribution statistics of a step (:func:`step_stats`), the running
maximum attention a token receives (:class:`AmaxTracker`), and the aggregation of sub-word
tokens into words (:func:`merge_words`), which the reference
variant of DRAGIN and several views need and which would otherwise be pasted into every method.
Which signals a token carries is decided by the registry in :mod:`explorer.engine.token_signals`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

TOP_K_ALTERNATIVES = 5


@dataclass(frozen=True)
class StepStats:
    """What one next-token distribution says about the token that was chosen from it."""

    prob: float
    logprob: float
    entropy: float
    top_ids: list[int]
    top_probs: list[float]


def entropy_of_logits(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of softmax(logits) along the last axis, computed in float32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).nan_to_num().sum(dim=-1)


def step_stats(logits: torch.Tensor, chosen: int, top_k: int = TOP_K_ALTERNATIVES) -> StepStats:
    """Probability and log-probability of ``chosen``, entropy and the top-k alternatives of a RAW distribution."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    entropy = float(-(p * logp).nan_to_num().sum())
    top = torch.topk(p, min(top_k, p.shape[-1]))
    lp = float(logp[chosen])
    return StepStats(prob=math.exp(lp), logprob=lp, entropy=entropy, top_ids=top.indices.tolist(),
                     top_probs=[float(x) for x in top.values])


class AmaxTracker:
    """amax(i) = max over later tokens j > i of the attention A[j, i], kept up to date as j grows.

    Positions are indices into the generated span. Attention rows come in over the whole context
    (prompt + generated) on absolute positions (a windowed layer's row is first put there by
    :func:`explorer.engine.attention.absolute_row`); only the generated part updates amax. Memory
    is linear in the span length: rows are folded in and dropped.
    """

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self._amax = torch.full((64,), -1.0)
        self.count = 0

    def add_token(self) -> None:
        """A new generated token exists; nobody has attended to it yet."""
        if self.count == self._amax.shape[0]:
            self._amax = torch.cat([self._amax, torch.full_like(self._amax, -1.0)])
        self.count += 1

    def add_row(self, query_index: int, row: torch.Tensor) -> None:
        """Fold in the attention row of generated token ``query_index`` over all earlier positions.

        A row shorter than the context up to the token would silently leave amax empty (a
        windowed row sliced as if it were absolute did exactly that), so it is refused.
        """
        needed = self.prompt_len + query_index + 1
        if row.shape[0] < needed:
            raise ValueError(f"attention row of generated token {query_index} has {row.shape[0]} positions, "
                             f"fewer than the {needed} before and at it; map it with absolute_row first")
        seg = row[self.prompt_len:self.prompt_len + query_index].float()
        n = seg.shape[0]
        torch.maximum(self._amax[:n], seg, out=self._amax[:n])

    @property
    def values(self) -> list[float | None]:
        """amax per generated token; None where no later token exists yet."""
        return [None if v < 0 else v for v in self._amax[:self.count].tolist()]


@dataclass(frozen=True)
class Word:
    """A run of tokens that forms one word: ``start``..``end`` (exclusive) token indices."""

    start: int
    end: int
    text: str


def starts_word(index: int, text: str) -> bool:
    """The reference rule: a word begins at the first token, at a space-marked token, or at a newline.

    Decoded token texts carry the tokenizer's space marker as a leading space, and a newline
    token decodes to whitespace, so one test covers all three cases.
    """
    return index == 0 or text[:1].isspace()


def merge_words(token_texts: Sequence[str], special: Sequence[bool] | None = None) -> list[Word]:
    """Group decoded token texts into words by :func:`starts_word`.

    Tokens flagged in ``special`` (``<|im_end|>``, a BOS) are words of their own: nothing joins them.
    """
    words: list[Word] = []
    start = 0
    for i, text in enumerate(token_texts):
        alone = special is not None and (special[i] or special[i - 1])
        if i > 0 and (starts_word(i, text) or alone):
            words.append(Word(start, i, "".join(token_texts[start:i]).strip()))
            start = i
    if token_texts:
        words.append(Word(start, len(token_texts), "".join(token_texts[start:]).strip()))
    return words


def aggregate(values: Sequence[float | None], words: Sequence[Word], how: str) -> list[float]:
    """Per-word SUM or MEAN of per-token values (missing values count as 0)."""
    out = []
    for w in words:
        chunk = [v or 0.0 for v in values[w.start:w.end]]
        total = float(sum(chunk))
        out.append(total if how == "sum" else total / max(1, len(chunk)))
    return out


def warp(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Temperature, then top-k, then nucleus (top-p) filtering: the distribution a sampler draws from.

    Works on a batch (``(..., vocab)``); filtered entries become -inf.
    """
    x = logits.float() / max(temperature, 1e-6)
    if top_k is not None and 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p is not None and 0.0 < top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least the best token).
        remove = cum - torch.softmax(sorted_x, dim=-1) >= top_p
        remove[..., 0] = False
        x = x.scatter(-1, order, sorted_x.masked_fill(remove, float("-inf")))
    return x
