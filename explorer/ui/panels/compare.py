"""Two or more stored runs side by side: answers, where each retrieved, queries, passages, costs, diff.

Everything is read from the traces. Passages found by every run are marked as shared, those
only one run found as unique, which is usually where two methods' answers part ways. The text
diff is word-level against the first run's output.
"""

from __future__ import annotations

import difflib

from explorer import naming
from explorer.trace import Trace
from explorer.ui.panels import costs
from explorer.ui.panels.header import changed_settings, retriever_label
from explorer.ui.views.html import badge, esc, fmt, section, short
from explorer.ui.views.view import TraceView


def word_diff(a: str, b: str) -> str:
    """``b`` against ``a`` as escaped HTML, deletions in <del>, insertions in <ins>."""
    wa, wb = a.split(), b.split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(esc(" ".join(wa[i1:i2])))
        if op in ("delete", "replace"):
            out.append(f"<del>{esc(' '.join(wa[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{esc(' '.join(wb[j1:j2]))}</ins>")
    return " ".join(out)


def _triggers(view: TraceView) -> str:
    items = []
    for e in view.of_kind("trigger"):
        p = e.payload
        forced = " (forced by a fork)" if view.decision(p.get("span")) == "forced" else ""
        items.append(f"<li>{naming.step(e.step)}: {esc(repr(str(p.get('token', ''))))}{forced} "
                     f"({esc(p.get('signal'))} = {esc(fmt(p.get('value')))}, θ = {esc(fmt(p.get('threshold')))})</li>")
    before = [e for e in view.of_kind("query") if e.id not in view.trigger_of]
    for q in before:
        items.append(f"<li>{naming.step(q.step)}: without a threshold decision ({esc(q.payload.get('source'))})</li>")
    return f"<ul>{''.join(items)}</ul>" if items else "never"


def _passages(view: TraceView, counts: dict[str, int], n: int) -> str:
    seen, items = set(), []
    for e in view.retrievals:
        for h in e.payload.get("hits") or []:
            pid = str(h.get("id"))
            if pid in seen:
                continue
            seen.add(pid)
            mark = badge("all runs", "ok") if counts.get(pid) == n else (badge("only here", "part")
                                                                         if counts.get(pid) == 1 else "")
            gold = badge("gold", "gold") if pid in view.gold_passages else ""
            items.append(f"<li><b>{esc(h.get('title', ''))}</b> <code>{esc(pid)}</code> {mark} {gold}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else "none"


def render(traces: list[Trace]) -> str:
    views = [TraceView(t) for t in traces]
    labels = costs.run_labels(traces)
    counts: dict[str, int] = {}
    for v in views:
        for pid in {str(h.get("id")) for e in v.retrievals for h in e.payload.get("hits") or []}:
            counts[pid] = counts.get(pid, 0) + 1
    questions = {t.question for t in traces}
    rows = [("run", [f"<b>{esc(lb)}</b><br><code>{esc(t.run_id[:12])}</code> {badge(t.status, 'status-' + t.status)}"
                     for lb, t in zip(labels, traces, strict=True)])]
    if len(questions) > 1:
        rows.append(("question", [esc(t.question) for t in traces]))
    differ = costs.models_differ(traces)
    rows.append(("model", [esc(costs.model_name(t)) + (" " + badge("another model", "part")
                                                       if differ and costs.model_name(t) != costs.model_name(traces[0])
                                                       else "") for t in traces]))
    rows += [
        ("settings", [esc(", ".join(f"{k}={v}" for k, v in changed_settings(t.config, t.method).items()) or "defaults")
                      for t in traces]),
        ("retriever", [esc(f"{retriever_label(t.corpus)} over {t.corpus.get('name', '?')}") for t in traces]),
        ("answer", [f"<b>{esc(t.answer if t.answer is not None else '–')}</b>" for t in traces]),
        ("retrieved when", [_triggers(v) for v in views]),
        ("queries", ["<ol>" + "".join(f"<li>{esc(short(q.payload.get('text', ''), 200))}</li>"
                                      for q in v.of_kind("query")) + "</ol>" for v in views]),
        ("passages", [_passages(v, counts, len(views)) for v in views]),
        ("output diff", [esc(traces[0].output) if i == 0 else word_diff(traces[0].output, t.output)
                         for i, t in enumerate(traces)]),
    ]
    gold = views[0].gold_answers
    note = f"Gold answers: {esc(' | '.join(gold))}. " if gold else ""
    note += f"The diff is against {esc(labels[0])}'s output."
    table = "".join(f"<tr><th>{esc(name)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
                    for name, cells in rows)
    body = f'<div class="dre-scroll"><table class="dre-table dre-compare">{table}</table></div>'
    return (section(f"Comparison of {len(traces)} runs", body, panel="compare", note=note)
            + costs.render(traces))
