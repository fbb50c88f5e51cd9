"""TARG's margin signal: how close the runner-up came to the chosen token, from the top-1/top-2 logit gap.

``margin = exp(-(z₁ - z₂)) = p₂ / p₁`` with z the raw logits and p the raw next-token
probabilities (the gap of two logits is the log-ratio of their probabilities, so the value is read
off the engine's top-k probabilities without touching the logits again). It is a strictly
decreasing, monotone link of the gap into (0, 1]: 1 when the two best tokens tie, towards 0 when
the model is sure. Registered here and computed by the engine only for the spans that ask for it.
"""

from __future__ import annotations

from explorer.engine.token_signals import SignalSpec, TokenContext, register_signal


def margin_from_top(top_probs: list[float]) -> float | None:
    """``p₂ / p₁`` from a distribution's top probabilities (None for a one-token vocabulary)."""
    if len(top_probs) < 2 or top_probs[0] <= 0.0:
        return None
    return float(top_probs[1] / top_probs[0])


def _margin(ctx: TokenContext) -> float | None:
    return margin_from_top(ctx.stats.top_probs) if ctx.stats is not None else None


MARGIN = register_signal(SignalSpec(
    "margin", "margin", "TARG's margin: exp(-(top-1 logit - top-2 logit)) = p2/p1 of the raw next-token distribution",
    "darker = the runner-up token came closer to the chosen one", "logits", "max", _margin, short="m"))
