"""A plain-text account of a trace, for the terminal: what was generated, where retrieval fired, what was cut,
which query found which passages, and what it all cost. It reads the trace only."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from explorer import naming
from explorer.trace import Trace


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _query_label(p: dict) -> str:
    """Where a query came from: its source, BlendFilter's set or DR-RAG's stage, and its blended parts."""
    label = p["source"]
    if p.get("set"):
        label = f"{p['set']} set"
    if p.get("stage"):
        label = f"stage {p['stage']}" + (f", question + [{p['anchor']}]" if p.get("anchor") else ", question")
    parts = [part for part in p.get("parts", []) if part.get("generation") is not None]
    if parts:
        label += "; " + " + ".join(f"{part['source']} text from {naming.span(part['generation'])}" for part in parts)
        label += " + question"
    return label


def _uncertainty(p: dict[str, Any], _passages: int) -> list[str]:
    extra = ""
    if "valid" in p:
        extra = f" from {p['valid']}/{p.get('k', '?')} samples, layer {p.get('layer')} {p.get('site')}"
    where = f" for passage {p['passage']}" if p.get("passage") else ""
    return [f"  ~ U({p['estimator']}) of the {p.get('context', '?')} context{where} = {_num(p['value'])}{extra}"]


def _check(p: dict[str, Any], _passages: int) -> list[str]:
    if p.get("unit") != "step":
        return []
    unit = p["units"][0]
    kind = naming.decision_kind(p)
    verdict = {"fired": "retrieve", "kept": "no retrieval", "forced": "retrieval forced by a fork",
               "suppressed": "retrieval suppressed by a fork"}[kind]
    return [f"  {'⚑' if p['fired'] is not None else '·'} {naming.step(p['_step'])}: {p['signal']} = "
            f"{_num(unit['value'])} {p['compare']} δ {p['threshold']}? {verdict}"]


def _rerank(p: dict[str, Any], _passages: int) -> list[str]:
    lines = [f"  ⇅ re-ranked by {p.get('signal', 'signal')}:"]
    for c in p["candidates"]:
        mark = "  ← kept" if c["id"] == p["chosen"] else ""
        lines.append(f"      [{c['id']}] {c.get('title', '')} (search rank {c.get('rank')}, "
                     f"score {_num(c.get('score'))}): {_num(c.get('value'))}{mark}")
    return lines


def _choice(p: dict[str, Any], _passages: int) -> list[str]:
    shown = " | ".join(f"{o['strategy']}: {o.get('answer')!r} ({_num(o.get('value'))})" for o in p["options"])
    return [f"  ⚖ {shown} → {p['chosen']} ({p['reason']})"]


def _generation(p: dict[str, Any], _passages: int) -> list[str]:
    return [f"  {naming.span(p['_id'])} generated ({p['purpose']}, {len(p['tokens'])} tokens, stopped by "
            f"{p.get('stopped_by', '?')}): {_short(p['text'])!r}"]


def _trigger(p: dict[str, Any], _passages: int) -> list[str]:
    if p.get("unit") == "step":
        return []
    verb = "retrieval forced by a fork" if p.get("_kind") == "forced" else "retrieval fired"
    return [f"  ⚑ {verb} at {naming.token(p['span'], p['token_index'])} ({p.get('token', '')!r}): "
            f"{p['signal']} = {p['value']:.3f}, threshold {p['threshold']}"]


def _retrieval(p: dict[str, Any], passages: int) -> list[str]:
    # Sets that a filter or a classifier judges next are shown whole, so its numbers make sense.
    shown = p["hits"] if ("set" in p or "stage" in p) else p["hits"][:passages]
    lines = [f"    ⇢ {naming.event('retrieval', p['_id'])}: {len(p['hits'])} passage(s)"
             + (" (suppressed by a fork)" if p.get("suppressed") else "")]
    lines += [f"      {h['rank']}. [{h['id']}] {h['title']} ({h['score']:.2f}): {_short(h['text'], 70)}" for h in shown]
    if p.get("candidates") is not None:
        lines.append(f"      stage-2 candidates (new passages): {', '.join(p['candidates']) or 'none'}")
    return lines


def _filter(p: dict[str, Any], _passages: int) -> list[str]:
    return [f"  ⊘ filter of the {p.get('set', '?')} set: the model answered {p['raw_answer'].strip()!r} "
            f"→ {p['status']} {p.get('numbers', [])}; kept {', '.join(p['kept']) or 'nothing'}"
            + (f"; dropped {', '.join(p['dropped'])}" if p["dropped"] else "")]


def _classifier(p: dict[str, Any], _passages: int) -> list[str]:
    verdict = "accepted" if p["accepted"] else "rejected"
    return [f"  ◇ pair [{p['pair'][0]}] + [{p['pair'][1]}]: p = {p['probability']:.2f} → {verdict} "
            f"(judge: {p['judge']})"]


def _selection(p: dict[str, Any], _passages: int) -> list[str]:
    lines = [f"  ✓ selected {', '.join(p['passage_ids']) or 'no passage'}: {p['reason']}"]
    lines += [f"      [{item['id']}] {item.get('reason', '')}" for item in p.get("passages", [])]
    lines += [f"      dropped [{item['id']}]: {item.get('reason', '')}" for item in p.get("dropped", [])]
    if p.get("before_filter") is not None:
        lines.append(f"      before filtering: {', '.join(p['before_filter']) or 'no passage'}")
    return lines


#: One line-maker per event kind (a kind not listed is left out of the summary).
_LINES: dict[str, Callable[[dict[str, Any], int], list[str]]] = {
    "uncertainty": _uncertainty, "check": _check, "rerank": _rerank, "choice": _choice, "generation": _generation,
    "trigger": _trigger, "retrieval": _retrieval, "filter": _filter, "classifier": _classifier,
    "selection": _selection,
    "truncation": lambda p, _n: [f"  ✂ cut {naming.span(p['span'])} from token {p['token_index']} on; discarded "
                                 f"{_short(p['discarded_text'], 80)!r}"],
    "query": lambda p, _n: [f"  ? {naming.event('query', p['_id'])} ({_query_label(p)}): {_short(p['text'])!r}"],
    "note": lambda p, _n: [f"  ! {p['message']}"],
}


def _event_lines(trace: Trace, passages: int) -> list[str]:
    lines: list[str] = []
    also: list[str] = []  # the non-deciding uncertainty estimates of one context, shown on one line
    decided: dict[Any, str] = {}  # span -> how its check decided (a fork's forced retrieval is named so)
    for e in trace.events:
        p = e.payload
        if e.kind == "check":
            decided[p.get("span")] = naming.decision_kind(p)
        if e.kind == "uncertainty" and not p.get("primary", True):
            also.append(f"{p['estimator']} {_num(p['value'])}")
            continue
        if also:
            lines.append("      also: " + ", ".join(also))
            also = []
        make = _LINES.get(e.kind)
        if make is not None:
            lines += make({**p, "_id": e.id, "_step": e.step, "_kind": decided.get(p.get("span"))}, passages)
    if also:
        lines.append("      also: " + ", ".join(also))
    return lines


def render_text(trace: Trace, *, passages: int = 3) -> str:
    model, corpus = trace.model.get("name", "?"), trace.corpus.get("name", "?")
    lines = [f"{trace.method} ({trace.variant}) · {model} · corpus {corpus} · {trace.status} · "
             f"{trace.costs.total_time:.1f} s",
             f"Question: {trace.question}"]
    chosen = {k: v for k, v in trace.config_sources.items() if v != "paper"}
    if chosen:
        lines.append("Settings not at the paper's default: " + ", ".join(
            f"{k}={trace.config.get(k)!r} ({'set by you' if v == 'user' else v})" for k, v in chosen.items()))
    lines += _event_lines(trace, passages)
    lines.append("Output: " + "\n        ".join(textwrap.wrap(trace.output or "", 100)))
    lines.append(f"Answer: {trace.answer}")
    c = trace.costs
    lines.append(f"Costs: {c.retrievals} retrievals, {c.llm_calls} LLM calls, {c.forward_passes} forward passes, "
                 f"{c.generated_tokens} tokens generated ({c.discarded_tokens} discarded), "
                 f"{c.sampled_sequences} sampled sequences")
    if trace.error:
        lines.append(f"Error: {trace.error}")
    return "\n".join(lines)
