"""ETC's trend series over a span's words, by the rules of the authors' code (WisdomShell/ETC, ``generate.py``).

The entropies are the engine's (the ``entropy`` signal of every generated token, nats over the
raw next-token distribution); nothing here reads logits. What is built from them is the method's
own decision rule, so it lives beside the method and is written into the trace's check event,
word by word, where the charts and the what-if threshold read it.

The authors' ``Generator.generate`` does, in order:

1. a word's entropy is the MAX of its tokens' entropies;
2. a word is a content word when one of the span's spaCy "real words" (NOUN, ADJ, VERB, PROPN,
   NUM) is a substring of it; the other words take no part in the differences;
3. first difference, at a content word: its entropy minus that of the nearest EARLIER content word
   (0 at the first content word);
4. second difference, at a content word: its first difference minus the nearest earlier NON-ZERO
   first difference (0 when there is none);
5. the dynamic smoothing over the non-zero second differences, in order:
   ``E`` the running mean of the non-zero second differences so far (this one included),
   ``w = |Δ²H_{t-1} - E| / (|Δ²H_t - E| + |Δ²H_{t-1} - E|)``, ``α = 0.9 + 0.1 w``,
   ``M_t = α Δ²H_t + (1 - α) Δ²H_{t-1}``, where ``Δ²H_{t-1}`` is the previous RAW non-zero second
   difference (0 before the first). Words whose second difference is 0 have ``M = 0``.

The authors' code uses 0 as "no value" (a difference that is exactly 0 is treated as missing);
the same convention is kept so the numbers match theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from explorer.engine.signals import Word

#: ``α = ALPHA_BASE + ALPHA_SPAN * w`` (authors' ``generate.py``: ``0.9 + 0.1 * w``).
ALPHA_BASE, ALPHA_SPAN = 0.9, 0.1


@dataclass(frozen=True)
class Trend:
    """A span's word-level entropy series, its differences and the dynamically smoothed second difference."""

    entropy: list[float]
    content: list[bool]
    d1: list[float]
    d2: list[float]
    mean: list[float | None]
    weight: list[float | None]
    smooth: list[float]


def word_entropies(token_entropies: Sequence[float], words: Sequence[Word]) -> list[float]:
    """The authors' word entropy: the largest entropy among the word's tokens."""
    return [max(float(h) for h in token_entropies[w.start:w.end]) for w in words]


def first_differences(entropy: Sequence[float], content: Sequence[bool]) -> list[float]:
    """At each content word, its entropy minus the nearest earlier content word's (0 elsewhere)."""
    out = [0.0] * len(entropy)
    for i in range(1, len(entropy)):
        if not content[i]:
            continue
        j = next((k for k in range(i - 1, -1, -1) if content[k]), None)
        if j is not None:
            out[i] = float(entropy[i]) - float(entropy[j])
    return out


def second_differences(d1: Sequence[float], content: Sequence[bool]) -> list[float]:
    """At each content word from the third on, its ΔH minus the nearest earlier non-zero ΔH (0 elsewhere)."""
    out = [0.0] * len(d1)
    for i in range(2, len(d1)):
        if not content[i]:
            continue
        j = next((k for k in range(i - 1, 0, -1) if d1[k] != 0), None)
        if j is not None:
            out[i] = d1[i] - d1[j]
    return out


def dynamic_smooth(d2: Sequence[float]) -> tuple[list[float], list[float | None], list[float | None]]:
    """``M_t`` per word, with the running mean ``E`` and the weight ``w`` used (None where Δ²H is 0).

    Where both distances to the mean are 0 (``Δ²H_t = Δ²H_{t-1} = E``) the authors' division is
    0/0; ``w = 1`` is taken there, which gives ``M_t = Δ²H_t``, the value any α gives.
    """
    smooth: list[float] = []
    means: list[float | None] = []
    weights: list[float | None] = []
    count, total, previous = 0, 0.0, 0.0
    for x in d2:
        if x == 0:
            smooth.append(0.0)
            means.append(None)
            weights.append(None)
            continue
        count += 1
        total += x
        mean = total / count
        far_prev, far_now = abs(previous - mean), abs(x - mean)
        w = far_prev / (far_now + far_prev) if far_now + far_prev > 0 else 1.0
        alpha = ALPHA_BASE + ALPHA_SPAN * w
        smooth.append(alpha * x + (1.0 - alpha) * previous)
        means.append(mean)
        weights.append(w)
        previous = x
    return smooth, means, weights


def trend(word_entropy: Sequence[float], content: Sequence[bool]) -> Trend:
    """The whole trend of one span from its words' entropies and content flags."""
    entropy = [float(h) for h in word_entropy]
    flags = [bool(c) for c in content]
    d1 = first_differences(entropy, flags)
    d2 = second_differences(d1, flags)
    smooth, means, weights = dynamic_smooth(d2)
    return Trend(entropy, flags, d1, d2, means, weights, smooth)


def sentence_scores(attention: Sequence[float], smooth: Sequence[float],
                    ranges: Sequence[tuple[int, int]]) -> list[float]:
    """The authors' final indicator per word: its attention, scaled to mean 1 within its sentence, times ``M_t``.

    (``hallucination_check``: ``max_atten_sent * (wr - wl) / (max_atten_sent.sum() + 1e-10)`` times
    ``mt_s2``.) A word in no sentence range scores 0.
    """
    out = [0.0] * len(smooth)
    for lo, hi in ranges:
        if hi <= lo:
            continue
        chunk = [float(a) for a in attention[lo:hi]]
        scale = (hi - lo) / (sum(chunk) + 1e-10)
        for k, a in enumerate(chunk):
            out[lo + k] = a * scale * float(smooth[lo + k])
    return out
