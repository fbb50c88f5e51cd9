"""TARG's small-N variance gate: how much a handful of sampled drafts differ in how likely the model found them.

The paper names the gate ("small-N variance across a handful of stochastic prefixes") and calls it
"a conservative, budget-first alternative" to the margin, but the text that could be read states
neither N, nor the temperature, nor the variance of which quantity. Chosen here:

* the prefixes: ``N`` continuations of the draft's own prompt, as long as the draft
  (``prefix_tokens``) and cut by the same stop strings, drawn in ONE batched call of the engine's
  sampler (:func:`explorer.engine.sampling.sample`, which holds the engine's lock) at temperature
  ``T`` from the raw distribution, no top-k and no nucleus cut, so each prefix is a draw from the
  model itself; every row has its own generator seeded from the run's ``seed`` and its row number,
  so the same seed gives the same prefixes;
* the quantity of each prefix: its mean token log-probability ``ℓᵢ = (1/|yᵢ|) Σₜ log p(yᵢₜ | ·)``
  under the RAW distribution (the length-normalised likelihood, what a perplexity reads). It is
  read off the logits of the prefix's own tokens, as the paper's other scores are, and a sure model
  draws nearly the same likely prefix N times (variance near 0) while an unsure one draws openings
  it finds unequally likely;
* the score: the sample variance ``s² = Σ (ℓᵢ - ℓ̄)² / (N' - 1)`` over the N' prefixes that wrote
  any text (an empty prefix, an end-of-sequence first, has no mean); with fewer than two the score
  is undefined and the gate stays shut. ``N' - 1`` rather than ``N'`` so that the expected score
  does not shrink when N is small, and τ keeps its meaning when N changes.

Each prefix's mean entropy is kept beside its log-probability (free: the sampler reads it), so a
reader can see both.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from explorer.engine.generation import Engine
from explorer.engine.spans import PromptLike, Sampling
from explorer.methods import prompts
from explorer.trace import TraceRecorder


@dataclass
class Prefixes:
    """The sampled prefixes of one question, each prefix's mean log-probability, and their variance."""

    prefixes: list[dict[str, Any]]
    empty: int
    sampling: dict[str, Any]
    variance: float | None


def mean_logprob(logprobs: list[float]) -> float | None:
    """``(1/n) Σ log p`` of a prefix's tokens (None for an empty prefix)."""
    return sum(logprobs) / len(logprobs) if logprobs else None


def variance(values: list[float]) -> float | None:
    """Sample variance (n - 1 in the denominator) of the prefixes' values; None with fewer than two."""
    return float(statistics.variance(values)) if len(values) >= 2 else None


def draw(engine: Engine, rec: TraceRecorder, prompt: PromptLike, *, n: int, max_new_tokens: int,
         temperature: float, seed: int) -> Prefixes:
    """Sample ``n`` prefixes of ``prompt`` in one batched call and score their spread."""
    sampling = Sampling(temperature=temperature, top_k=None, top_p=None, seed=seed)
    batch = engine.sample(prompt, k=n, max_new_tokens=max_new_tokens, sampling=sampling,
                          stop_strings=prompts.STOP_STRINGS, rec=rec, purpose="prefixes")
    prefixes = []
    for s in batch.samples:
        value = mean_logprob(s.logprobs)
        prefixes.append({"row": s.row, "text": s.text, "ids": list(s.ids), "stopped_by": s.stopped_by,
                         "logprobs": list(s.logprobs), "entropies": list(s.entropies), "value": value,
                         "mean_entropy": sum(s.entropies) / len(s.entropies) if s.entropies else None})
    values = [p["value"] for p in prefixes if p["value"] is not None]
    return Prefixes(prefixes=prefixes, empty=batch.empty, sampling={**sampling.to_dict(), "n": n},
                    variance=variance(values))
