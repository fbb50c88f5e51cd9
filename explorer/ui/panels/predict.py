"""A decision asked before it is shown: its inputs as a question, the recorded outcome as the answer.

Presenting mode can show a decision first as a question ("the signal is here, θ is there: will it
retrieve?"), let the class guess, then reveal it. The question states only what the decision was
made from (the check's recorded values and threshold, a retrieval's query) and the answer is the
outcome the trace recorded; nothing is recomputed. Decisions a fork made (forced, suppressed) and
the answer itself are not asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from explorer import naming
from explorer.ui.views.html import fmt, short

RETRIEVE, KEEP = "retrieve", "keep writing"
YES, NO = "yes", "no"


@dataclass(frozen=True)
class Question:
    """What the class is asked, the answers it may give, and the one the trace recorded."""

    text: str
    choices: tuple[str, ...]
    answer: str


def _value(unit: dict[str, Any]) -> float | None:
    v = unit.get("value")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def check_question(payload: dict[str, Any]) -> Question | None:
    """A retrieval check as a question: the extreme of the signal over the span's units against its threshold."""
    kind = naming.decision_kind(payload)
    if kind not in ("fired", "kept"):
        return None
    compare, theta = str(payload.get("compare", ">")), payload.get("threshold")
    values = [(v, u) for u in payload.get("units") or [] if u.get("eligible", True) and (v := _value(u)) is not None]
    if not values or not isinstance(theta, (int, float)):
        return None
    signal, unit = str(payload.get("signal", "")), str(payload.get("unit", "token"))
    best, at = (max if compare == ">" else min)(values, key=lambda pair: pair[0])
    word = short(str(at.get("text", "")).strip(), 30)
    extreme = "highest" if compare == ">" else "lowest"
    sym = naming.symbol(signal)  # δ for SEAKR's U, θ for every other signal, as the decisions write it
    text = (f"The method retrieves as soon as a {unit}'s {signal} is {compare} {sym}. Over this span the {extreme} "
            f"{signal} is {fmt(best)} (at {word!r}) and {sym} = {fmt(theta)}. Will it retrieve here?")
    return Question(text, (RETRIEVE, KEEP), RETRIEVE if kind == "fired" else KEEP)


def retrieval_question(query: str, hits: int, found: int, gold: int, suppressed: bool) -> Question | None:
    """A retrieval as a question, when the question has gold passages: will one of them be returned?"""
    if suppressed or not gold or not query:
        return None
    text = (f"The method searches for {short(query, 120)!r} and takes the top {hits} passage(s). Will a gold "
            "passage (one the answer is in) be among them?")
    return Question(text, (YES, NO), YES if found else NO)
