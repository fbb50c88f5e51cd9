"""DRAGIN's per-token signals: the content mask s and RIND = H × amax × s.

They are registered here, beside the method that decides with them, and computed by the engine
for every span (RIND is the explorer's headline signal: the strips of every method can show it
wherever attention was read).
"""

from __future__ import annotations

from explorer.engine.language import is_stopword
from explorer.engine.token_signals import SignalSpec, TokenContext, register_signal


def rind(entropy: float, amax: float | None, content: bool) -> float | None:
    """DRAGIN's S_RIND = H * amax * s; None while no later token has attended to this one."""
    if amax is None:
        return None
    return entropy * amax * (1.0 if content else 0.0)


def _content(ctx: TokenContext) -> bool:
    return not is_stopword(ctx.text) and ctx.token_id not in ctx.engine.special_ids


def _rind(ctx: TokenContext) -> float | None:
    s = ctx.signals or {}
    return rind(s["entropy"], s.get("amax"), bool(s.get("content")))


CONTENT = register_signal(SignalSpec(
    "content", "content word", "s: 1 for a token of a content word, 0 for a stopword, punctuation or special token",
    "stopword / punctuation: not eligible for RIND", "token", "any", _content, default=True, shown=False))
RIND = register_signal(SignalSpec(
    "rind", "RIND", "DRAGIN's real-time information need: entropy × amax × content",
    "darker = higher entropy × amax × content", "signals", "max", _rind, requires=("entropy", "amax", "content"),
    default=True, short="RIND"))
