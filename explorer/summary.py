"""A plain-text account of a trace, for the terminal: what was generated, where retrieval fired, what was cut,
which query found which passages, and what it all cost. It reads the trace only."""

from __future__ import annotations

import textwrap

from explorer.trace import Trace


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _query_label(p: dict) -> str:
    """Where a query came from: its source, BlendFilter's set or DR-RAG's stage, and its blended parts."""
    label = p["source"]
    if p.get("set"):
        label = f"{p['set']} set"
    if p.get("stage"):
        label = f"stage {p['stage']}" + (f", question + [{p['anchor']}]" if p.get("anchor") else ", question")
    parts = [part for part in p.get("parts", []) if part.get("generation") is not None]
    if parts:
        label += "; " + " + ".join(f"{part['source']} text from [{part['generation']}]" for part in parts)
        label += " + question"
    return label


def render_text(trace: Trace, *, passages: int = 3) -> str:
    model, corpus = trace.model.get("name", "?"), trace.corpus.get("name", "?")
    lines = [f"{trace.method} ({trace.variant}) · {model} · corpus {corpus} · {trace.status} · "
             f"{trace.costs.total_time:.1f} s",
             f"Question: {trace.question}"]
    queries: dict[int, str] = {}
    for e in trace.events:
        p = e.payload
        if e.kind == "generation":
            lines.append(f"  [{e.id}] generated ({p['purpose']}, {len(p['tokens'])} tokens, stopped by "
                         f"{p.get('stopped_by', '?')}): {_short(p['text'])!r}")
        elif e.kind == "trigger":
            lines.append(f"  ⚑ retrieval fired at token {p['token_index']} ({p.get('token', '')!r}) of span "
                         f"[{p['span']}]: {p['signal']} = {p['value']:.3f} vs threshold {p['threshold']}")
        elif e.kind == "truncation":
            lines.append(f"  ✂ cut span [{p['span']}] at token {p['token_index']}; discarded "
                         f"{_short(p['discarded_text'], 80)!r}")
        elif e.kind == "query":
            queries[e.id] = p["text"]
            lines.append(f"  ? query ({_query_label(p)}): {_short(p['text'])!r}")
        elif e.kind == "retrieval":
            # Sets that a filter or a classifier judges next are shown whole, so its numbers make sense.
            shown = p["hits"] if ("set" in p or "stage" in p) else p["hits"][:passages]
            for h in shown:
                lines.append(f"      {h['rank']}. [{h['id']}] {h['title']} ({h['score']:.2f}): {_short(h['text'], 70)}")
            if p.get("candidates") is not None:
                lines.append(f"      stage-2 candidates (new passages): {', '.join(p['candidates']) or 'none'}")
        elif e.kind == "filter":
            lines.append(f"  ⊘ filter of the {p.get('set', '?')} set: the model answered {p['raw_answer'].strip()!r} "
                         f"→ {p['status']} {p.get('numbers', [])}; kept {', '.join(p['kept']) or 'nothing'}"
                         + (f"; dropped {', '.join(p['dropped'])}" if p["dropped"] else ""))
        elif e.kind == "classifier":
            verdict = "accepted" if p["accepted"] else "rejected"
            lines.append(f"  ◇ pair [{p['pair'][0]}] + [{p['pair'][1]}]: p = {p['probability']:.2f} → {verdict} "
                         f"(judge: {p['judge']})")
        elif e.kind == "selection":
            lines.append(f"  ✓ selected {', '.join(p['passage_ids']) or 'no passage'}: {p['reason']}")
            for item in p.get("passages", []):
                lines.append(f"      [{item['id']}] {item.get('reason', '')}")
            for item in p.get("dropped", []):
                lines.append(f"      dropped [{item['id']}]: {item.get('reason', '')}")
            if p.get("before_filter") is not None:
                lines.append(f"      before filtering: {', '.join(p['before_filter']) or 'no passage'}")
        elif e.kind == "note":
            lines.append(f"  ! {p['message']}")
    lines.append("Output: " + "\n        ".join(textwrap.wrap(trace.output or "", 100)))
    lines.append(f"Answer: {trace.answer}")
    c = trace.costs
    lines.append(f"Costs: {c.retrievals} retrievals, {c.llm_calls} LLM calls, {c.forward_passes} forward passes, "
                 f"{c.generated_tokens} tokens generated ({c.discarded_tokens} discarded), "
                 f"{c.sampled_sequences} sampled sequences")
    if trace.error:
        lines.append(f"Error: {trace.error}")
    return "\n".join(lines)
