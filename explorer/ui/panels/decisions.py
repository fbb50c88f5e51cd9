"""The run's decisions in words, in the order they were made: each retrieval check (fired, kept, forced
or suppressed by a fork), each retrieval, and the answer.

It is the text alternative of the strip's marks (⚑ fired, ✂ cut) and of the decision chart, and
what presenting mode steps through: each item names the element of the view it is about
(``data-target``, a selector inside the run), so the page can highlight it and show the item's
explanation beside it. Everything is read from the trace; the vocabulary is :mod:`explorer.naming`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from explorer import naming
from explorer.eval.metrics import exact_match
from explorer.trace import Event
from explorer.ui.html import esc, fmt, section, short
from explorer.ui.panels.predict import Question, check_question, retrieval_question
from explorer.ui.view import TraceView, ViewOptions


@dataclass
class Decision:
    """One decision: what it was (a short title), why (plain words), and where it shows in the view."""

    title: str
    why: str
    target: str
    kind: str
    #: The decision asked before it is shown, in presenting mode (:mod:`~explorer.ui.panels.predict`).
    question: Question | None = None


def _value(unit: dict[str, Any]) -> float | None:
    v = unit.get("value")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _unit_text(unit: dict[str, Any]) -> str:
    return repr(short(str(unit.get("text", "")).strip() or str(unit.get("text", "")), 40))


def _token_target(check: dict[str, Any], fired: int | None) -> str:
    """The selector of the token a check's unit starts at (its span's first token when unknown)."""
    span = check.get("span")
    units = check.get("units") or []
    index = fired
    if fired is not None and 0 <= fired < len(units):
        rng = units[fired].get("tokens")
        if isinstance(rng, list) and rng:
            index = int(rng[0])
        elif check.get("unit") == "step":
            index = 0
    if index is None:
        return f'[data-span~="{span}"]'
    return f'[data-span~="{span}"] .tok[data-i="{index}"]'


def _check(view: TraceView, e: Event, cuts: dict[int, Event]) -> Decision:
    p = e.payload
    units = p.get("units") or []
    kind = naming.decision_kind(p)
    signal, compare, theta = str(p.get("signal", "")), str(p.get("compare", ">")), p.get("threshold")
    where = f"{naming.step(e.step)}, {naming.span(p.get('span'))}" if p.get("span") is not None else naming.step(
        e.step)
    unit_name = p.get("unit", "token")
    words = naming.plain(signal)
    override = p.get("fork_override") if isinstance(p.get("fork_override"), dict) else {}
    fired = p.get("fired")
    if kind in ("fired", "forced") and fired is not None and 0 <= fired < len(units):
        unit = units[fired]
        value = _value(unit)
        side = f"{fmt(value)} {compare} θ = {fmt(theta)}"
        if kind == "forced":
            method = override.get("method_fired")
            also = ("the method would have retrieved here too" if method == fired else
                    "the method itself would not have retrieved here" if method is None else
                    f"the method would have retrieved at {_unit_text(units[method])}"
                    if 0 <= int(method) < len(units) else "the method decided otherwise")
            title = f"Retrieval forced by a fork at {_unit_text(unit)} ({where})"
            why = f"A fork made the model retrieve here: {signal} = {fmt(value)}, θ = {fmt(theta)}; {also}."
        else:
            title = f"Retrieval fired at {_unit_text(unit)} ({where})"
            why = (f"This {unit_name} had {signal} = {side}, so the method retrieved. {words[:1].upper()}"
                   f"{words[1:]}.")
        cut = cuts.get(p.get("span"))
        if cut is not None:
            why += (f" The text from {naming.token(p.get('span'), cut.payload.get('token_index'))} on was cut "
                    "away (✂) and written again with the passages.")
        return Decision(title, why, _token_target(p, fired), kind, check_question(p))
    values = [(v, u) for u in units if u.get("eligible", True) and (v := _value(u)) is not None]
    if kind == "suppressed":
        method = override.get("method_fired")
        at = _unit_text(units[method]) if isinstance(method, int) and 0 <= method < len(units) else "a unit"
        return Decision(f"Retrieval suppressed by a fork ({where})",
                        f"The method would have retrieved at {at} ({signal} over θ = {fmt(theta)}); the fork "
                        "kept the text instead.", _token_target(p, method if isinstance(method, int) else None),
                        kind)
    if values:
        best = max(values, key=lambda pair: pair[0]) if compare == ">" else min(values, key=lambda pair: pair[0])
        closest = f"the {'highest' if compare == '>' else 'lowest'} was {fmt(best[0])} at {_unit_text(best[1])}"
    else:
        closest = f"no {unit_name} could fire"
    return Decision(f"No retrieval ({where})",
                    f"No {unit_name} had {signal} {compare} θ = {fmt(theta)} ({closest}), so the text was kept. "
                    f"{words[:1].upper()}{words[1:]}.", _token_target(p, None), kind, check_question(p))


def _retrieval(view: TraceView, e: Event) -> Decision:
    p = e.payload
    q = view.query_of.get(e.id)
    query = str(q.payload.get("text", "")) if q is not None else ""
    hits = p.get("hits") or []
    gold = view.gold_passages
    found = sum(1 for h in hits if str(h.get("id")) in gold)
    titles = ", ".join(str(h.get("title") or h.get("id")) for h in hits[:4]) or "no passages"
    if p.get("suppressed"):
        why = "Suppressed by a fork: the model was given no passages here."
    else:
        why = f"Searched for {short(query, 160)!r} and got {len(hits)} passage(s): {titles}."
        if gold:
            why += f" {found} of the {len(gold)} gold passage(s) among them."
    return Decision(f"{naming.event('retrieval', e.id).capitalize()} ({naming.step(e.step)})", why,
                    f"#{view.anchor(e.id)}", "retrieval",
                    retrieval_question(query, len(hits), found, len(gold), bool(p.get("suppressed"))))


def _answer(view: TraceView) -> Decision | None:
    t = view.trace
    if t.answer is None:
        return None
    verdict = ""
    if view.gold_answers:
        verdict = (" It matches the gold answer." if exact_match(t.answer, view.gold_answers) else
                   f" The gold answer is {' | '.join(view.gold_answers)}.")
    return Decision("The answer", f"The run answered {t.answer!r}.{verdict}", ".dre-answer", "answer")


def decisions(view: TraceView) -> list[Decision]:
    """Every decision of the run in the order it was made."""
    cuts = {e.payload.get("span"): e for e in view.of_kind("truncation")}
    out: list[Decision] = []
    for e in view.events:
        if e.kind == "check":
            out.append(_check(view, e, cuts))
        elif e.kind == "retrieval":
            out.append(_retrieval(view, e))
    answer = _answer(view)
    if answer is not None:
        out.append(answer)
    return out


def _asked(d: Decision) -> str:
    """The attributes presenting mode asks the decision by (none when it is not asked)."""
    q = d.question
    if q is None:
        return ""
    return (f' data-ask="{esc(q.text)}" data-choices="{esc(",".join(q.choices))}"'
            f' data-answer="{esc(q.answer)}"')


def render(view: TraceView, opts: ViewOptions) -> str:
    found = decisions(view)
    if not found or opts.live:
        return ""
    items = "".join(f'<li class="dre-decision" data-kind="{esc(d.kind)}" data-target="{esc(d.target)}"{_asked(d)}>'
                    f'<b>{esc(d.title)}</b>. <span class="dre-why-text">{esc(d.why)}</span></li>' for d in found)
    body = (f'<details class="dre-decisions-box"><summary>'
            f"{len(found)} decision(s), in the order they were made</summary>"
            f'<ol class="dre-decisions">{items}</ol></details>')
    return section("Decisions in words", body, panel="decisions")
