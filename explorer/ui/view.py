"""A read-only index over one trace that the panels share: spans, cuts, triggers, joins, retrievals.

Panels never walk the raw event list for the relations between events (which retrieval a
continuation was given, which trigger led to which query, where a span was cut); they ask this
view, which derives each relation once from the recorded events and recomputes no signal. It
also works on a partial trace while a run is streaming, and on event kinds it does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from explorer.engine.token_signals import registry
from explorer.trace import Event, Trace
from explorer.ui.html import PALETTE

#: The per-step signal a strip can show besides the registered per-token ones.
STEP_SIGNALS: dict[str, tuple[str, str]] = {"u": ("SEAKR's U per step", "darker = higher uncertainty U of the step")}


def strip_signals() -> dict[str, tuple[str, str]]:
    """Signals a token strip can be coloured by: id -> (label, how to read the colour), from the registry."""
    return {**{s.id: (s.title, s.legend) for s in registry().values() if s.shown}, **STEP_SIGNALS}


def token_signal_value(token: dict[str, Any], signal: str) -> Any:
    """A recorded signal of a token dict (version-2 layout, or a streamed or older flat one)."""
    signals = token.get("signals")
    return signals.get(signal) if isinstance(signals, dict) else token.get(signal)


@dataclass
class Span:
    """One generated span (a ``generation`` event) with what happened to it."""

    event_id: int
    purpose: str
    step: int
    tokens: list[dict[str, Any]]
    text: str
    sampled: bool = False
    appended: str = ""
    cut_at: int | None = None
    cut_reason: str = ""
    triggers: dict[int, dict[str, Any]] = field(default_factory=dict)
    retrieval: int | None = None
    u: float | None = None
    live: bool = False


def dom_key(run_id: str) -> str:
    """A short id safe to put in element ids and anchors."""
    return re.sub(r"[^A-Za-z0-9]", "", run_id)[:12] or "run"


class TraceView:
    """Relations between the events of one trace, derived once."""

    def __init__(self, trace: Trace, *, live_tokens: list[dict[str, Any]] | None = None,
                 live_purpose: str = "") -> None:
        self.trace = trace
        self.key = dom_key(trace.run_id)
        self.events = trace.events
        self.spans: list[Span] = []
        by_id: dict[int, Span] = {}
        u_by_step: dict[int, float] = {}
        u_by_span: dict[int, float] = {}
        for e in self.events:
            p = e.payload
            if (e.kind == "uncertainty" and isinstance(p.get("value"), (int, float))
                    and p.get("primary", True) is not False):
                u_by_step[e.step] = float(p["value"])
                if isinstance(p.get("span"), int):
                    u_by_span[p["span"]] = float(p["value"])
            if e.kind == "generation":
                decoding = p.get("decoding")
                span = Span(event_id=e.id, purpose=str(p.get("purpose", "")), step=e.step,
                            tokens=list(p.get("tokens") or []), text=str(p.get("text", "")),
                            sampled=isinstance(decoding, dict), appended=str(p.get("appended") or ""),
                            u=u_by_step.get(e.step))  # until an estimate names this span (below)
                self.spans.append(span)
                by_id[e.id] = span
            elif e.kind == "truncation" and p.get("span") in by_id:
                span = by_id[p["span"]]
                span.cut_at, span.cut_reason = int(p["token_index"]), str(p.get("reason", ""))
            elif e.kind == "trigger" and p.get("span") in by_id:
                by_id[p["span"]].triggers[int(p["token_index"])] = p
            elif e.kind == "continuation" and p.get("span") in by_id:
                by_id[p["span"]].retrieval = p.get("retrieval")
        for span in self.spans:
            span.u = u_by_span.get(span.event_id, span.u)
        if live_tokens:
            self.spans.append(Span(event_id=-1, purpose=live_purpose or "generating", step=-1, tokens=live_tokens,
                                   text="".join(t.get("text", "") for t in live_tokens), live=True))
        self.retrievals = [e for e in self.events if e.kind == "retrieval"]
        self.retrieval_number = {e.id: n for n, e in enumerate(self.retrievals, 1)}
        self.query_of: dict[int, Event] = {}
        self.trigger_of: dict[int, Event] = {}
        for e in self.retrievals:
            q = e.payload.get("query")
            if isinstance(q, int) and 0 <= q < len(self.events):
                self.query_of[e.id] = self.events[q]
        last_trigger: Event | None = None
        for e in self.events:
            if e.kind == "trigger":
                last_trigger = e
            elif e.kind == "query":
                if last_trigger is not None and last_trigger.step == e.step:
                    self.trigger_of[e.id] = last_trigger
                last_trigger = None

    # -- lookups ------------------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def main_spans(self) -> list[Span]:
        return [s for s in self.spans if not s.sampled]

    @property
    def sampled_spans(self) -> list[Span]:
        return [s for s in self.spans if s.sampled]

    def anchor(self, event_id: int) -> str:
        return f"dre-{self.key}-e{event_id}"

    def colour(self, retrieval_id: int | None) -> str:
        n = self.retrieval_number.get(retrieval_id or -1)
        return PALETTE[(n - 1) % len(PALETTE)] if n else "#9ca3af"

    @property
    def gold_passages(self) -> set[str]:
        gold = self.trace.gold if isinstance(self.trace.gold, dict) else {}
        return {str(p) for p in gold.get("gold_passages") or []}

    @property
    def gold_answers(self) -> list[str]:
        gold = self.trace.gold if isinstance(self.trace.gold, dict) else {}
        return [str(a) for a in gold.get("answers") or []]

    def passage(self, pid: str) -> dict[str, Any] | None:
        """A passage as some retrieval returned it (title, text, score), found by id."""
        for e in self.retrievals:
            for hit in e.payload.get("hits") or []:
                if str(hit.get("id")) == str(pid):
                    return hit
        return None

    def token_value(self, span: Span, token: dict[str, Any], signal: str) -> float | None:
        """The value a strip is coloured by; only recorded numbers, never recomputed."""
        if signal == "u":
            return span.u
        value = token_signal_value(token, signal)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def available_signals(self) -> list[str]:
        """The registered strip signals some token of the main spans carries (probability first)."""
        tokens = [t for s in self.main_spans for t in s.tokens]
        out = [sid for sid in strip_signals() if sid not in STEP_SIGNALS
               and (sid == "prob" or any(token_signal_value(t, sid) is not None for t in tokens))]
        if any(s.u is not None for s in self.spans):
            out.append("u")
        return out


@dataclass
class ViewOptions:
    """How a run is shown: the strip's colour signal, a what-if threshold, live or compact mode."""

    signal: str = "prob"
    whatif: float | None = None
    live: bool = False
    compact: bool = False
    costs: bool = True
