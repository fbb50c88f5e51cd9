"""What runs cost, side by side: retrievals, LLM calls, forward passes, tokens kept and discarded, time.

The numbers are the trace's ``costs`` as the engine and the methods counted them (the papers'
"#retrieval" and "#LLM call" columns, plus what the explorer measures on top).
"""

from __future__ import annotations

from plotly.subplots import make_subplots

from explorer.trace import Trace
from explorer.ui.views.html import esc, fmt, plot, plot_text, section

METRICS = (
    ("retrievals", "retrievals"),
    ("llm_calls", "LLM calls"),
    ("forward_passes", "forward passes"),
    ("generated_tokens", "generated tokens"),
    ("discarded_tokens", "discarded tokens"),
    ("sampled_sequences", "sampled sequences"),
    ("total_time", "wall time (s)"),
)
COLOURS = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#dc2626")


def run_labels(traces: list[Trace]) -> list[str]:
    """Short distinct labels: method/variant, with the run's id when the same pair appears twice
    (a fork beside its parent: "dragin/paper · 3f2a91", never a bare "#1"/"#2")."""
    base = [f"{t.method}/{t.variant}" for t in traces]
    return [b if base.count(b) == 1 else f"{b} · {'fork ' if t.fork else 'run '}{t.run_id[:6]}"
            for b, t in zip(base, traces, strict=True)]


def model_name(trace: Trace) -> str:
    """The model a run was made on, as its trace records it ('?' when it does not)."""
    return str((trace.model or {}).get("name") or "?") if isinstance(trace.model, dict) else "?"


def models_differ(traces: list[Trace]) -> str:
    """A warning to show beside compared figures when the runs were made on different models ('' otherwise)."""
    names = list(dict.fromkeys(model_name(t) for t in traces))
    if len(names) < 2:
        return ""
    return (f"These runs were made on different models ({', '.join(names)}): forward passes, tokens and wall "
            "time depend on the model and the machine, so compare them only between runs of the same model.")


def _value(trace: Trace, key: str) -> float:
    return trace.costs.total_time if key == "total_time" else getattr(trace.costs, key)


def table(traces: list[Trace]) -> str:
    labels = run_labels(traces)
    head = "".join(f"<th>{esc(label)}</th>" for label in labels)
    rows = []
    if len({model_name(t) for t in traces}) > 1:  # the figures below are each model's own
        rows.append("<tr><td>model</td>" + "".join(f"<td>{esc(model_name(t))}</td>" for t in traces) + "</tr>")
    for key, name in METRICS:
        values = [_value(t, key) for t in traces]
        if key == "sampled_sequences" and not any(values):
            continue
        rows.append(f"<tr><td>{esc(name)}</td>" + "".join(f"<td>{esc(fmt(v))}</td>" for v in values) + "</tr>")
    return f'<table class="dre-table dre-costs"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


def chart(traces: list[Trace]) -> str:
    labels = run_labels(traces)
    metrics = [(k, n) for k, n in METRICS if k != "sampled_sequences" or any(t.costs.sampled_sequences for t in traces)]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[n for _, n in metrics], horizontal_spacing=0.04)
    for col, (key, name) in enumerate(metrics, 1):
        values = [_value(t, key) for t in traces]
        fig.add_bar(x=[plot_text(lb, 24) for lb in labels], y=values, row=1, col=col,
                    marker={"color": [COLOURS[i % len(COLOURS)] for i in range(len(traces))]},
                    hovertext=[f"{plot_text(lb)}<br>{name}: {fmt(v)}" for lb, v in zip(labels, values, strict=True)],
                    hoverinfo="text")
    fig.update_annotations(font_size=10)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(template=None, showlegend=False, margin={"l": 30, "r": 10, "t": 36, "b": 10},
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="#fafafa",
                      font={"family": "system-ui, sans-serif", "size": 10})
    legend = " ".join(f'<span class="dre-swatch" style="background:{COLOURS[i % len(COLOURS)]}"></span>{esc(lb)}'
                      for i, lb in enumerate(labels))
    alt = "Bar charts comparing " + "; ".join(
        f"{name}: " + ", ".join(f"{lb} {fmt(_value(t, key))}" for lb, t in zip(labels, traces, strict=True))
        for key, name in metrics[:3]) + " (the table above has every number)."
    return f'<div class="dre-legend">{legend}</div>' + plot(fig, height=200, name="costs", alt=alt)


def render(traces: list[Trace]) -> str:
    if not traces:
        return ""
    warning = models_differ(traces)
    body = (f'<p class="dre-note dre-models-differ" role="note">{esc(warning)}</p>' if warning else "") + table(traces)
    body += chart(traces) if len(traces) > 1 else ""
    return section("Costs" + (" compared" if len(traces) > 1 else ""), body, panel="costs")
