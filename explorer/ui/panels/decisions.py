"""The run's decisions in words, in the order they were made: each retrieval check (fired, kept, forced
or suppressed by a fork) and the chart bar behind it, how each query was formed (DRAGIN's QFS words,
FLARE's masked sentence), each retrieval (with BlendFilter's query set or DR-RAG's stage), SEAKR's
re-ranking by U, each BlendFilter filter verdict and DR-RAG classifier call, Probing-RAG's prober
reading (its probability against θ and the layer it reads), the passages chosen, and the answer.

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
from explorer.ui.panels.predict import Question, check_question, retrieval_question
from explorer.ui.views.html import esc, fmt, section, short
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions


@dataclass
class Decision:
    """One decision: what it was (a short title), why (plain words), and where it shows in the view."""

    title: str
    why: str
    target: str
    kind: str
    #: The decision asked before it is shown, in presenting mode (:mod:`~explorer.ui.panels.predict`).
    question: Question | None = None
    #: The decision chart's bar (its point number) a ``bar`` step is about; the page shows that bar's values.
    bar: int | None = None


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
    sym = naming.symbol(signal)
    where = f"{naming.step(e.step)}, {naming.span(p.get('span'))}" if p.get("span") is not None else naming.step(
        e.step)
    unit_name = p.get("unit", "token")
    words = naming.plain(signal)
    override = p.get("fork_override") if isinstance(p.get("fork_override"), dict) else {}
    fired = p.get("fired")
    if kind in ("fired", "forced") and fired is not None and 0 <= fired < len(units):
        unit = units[fired]
        value = _value(unit)
        side = f"{fmt(value)} {compare} {sym} = {fmt(theta)}"
        if kind == "forced":
            method = override.get("method_fired")
            also = ("the method would have retrieved here too" if method == fired else
                    "the method itself would not have retrieved here" if method is None else
                    f"the method would have retrieved at {_unit_text(units[method])}"
                    if 0 <= int(method) < len(units) else "the method decided otherwise")
            title = f"Retrieval forced by a fork at {_unit_text(unit)} ({where})"
            why = f"A fork made the model retrieve here: {signal} = {fmt(value)}, {sym} = {fmt(theta)}; {also}."
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
        at = _unit_text(units[method]) if isinstance(method, int) and 0 <= method < len(units) else f"a {unit_name}"
        return Decision(f"Retrieval suppressed by a fork ({where})",
                        f"The method would have retrieved at {at} ({signal} over {sym} = {fmt(theta)}); the fork "
                        "kept the text instead.", _token_target(p, method if isinstance(method, int) else None),
                        kind)
    if values:
        best = max(values, key=lambda pair: pair[0]) if compare == ">" else min(values, key=lambda pair: pair[0])
        closest = f"the {'highest' if compare == '>' else 'lowest'} was {fmt(best[0])} at {_unit_text(best[1])}"
    elif units:
        # Every unit was recorded not eligible (Probing-RAG once its searches are spent): none could fire,
        # whatever its value, so "no unit was over θ" would not be true.
        return Decision(f"No retrieval ({where})",
                        f"No {unit_name} of this check could fire (the method allowed no retrieval here), so the "
                        f"text was kept. {words[:1].upper()}{words[1:]}.", _token_target(p, None), kind,
                        check_question(p))
    else:
        closest = f"no {unit_name} could fire"
    return Decision(f"No retrieval ({where})",
                    f"No {unit_name} had {signal} {compare} {sym} = {fmt(theta)} ({closest}), so the text was kept. "
                    f"{words[:1].upper()}{words[1:]}.", _token_target(p, None), kind, check_question(p))


#: BlendFilter's three query sets, in plain words.
SETS = {"original": "BlendFilter's first query set: the question alone",
        "external": "BlendFilter's second query set: the question with the model's answer from the first passages",
        "internal": "BlendFilter's third query set: the question with what the model writes from memory"}


def _stage2(view: TraceView, p: dict[str, Any]) -> str:
    anchor = p.get("anchor")
    title = short((view.passage(str(anchor)) or {}).get("title") or anchor, 40) if anchor else "a passage"
    return f"DR-RAG's second stage: the question joined to the stage-1 passage {title!r}"


STAGES = {1: lambda view, p: "DR-RAG's first stage: the question alone", 2: _stage2}


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
        if p.get("set"):
            why = f"{SETS.get(str(p['set']), 'The ' + str(p['set']) + ' query set')}. " + why
        elif p.get("stage") in (1, 2):
            why = f"{STAGES[p['stage']](view, p)}. " + why
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


def _bar(view: TraceView, e: Event, bars: dict[tuple[int, int], int]) -> Decision | None:
    """The chart bar of the unit a check fired at: its value against θ, as the decision chart draws it."""
    p = e.payload
    fired = p.get("fired")
    units = p.get("units") or []
    point = bars.get((e.id, fired)) if isinstance(fired, int) else None
    if point is None or not 0 <= fired < len(units):
        return None
    unit = units[fired]
    values = [v for u in units if u.get("eligible", True) and (v := _value(u)) is not None]
    compare, theta = str(p.get("compare", ">")), p.get("threshold")
    side = "over" if compare == ">" else "under"
    others = sum(1 for v in values if (v > theta if compare == ">" else v < theta)) - 1 \
        if isinstance(theta, (int, float)) else 0
    unit_name = p.get("unit", "token")
    also = (f"; {others} other {unit_name}(s) of this check were {side} it too" if others > 0
            else f"; it is the only {unit_name} of this check {side} it")
    return Decision(f"The bar that fired: {_unit_text(unit)} in the decision chart",
                    f"Its bar is red: {p.get('signal')} = {fmt(_value(unit))}, {side} the line "
                    f"{naming.symbol(p.get('signal'))} = {fmt(theta)}"
                    f"{also}. {naming.plain(p.get('signal'))[:1].upper()}{naming.plain(p.get('signal'))[1:]}.",
                    '[data-panel="signal"] .dre-plot[data-name="signal"]', "bar", bar=point)


def _prober(view: TraceView, e: Event, bars: dict[tuple[int, int], int]) -> Decision | None:
    """Probing-RAG's mechanism: the prober's P(needs retrieval), read from one layer of the answer's hidden
    states, against its threshold, and the decision it made (searched, kept, or kept because the searches
    were spent). Its target is the answer's bar in the decision chart."""
    p = e.payload
    units = p.get("units") or []
    if not units:
        return None
    unit = units[0]
    value, theta = _value(unit), p.get("threshold")
    layer = p.get("layer")
    span = p.get("span")
    tokens = len(view.trace.event(span).payload.get("tokens") or []) if isinstance(span, int) and \
        0 <= span < len(view.trace.events) else 0
    over = isinstance(theta, (int, float)) and value is not None and value > theta
    kind = naming.decision_kind(p)
    if kind == "forced":
        outcome = "a fork made it search here"
    elif kind == "suppressed":
        outcome = "a fork kept the answer instead of searching"
    elif kind == "fired":
        outcome = "so it searched and wrote the answer again"
    elif over and not unit.get("eligible", True):
        outcome = "but its searches were spent, so this answer was kept"
    else:
        outcome = "so the answer was kept"
    where = f"{naming.step(e.step)}, {naming.span(span)}" if span is not None else naming.step(e.step)
    pooled = f"its {tokens} token(s)" if tokens else "its tokens"
    return Decision(f"The prober reads layer {layer} of the answer ({where})",
                    f"Probing-RAG took the model's hidden states after layer {layer} while it wrote "
                    f"{_unit_text(unit)}, averaged them over {pooled} and gave them to its prober "
                    f"({p.get('prober', 'trained for this model')}): P(needs retrieval) = {fmt(value)}, "
                    f"{'over' if over else 'not over'} the line θ = {fmt(theta)}, {outcome}.",
                    '[data-panel="signal"] .dre-plot[data-name="signal"]', "prober", bar=bars.get((e.id, 0)))


def _query(view: TraceView, e: Event) -> Decision | None:
    """How a query was formed, where the trace shows it: DRAGIN's QFS words or FLARE's masked sentence."""
    p = e.payload
    target = f'.dre-qblock[data-query="{e.id}"]'
    name = naming.event("query", e.id).capitalize()
    if isinstance(p.get("candidates"), list) and p["candidates"]:
        chosen = [c for c in p["candidates"] if c.get("chosen")]
        words = ", ".join(f"{str(c.get('text', '')).strip()!r} ({fmt(c.get('weight'))})" for c in chosen) or "none"
        return Decision(f"{name} built by QFS ({naming.step(e.step)})",
                        f"QFS took the {len(chosen)} words the model attended to most when it was unsure (attention "
                        f"in brackets): {words}. The query: {short(p.get('text', ''), 160)!r}.", target, "query")
    if "masked" in p:
        removed = ", ".join(repr(str(m)) for m in p.get("masked") or []) or "nothing"
        return Decision(f"{name}: the sentence with its unsure words masked ({naming.step(e.step)})",
                        f"FLARE removed the words it was unsure of ({removed}) from the sentence "
                        f"{short(p.get('sentence', ''), 140)!r} and searched with what was left: "
                        f"{short(p.get('text', ''), 140)!r}.", target, "query")
    return None


def _rerank(view: TraceView, e: Event) -> Decision:
    p = e.payload
    cands = [c for c in p.get("candidates") or [] if isinstance(c, dict)]
    chosen = p.get("chosen")
    chosen_ids = {str(c) for c in chosen} if isinstance(chosen, list) else {str(chosen)}
    each = "; ".join(f"rank {c.get('rank', n + 1)} {short(c.get('title') or c.get('id'), 40)!r}: U = "
                     f"{fmt(_value(c))}" for n, c in enumerate(cands))
    kept = [c for c in cands if str(c.get("id")) in chosen_ids]
    which = ", ".join(f"{short(c.get('title') or c.get('id'), 40)!r} (search rank {c.get('rank')})" for c in kept)
    of = p.get("retrieval")
    about = f" the passages of {naming.event('retrieval', of)}" if isinstance(of, int) else " the passages"
    return Decision(f"{naming.event('rerank', e.id).capitalize()} by U ({naming.step(e.step)})",
                    f"SEAKR put each of{about} in the context and measured U again: {each}. It kept "
                    f"{which or 'none'}, the lowest U (the passage that leaves the model least unsure), whatever "
                    "its search rank.", f'[data-rerank="{e.id}"]', "rerank")


def _filter(view: TraceView, e: Event) -> Decision:
    from explorer.ui.panels.filtering import kept_ids

    p = e.payload
    kept = kept_ids(p)
    ids = [str(i) for i in p.get("passage_ids") or []]
    gold = view.gold_passages

    def title(pid: str) -> str:
        hit = view.passage(pid)
        return short((hit or {}).get("title") or pid, 40) + (" (gold)" if pid in gold else "")

    verdicts = "; ".join(f"{title(pid)!r} {'kept' if pid in kept else 'dropped'}" for pid in ids)
    which = f"the {p['set']} query set's passages" if p.get("set") else "the passages"
    return Decision(f"{naming.event('filter', e.id).capitalize()}: the model judges {which} ({naming.step(e.step)})",
                    f"BlendFilter asked the model which passages help answer the question: {verdicts}. "
                    f"{len(kept & set(ids))} of {len(ids)} kept.", f'[data-filter="{e.id}"]', "filter")


def _classifier(view: TraceView, e: Event) -> Decision:
    p = e.payload
    pair = [str(x.get("id") if isinstance(x, dict) else x) for x in p.get("pair") or []]
    names = " + ".join(repr(short((view.passage(pid) or {}).get("title") or pid, 40)) for pid in pair)
    verdict = "accepted" if p.get("accepted") else "rejected"
    theta = p.get("threshold")
    against = f" against its threshold {fmt(theta)}" if isinstance(theta, (int, float)) else ""
    return Decision(f"{naming.event('classifier', e.id).capitalize()}: {verdict} ({naming.step(e.step)})",
                    f"DR-RAG's classifier judged whether the pair {names} together answers the question: "
                    f"probability {fmt(p.get('probability'))}{against}, so the pair was {verdict}.",
                    f'[data-classifier="{e.id}"]', "classifier")


def _selection(view: TraceView, e: Event) -> Decision:
    p = e.payload
    ids = [str(i) for i in p.get("passage_ids") or []]
    titles = ", ".join(repr(short((view.passage(pid) or {}).get("title") or pid, 40)) for pid in ids) or "none"
    return Decision(f"The passages the answer is written from ({naming.step(e.step)})",
                    f"{str(p.get('reason') or 'Selected')[:1].upper()}{str(p.get('reason') or 'selected')[1:]}: "
                    f"{titles}.", f'[data-selection="{e.id}"]', "selection")


def decisions(view: TraceView) -> list[Decision]:
    """Every decision of the run in the order it was made, with each paper's mechanism as its own step."""
    from explorer.ui.panels.signals import bar_points

    cuts = {e.payload.get("span"): e for e in view.of_kind("truncation")}
    bars = bar_points(view)
    out: list[Decision] = []
    for e in view.events:
        found: Decision | None = None
        if e.kind == "check":
            out.append(_check(view, e, cuts))
            if "prober" in e.payload:  # Probing-RAG: the prober's reading is the step, fired or not
                found = _prober(view, e, bars)
            elif naming.decision_kind(e.payload) in ("fired", "forced"):
                found = _bar(view, e, bars)
        elif e.kind == "retrieval":
            found = _retrieval(view, e)
        elif e.kind == "query":
            found = _query(view, e)
        elif e.kind == "rerank":
            found = _rerank(view, e)
        elif e.kind == "filter":
            found = _filter(view, e)
        elif e.kind == "classifier":
            found = _classifier(view, e)
        elif e.kind == "selection" and e.payload.get("passage_ids"):
            found = _selection(view, e)
        if found is not None:
            out.append(found)
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


def _words(d: Decision) -> str:
    """A decision's title and why, escaped, each of the page's words explained where it first appears in
    them (presenting mode's bar shows the same markup, so the words explain themselves there too)."""
    seen: set[str] = set()
    return (f"<b>{mark_terms(d.title, seen)}</b>. "
            f'<span class="dre-why-text">{mark_terms(d.why, seen)}</span>')


def render(view: TraceView, opts: ViewOptions) -> str:
    found = decisions(view)
    if not found or opts.live:
        return ""
    items = "".join(f'<li class="dre-decision" data-kind="{esc(d.kind)}" data-target="{esc(d.target)}"'
                    + (f' data-bar="{d.bar}"' if d.bar is not None else "") + _asked(d)
                    + f">{_words(d)}</li>" for d in found)
    body = (f'<details class="dre-decisions-box"><summary>'
            f"{len(found)} decision(s), in the order they were made</summary>"
            f'<ol class="dre-decisions">{items}</ol></details>')
    return section("Decisions in words", body, panel="decisions")
