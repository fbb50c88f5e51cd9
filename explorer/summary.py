"""A plain-text account of a trace, for the terminal: what was generated, where retrieval fired, what was cut,
which query found which passages, and what it all cost. It reads the trace only."""

from __future__ import annotations

import textwrap

from explorer.trace import Trace


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


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
            lines.append(f"  ? query ({p['source']}): {_short(p['text'])!r}")
        elif e.kind == "retrieval":
            for h in p["hits"][:passages]:
                lines.append(f"      {h['rank']}. [{h['id']}] {h['title']} ({h['score']:.2f}): {_short(h['text'], 70)}")
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
