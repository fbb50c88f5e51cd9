"""ETC's trend series: the first and second differences of a span's token entropies, smoothed.

The entropies are the engine's (the ``entropy`` signal of every generated token, nats over the
raw next-token distribution); nothing here reads logits. What is computed from them is the
method's own decision rule, so it lives beside the method and is written into the trace's check
event, token by token, where the charts and the what-if threshold read it.

Indexing follows the tokens: ``d1[i] = H[i] - H[i-1]`` and ``d2[i] = d1[i] - d1[i-1]`` belong to
token ``i`` (the paper's eq. 2-3 index the difference by its first term, ``ΔH_i = H_{i+1} - H_i``;
this is the same series shifted so a value sits on the token that completes it). A token without
the history a difference needs has None there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Trend:
    """A span's entropy series and its raw and smoothed first and second differences."""

    entropy: list[float]
    d1: list[float | None]
    d2: list[float | None]
    smooth_d1: list[float | None]
    smooth_d2: list[float | None]


def differences(values: Sequence[float | None]) -> list[float | None]:
    """``out[i] = values[i] - values[i-1]``; None where either is missing (always at ``i = 0``)."""
    out: list[float | None] = [None]
    for prev, cur in zip(values, values[1:], strict=False):
        out.append(None if prev is None or cur is None else cur - prev)
    return out[:len(values)]


def smooth(values: Sequence[float | None], alpha: float) -> list[float | None]:
    """Bias-corrected exponential moving average of the present values (None stays None).

    ``m_t = (1 - α) m_{t-1} + α x_t`` divided by ``1 - (1 - α)^n`` after ``n`` values: the weight a
    new value gets starts at 1 and settles to α as history accumulates, so the first differences
    of a span are not pulled towards zero by an empty history. That is the dynamic part: the
    smoothing strengthens as the span grows. ``α = 1`` switches smoothing off.
    """
    out: list[float | None] = []
    mean, n = 0.0, 0
    for x in values:
        if x is None:
            out.append(None)
            continue
        n += 1
        mean = (1.0 - alpha) * mean + alpha * x
        out.append(mean / (1.0 - (1.0 - alpha) ** n))
    return out


def trend(entropies: Sequence[float], alpha: float) -> Trend:
    """The whole trend of one span from its tokens' entropies."""
    entropy = [float(h) for h in entropies]
    d1 = differences(entropy)
    d2 = differences(d1)
    return Trend(entropy, d1, d2, smooth(d1, alpha), smooth(d2, alpha))


def first_trigger(tr: Trend, slope: float, curvature: float, start: int = 0) -> int | None:
    """The first token at or after ``start`` whose smoothed ΔH exceeds ``slope`` AND smoothed Δ²H exceeds ``curvature``.

    Entropy rising (ΔH > 0) and the rise speeding up (Δ²H > 0) is the onset of uncertainty the
    method retrieves at, before the entropy itself is high.
    """
    for i in range(start, len(tr.entropy)):
        s1, s2 = tr.smooth_d1[i], tr.smooth_d2[i]
        if s1 is not None and s2 is not None and s1 > slope and s2 > curvature:
            return i
    return None
