"""A run's heading: method, variant, status, question, answer against the gold answers, notes.

Also lists the parameters that differ from the method's defaults, so two runs of one method
can be told apart at a glance, and any ``note`` event (fallbacks, known defects of a reference
implementation) the method wanted its reader to see.
"""

from __future__ import annotations

from typing import Any

from explorer.eval.scores import answer_verdict
from explorer.ui.views.html import badge, esc, fmt
from explorer.ui.views.terms import mark_terms
from explorer.ui.views.view import TraceView, ViewOptions


def _defaults(method: str) -> dict[str, Any]:
    try:
        from explorer.methods.base import get_method

        return {d["name"]: d["default"] for d in get_method(method).Config.describe()}
    except Exception:  # a stored run of a method this build does not have
        return {}


def changed_settings(trace_config: dict[str, Any], method: str) -> dict[str, Any]:
    defaults = _defaults(method)
    return {k: v for k, v in trace_config.items() if k in defaults and defaults[k] != v}


def _title(method: str) -> str:
    try:
        from explorer.methods.base import get_method

        return get_method(method).title
    except Exception:
        return method


def retriever_label(corpus: dict[str, Any]) -> str:
    """How a run's retriever reads in a view: ``BM25``, ``dense · all-MiniLM-L6-v2 · exact ...``.

    Runs stored before retrievers could be chosen carry no ``retriever`` fact: they used BM25."""
    kind = str(corpus.get("retriever") or "bm25")
    if kind == "bm25":
        return "BM25"
    bits = [kind, str(corpus.get("embedder") or "?")]
    if corpus.get("index_type"):
        bits.append(str(corpus["index_type"]))
    fusion = corpus.get("fusion") or {}
    if kind == "hybrid" and fusion:
        bits.append(f"RRF k={fusion.get('rrf_k')}, weights {fusion.get('bm25_weight')}/{fusion.get('dense_weight')}")
    fingerprint = str(corpus.get("index_fingerprint") or "")
    if fingerprint:
        bits.append(f"index {fingerprint[:12]}")
    return " · ".join(bits)


def render(view: TraceView, opts: ViewOptions) -> str:
    t = view.trace
    status = badge(t.status, f"status-{t.status}")
    answer = t.answer if t.answer is not None else ("…" if t.status == "running" else "–")
    judged = answer_verdict(t)
    verdict = badge(judged.label, judged.kind) if judged is not None else ""
    gold = ""
    if view.gold_answers:
        gold = f'<div class="dre-gold">gold: {esc(" | ".join(view.gold_answers))}</div>'
    changed = changed_settings(t.config, t.method)
    settings = ", ".join(f"{esc(k)}={esc(v)}" for k, v in changed.items()) or "defaults"
    c = t.costs
    if t.status == "running":
        tokens = sum(len(s.tokens) for s in view.spans)
        facts = "running …"
        costs = f"so far: {tokens} tokens generated, {len(view.retrievals)} retrievals"
    else:
        facts = (f'{esc(t.model.get("name", "?"))} · corpus {esc(t.corpus.get("name", "?"))} · '
                 f'retriever <span class="dre-retriever">{esc(retriever_label(t.corpus))}</span> · '
                 f'{esc(t.created_at)} · run <code>{esc(t.run_id[:12])}</code>')
        costs = (f"{c.retrievals} retrievals · {c.llm_calls} LLM calls · {c.generated_tokens} tokens "
                 f"({c.discarded_tokens} discarded) · {fmt(c.total_time)} s")
    notes = "".join(f'<li class="dre-note-{esc(e.payload.get("level", "info"))}">{esc(e.payload.get("message"))}</li>'
                    for e in view.of_kind("note"))
    error = f'<div class="dre-error">{esc(t.error)}</div>' if t.error and t.status != "complete" else ""
    link = (f' <a class="dre-link" href="?run={esc(t.run_id)}" aria-label="Link to this {esc(t.method)} run '
            f'({esc(t.run_id[:8])})">link</a>' if opts.interactive and t.status != "running" else "")
    return (f'<header class="dre-runhead"><h2 class="dre-title"><b>{mark_terms(_title(t.method))}</b> '
            f'<span class="dre-variant">{esc(t.variant)}</span> {status}{link}</h2>'
            f'<div class="dre-question">{esc(t.question)}</div>'
            f'<div class="dre-answer">answer: <b>{esc(answer)}</b> {verdict}</div>{gold}'
            f'<div class="dre-facts">settings: {settings} · {esc(costs)}</div><div class="dre-facts">{facts}</div>'
            f'{error}' + (f'<details class="dre-notes-box"><summary>{len(view.of_kind("note"))} note(s) from the '
                          f'method</summary><ul class="dre-notes">{notes}</ul></details>'
                          if notes and not opts.compact else "") + "</header>")
