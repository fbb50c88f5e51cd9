"""The output as a strip of tokens coloured by one signal, with retrieval, cuts and joins marked.

Every generated span is shown in order. The token that fired retrieval carries a flag; tokens
that were cut away stay visible, struck through, after a scissors mark at the cut; a span that
continued after a retrieval has a left border and a link in that retrieval's colour, so the text
is visibly joined to the passages it was given. Values are in each token's hover title.
"""

from __future__ import annotations

from typing import Any

from explorer import naming, whatif
from explorer.engine.token_signals import registry
from explorer.ui.views.html import esc, fmt, heat, section
from explorer.ui.views.terms import mark_terms, term
from explorer.ui.views.view import Span, TraceView, ViewOptions, strip_signals


def _scale(view: TraceView, signal: str) -> tuple[float, float]:
    values = [v for s in view.main_spans for t in s.tokens if (v := view.token_value(s, t, signal)) is not None]
    if not values:
        return 0.0, 1.0
    return min(values), max(values)


def _intensity(value: float | None, signal: str, lo: float, hi: float) -> float | None:
    if value is None:
        return None
    spec = registry().get(signal)
    if spec is not None and spec.inverse:
        return 1.0 - value
    if signal == "u":
        return 0.5 if hi == lo else (value - lo) / (hi - lo)
    return value / hi if hi > 0 else 0.0


def _title(i: int, token: dict[str, Any], span: Span) -> str:
    recorded = token.get("signals") if isinstance(token.get("signals"), dict) else token
    shown = [s for s in registry().values() if s.shown and s.id in recorded]
    where = naming.token(span.event_id, i) if span.event_id >= 0 else f"token {i}"
    lines = [f"{where}: {token.get('text', '')!r}",
             " · ".join(f"{s.short or s.title} = {fmt(recorded.get(s.id))}" for s in shown)]
    # A flag signal that is off says why (DRAGIN's content mask: "not eligible for RIND").
    lines += [s.legend for s in registry().values() if not s.shown and recorded.get(s.id) is False]
    if span.u is not None:
        lines.append(f"U ({naming.step(span.step)}) = {fmt(span.u)}")
    top = token.get("top") or []
    if top:
        lines.append("top: " + ", ".join(f"{str(t)!r} {fmt(p)}" for t, p in top[:5]))
    return "\n".join(lines)


def whatif_marks(view: TraceView, decisions: list[whatif.Decision]) -> dict[int, set[int]]:
    """Token positions, per span event id, where retrieval WOULD fire at the what-if threshold."""
    marks: dict[int, set[int]] = {}
    for d in decisions:
        if not d.reliable or d.would_fire is None or d.span is None:
            continue
        check = view.events[d.check].payload
        unit = (check.get("units") or [])[d.would_fire]
        rng = unit.get("tokens")
        if isinstance(rng, list) and len(rng) == 2:
            positions = set(range(int(rng[0]), int(rng[1])))
        elif check.get("unit", "token") == "token":
            positions = {d.would_fire}
        elif check.get("unit") == "step":  # one unit per step (SEAKR): the whole span it decided on
            span = next((s for s in view.spans if s.event_id == d.span), None)
            positions = set(range(len(span.tokens))) if span else set()
        else:
            positions = set()
        marks.setdefault(d.span, set()).update(positions)
    return marks


def _tokens_html(view: TraceView, span: Span, signal: str, lo: float, hi: float, marks: set[int],
                 fork_token: int | None = None) -> str:
    parts = []
    if span.appended:
        parts.append(f'<span class="dre-appended" title="appended by the method, not generated">'
                     f'{esc(span.appended)}</span>')
    for i, token in enumerate(span.tokens):
        if span.cut_at is not None and i == span.cut_at:
            parts.append(f'<span class="dre-cut-mark" title="{esc("cut here: " + span.cut_reason)}" '
                         'aria-hidden="true">✂</span><span class="dre-sr">(cut here: the rest of this span was '
                         "discarded)</span>")
        classes = ["tok"]
        if span.cut_at is not None and i >= span.cut_at:
            classes.append("cut")
        flag = ""
        if i in span.triggers:
            trig = span.triggers[i]
            kind = view.decision(span.event_id)
            classes.append("forced" if kind == "forced" else "fired")
            verb = "retrieval forced by a fork" if kind == "forced" else "retrieval fired"
            why = (f"{verb}: {trig.get('signal')} = {fmt(trig.get('value'))}, "
                   f"{naming.symbol(trig.get('signal'))} = {fmt(trig.get('threshold'))}")
            flag = (f'<span class="dre-flag" title="{esc(why)}" aria-hidden="true">⚑</span>'
                    f'<span class="dre-sr">({esc(verb)} at the next token)</span>')
        if i in marks:
            classes.append("whatif")
        if i == fork_token:
            classes.append("forkpoint")
            flag += '<span class="dre-forkmark" title="a fork diverges here">⋔</span>'
        text = str(token.get("text", "")).replace("\n", "↵\n")
        colour = heat(_intensity(view.token_value(span, token, signal), signal, lo, hi))
        parts.append(f'{flag}<span class="{" ".join(classes)}" data-i="{i}" style="background:{colour}" '
                     f'title="{esc(_title(i, token, span))}">{esc(text)}</span>')
    if span.live:
        parts.append('<span class="dre-caret">▍</span>')
    return "".join(parts)


def _plain(span: Span, marks: set[int], fork_span: int | None = None) -> bool:
    """Nothing happened to this span (no join, cut, trigger, what-if or fork): it may be folded with its neighbours."""
    return (span.retrieval is None and span.cut_at is None and not span.triggers and not span.live and not marks
            and span.event_id != fork_span)


def _group_html(view: TraceView, spans: list[Span], signal: str, lo: float, hi: float) -> str:
    """Many short calls of one purpose (a judge per passage pair, a filter per set) on one line each."""
    first = spans[0]
    head = (f'<span class="dre-tag">{esc(first.purpose)} · {naming.step(first.step)} · {len(spans)} calls '
            f"(spans {spans[0].event_id}–{spans[-1].event_id})</span>")
    body = '<span class="dre-sep">│</span>'.join(_tokens_html(view, s, signal, lo, hi, set()) for s in spans)
    ids = " ".join(str(s.event_id) for s in spans)
    return (f'<div class="dre-span group" data-span="{ids}"><div class="dre-span-head">{head}</div>'
            f'<div class="dre-tokens">{body}</div></div>')


def _span_html(view: TraceView, span: Span, signal: str, lo: float, hi: float, marks: set[int],
               fork_token: int | None = None) -> str:
    name = "" if span.step < 0 else f"{naming.span(span.event_id)} · "
    head = [f'<span class="dre-tag">{name}{esc(span.purpose)}{"" if span.step < 0 else f" · {naming.step(span.step)}"}'
            f'{" · replayed" if span.replayed else ""}</span>']
    style = ""
    if span.retrieval is not None:
        colour = view.colour(span.retrieval)
        hits = view.events[span.retrieval].payload.get("hits") or [] if span.retrieval < len(view.events) else []
        titles = " · ".join(esc(h.get("title", h.get("id", ""))) for h in hits) or "no passages"
        head.append(f'<a class="dre-join" href="#{view.anchor(span.retrieval)}" style="color:{colour}">'
                    f'⇠ given the passages of {naming.event("retrieval", span.retrieval)}: {titles}</a>')
        style = f' style="border-left-color:{colour}"'
    classes = "".join(f" {c}" for c, on in (("sampled", span.sampled), ("live", span.live),
                                             ("replayed", span.replayed)) if on)
    return (f'<div class="dre-span{classes}" '
            f'data-span="{span.event_id}"{style}><div class="dre-span-head">{"".join(head)}</div>'
            f'<div class="dre-tokens">{_tokens_html(view, span, signal, lo, hi, marks, fork_token)}</div></div>')


def window_note(view: TraceView) -> str:
    """A visible line when the layer whose attention the signals read has a window shorter than the text.

    amax, RIND and the QFS weights are then computed within the window only (positions outside
    it receive 0 attention from that layer); a reader must know that to read the colours right.
    The window is in the trace's model fingerprint; spans generated with attention also say
    whether their context went past it.
    """
    window = view.trace.model.get("attention_window") if isinstance(view.trace.model, dict) else None
    spans = [e.payload for e in view.events if e.kind == "generation" and e.payload.get("attention_window")]
    uses_attention = spans or any(e.kind == "check" and str(e.payload.get("signal", "")).startswith("rind")
                                  for e in view.events)
    if not isinstance(window, dict) or not uses_attention:
        return ""
    size, kind = window.get("size", "?"), window.get("kind", "sliding")
    reach = f"only within chunks of {size} tokens" if kind == "chunked" else f"only to the last {size} positions"
    longer = sum(1 for p in spans if p.get("attention_window_limited"))
    where = (f"{longer} span(s) here have a longer context" if longer else
             "wherever a text the signals were read from is longer")
    return (f'<p class="dre-note dre-window-note">Attention window: the last layer attends {esc(reach)} '
            f"({esc(kind)} attention); {esc(where)}, positions outside the window receive 0 attention from it, "
            "so amax, RIND and the QFS weights count attention within the window only.</p>")


def render(view: TraceView, opts: ViewOptions, decisions: list[whatif.Decision] | None = None) -> str:
    signal = opts.signal if opts.signal in view.available_signals() else "prob"
    lo, hi = _scale(view, signal)
    marks = whatif_marks(view, decisions or [])
    spans = view.main_spans
    fork_at = opts.fork_at or view.fork_at or {}
    fork_span = fork_at.get("span") if fork_at.get("retrieval") is None else None
    fork_token = int(fork_at.get("token") or 0) if fork_span is not None else None
    blocks, run = [], []  # runs of three or more plain spans of one purpose and step are folded together

    def flush() -> None:
        if len(run) >= 3:
            blocks.append(_group_html(view, run, signal, lo, hi))
        else:
            blocks.extend(_span_html(view, s, signal, lo, hi, set()) for s in run)
        run.clear()

    for s in spans:
        mine = marks.get(s.event_id, set())
        plain = _plain(s, mine, fork_span)
        if plain and (not run or (run[0].purpose, run[0].step) == (s.purpose, s.step)):
            run.append(s)
            continue
        flush()
        if plain:
            run.append(s)
        else:
            blocks.append(_span_html(view, s, signal, lo, hi, mine,
                                     fork_token if s.event_id == fork_span else None))
    flush()
    body = "".join(blocks)
    if not spans:
        body = '<p class="dre-empty">No tokens yet.</p>'
    body += window_note(view)
    sampled = view.sampled_spans
    if sampled:
        body += (f'<p class="dre-note">{len(sampled)} sampled continuation(s) are not in the strip; '
                 'see the uncertainty panel.</p>')
    label, how = strip_signals()[signal]
    coloured = f"coloured by <b>{esc(label)}</b>"
    if opts.interactive and len(view.available_signals()) > 1:
        options = "".join(f'<option value="{esc(sid)}"{" selected" if sid == signal else ""}>'
                          f"{esc(strip_signals()[sid][0])}</option>" for sid in view.available_signals())
        coloured = (f'<label class="dre-viewctl" for="dre-signal-{view.key}">colour tokens by</label> '
                    f'<select class="dre-viewctl dre-signal-pick" id="dre-signal-{view.key}">{options}</select>')
    legend = (f'<div class="dre-legend"><span>{coloured}: {mark_terms(how)}</span>'
              '<span class="dre-key">'
              + ('<span class="dre-k fired">⚑ retrieval fired</span>' if any(
                  s.triggers and view.decision(s.event_id) != "forced" for s in spans) else "")
              + ('<span class="dre-k forced">⚑ retrieval forced by a fork</span>' if any(
                  s.triggers and view.decision(s.event_id) == "forced" for s in spans) else "")
              + ('<span class="dre-k cut">cut away</span>' if any(s.cut_at is not None for s in spans) else "")
              + (f'<span class="dre-k whatif">would fire at {term("theta", "θ′")}</span>' if marks else "")
              + ('<span class="dre-k forkpoint">⋔ fork point</span>' if fork_span is not None else "")
              + "</span></div>")
    return section("Output, token by token", legend + f'<div class="dre-strip">{body}</div>', panel="strip")
