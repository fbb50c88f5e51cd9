"""Tables and charts of one stored evaluation, in the layout of the DRAGIN paper.

* the answer table (paper table 2): methods as rows, datasets as columns, EM and F1 per dataset
  (accuracy for yes/no datasets such as StrategyQA);
* the cost table (paper table 3, widened): retrievals and LLM calls per question per dataset,
  plus generated tokens and wall time (and sampled sequences and discarded tokens where any);
* gold-passage recall among everything each run retrieved;
* Plotly charts: answer quality against retrievals per question, and, when an arm's config
  varies inside the evaluation (a threshold sweep), quality and retrievals against that value.

Everything is computed from stored traces by :mod:`explorer.eval.scores`. The charts are
self-contained HTML (plotly.js inline), so a report opens offline.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.csvsafe import safe_row
from explorer.errors import ExplorerError
from explorer.eval.scores import EvaluationScores, primary_score, score_evaluation, varying_params
from explorer.outputs import write_error, write_file

DATASET_TITLES = {"hotpotqa": "HotpotQA", "musique": "MuSiQue", "2wiki": "2WikiMultihopQA", "nq": "NQ",
                  "strategyqa": "StrategyQA", "iirc": "IIRC", "demo": "Demo"}


@dataclass
class Table:
    """A table as rows of cells; ``targets[j]`` is the dataset column ``j`` belongs to (None for the label column)."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    targets: list[str | None] = field(default_factory=list)
    note: str = ""

    def cell_target(self, row: int, col: int) -> tuple[str, str] | None:
        """(arm label, dataset) behind a clicked cell, or None for the label column or out-of-range clicks."""
        if not (0 <= row < len(self.rows)) or not (0 <= col < len(self.targets)):
            return None
        dataset = self.targets[col]
        return (str(self.rows[row][0]), dataset) if dataset else None


def dataset_title(name: str) -> str:
    return DATASET_TITLES.get(name, name)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _per_dataset(scores: EvaluationScores, titles: Callable[[str], Sequence[str]],
                 cells: Callable[[Any, str], list[str]]) -> tuple[list[str], list[str | None], list[list[Any]]]:
    """A methods × datasets table: the columns ``titles(dataset)`` under each dataset (with the dataset
    each column belongs to, for clicks), and one row per method of ``cells(cell, dataset)``."""
    columns: list[str] = ["Method"]
    targets: list[str | None] = [None]
    for d in scores.datasets:
        for title in titles(d):
            columns.append(f"{dataset_title(d)} {title}")
            targets.append(d)
    rows = [[label, *(v for d in scores.datasets for v in cells(scores.cell(label, d), d))] for label in scores.labels]
    return columns, targets, rows


def answer_table(scores: EvaluationScores) -> Table:
    """Paper table 2: EM and F1 per dataset (accuracy for yes/no datasets), methods as rows."""
    def cells(cell: Any, d: str) -> list[str]:
        if scores.has_yes_no(d):
            return [_fmt(cell.means["accuracy"])]
        return [_fmt(cell.means["em"]), _fmt(cell.means["f1"], 4)]

    columns, targets, rows = _per_dataset(scores, lambda d: ("Acc",) if scores.has_yes_no(d) else ("EM", "F1"), cells)
    return Table("Answer quality (EM / F1; accuracy for yes/no)", columns, rows, targets, note=_counts_note(scores))


def cost_table(scores: EvaluationScores) -> Table:
    """Paper table 3, widened: per question retrievals, LLM calls, tokens and seconds per dataset."""
    sampled = any(r.scores["sampled_sequences"] for r in scores.runs)
    discarded = any(r.scores["discarded_tokens"] for r in scores.runs)
    fields_ = [("#Ret", "retrievals", 3), ("#LLM", "llm_calls", 3)]
    if sampled:
        fields_.append(("#Sampled", "sampled_sequences", 2))
    fields_.append(("Tokens", "generated_tokens", 1))
    if discarded:
        fields_.append(("Discarded", "discarded_tokens", 1))
    fields_.append(("Seconds", "wall_time", 2))
    columns, targets, rows = _per_dataset(scores, lambda d: [title for title, _, _ in fields_],
                                          lambda cell, d: [_fmt(cell.means[key], digits) for _, key, digits in fields_])
    return Table("Cost per question (retrievals, LLM calls, generated tokens, wall time)", columns, rows, targets)


def recall_table(scores: EvaluationScores) -> Table:
    """Gold-passage recall over the passages given to the model (and how many), beside recall over
    everything the run retrieved (and how many): a method that retrieves many candidates but gives
    the model few is credited only for the few in the first pair of columns."""
    columns, targets, rows = _per_dataset(
        scores, lambda d: ("Recall (given)", "Given", "Recall (retrieved)", "Retrieved"),
        lambda cell, d: [_fmt(cell.means.get("given_recall")), _fmt(cell.means.get("given_passages"), 1),
                         _fmt(cell.means["passage_recall"]), _fmt(cell.means["retrieved_passages"], 1)])
    return Table("Gold passage recall (over the passages given to the model, and over all retrieved)", columns, rows,
                 targets, note="Given: passages placed in the prompt of a generation that writes the answer (not "
                               "those only judged, filtered or used to re-rank). Retrieved: every passage any "
                               "retrieval of the run returned. Recall is averaged over questions that have gold "
                               "passages; '–' where none do.")


def _counts_note(scores: EvaluationScores) -> str:
    parts = []
    for d in scores.datasets:
        ns = sorted({scores.cell(label, d).n for label in scores.labels})
        errors = sum(scores.cell(label, d).errors for label in scores.labels)
        count = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        parts.append(f"{dataset_title(d)}: {count} questions per method" + (f", {errors} failed runs" if errors
                                                                             else ""))
    return "; ".join(parts) + ". Failed runs count as wrong answers."


def per_question_rows(scores: EvaluationScores, label: str, dataset: str) -> list[dict[str, Any]]:
    """The runs behind one table cell, one dict per question, in question order."""
    out = []
    for r in scores.runs_of(label, dataset):
        s = r.scores
        out.append({"run_id": r.run_id, "question_id": r.question_id, "question": r.question, "answer": r.answer,
                    "gold": " | ".join(r.gold_answers), "status": r.status, "em": s["em"], "f1": s["f1"],
                    "accuracy": s["accuracy"], "passage_recall": s["passage_recall"],
                    "retrievals": s["retrievals"], "llm_calls": s["llm_calls"], "wall_time": s["wall_time"]})
    return out


# --- text formats ---------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", "| " + " | ".join(_md_cell(c) for c in table.columns) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(table.columns) - 1)) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines)


def retriever_text(config: dict[str, Any] | None) -> str:
    """``bm25``, ``dense (all-MiniLM-L6-v2, index auto)``, ``hybrid (..., rrf_k=60, weights 1/1)``."""
    config = dict(config or {"kind": "bm25"})
    kind = str(config.get("kind", "bm25"))
    if kind == "bm25":
        return "bm25"
    embedder = config.get("embedder", "embedded")
    bits = [("all-MiniLM-L6-v2" if embedder == "embedded" else str(embedder)), f"index {config.get('index', 'auto')}"]
    if kind == "hybrid":
        bits.append(f"rrf_k={config.get('rrf_k')}, weights {config.get('bm25_weight')}/{config.get('dense_weight')}")
    return f"{kind} ({', '.join(bits)})"


def _settings_lines(evaluation: dict[str, Any], scores: EvaluationScores | None = None) -> list[str]:
    """The header: status and questions as the stored runs say (``scores``), then the settings.

    The status and the question counts are the stored runs counted against what the last command
    asked for: a run stopped early or an added source cannot make the header claim runs the store does
    not hold, and runs an earlier, larger request left are named, not counted as missing."""
    s = evaluation.get("settings") or {}
    datasets = s.get("datasets") or {}
    coverage = Coverage.of(s, scores) if scores is not None else None
    status = coverage.status(str(evaluation.get("status"))) if coverage is not None else evaluation.get("status")
    lines = [f"- status: {status}, started {evaluation.get('created_at')}",
             f"- model: {s.get('model')} ({s.get('dtype')}, {s.get('device')}); corpus: {s.get('corpus')}; "
             f"retriever: {retriever_text(s.get('retriever'))}; seed: {s.get('seed')}"]
    if datasets:
        lines.append("- questions: " + "; ".join(_dataset_text(d, v or {}, coverage) for d, v in datasets.items()))
    arms = s.get("arms") or []
    if arms:
        described = []
        for arm in arms:
            changed = _non_default(arm.get("method", ""), arm.get("config") or {}, arm.get("set"))
            text = f"{arm.get('method')} ({arm.get('variant')})"
            described.append(text + (f": {changed}" if changed else ""))
        lines.append("- methods: " + "; ".join(described))
    if s.get("sweep"):
        sw = s["sweep"]
        lines.append(f"- sweep: {sw.get('method')} {sw.get('param')} over {sw.get('values')}")
    produced = produced_line(evaluation)
    if produced:
        lines.append(f"- {produced}")
    return lines


@dataclass
class Coverage:
    """What the stored runs cover, per dataset: how many questions have a run of every arm (method,
    variant and config), how many of only some, and how many the evaluation was asked for."""

    arms: list[tuple[str, str, str | None]]  # (method, variant, config key or None for arms stored without one)
    asked: dict[str, int | None]
    full: dict[str, int] = field(default_factory=dict)
    partial: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    failed: int = 0

    @classmethod
    def of(cls, settings: dict[str, Any], scores: EvaluationScores) -> Coverage:
        arms = [(str(a.get("method")), str(a.get("variant")),
                 json.dumps(a["config"], sort_keys=True) if isinstance(a.get("config"), dict) else None)
                for a in settings.get("arms") or []]
        asked = {d: _asked(v or {}) for d, v in (settings.get("datasets") or {}).items()}
        cover = cls(arms=arms, asked=asked)
        per_question: dict[tuple[str, str], set[int]] = {}
        for r in scores.runs:
            matched = [i for i, (m, v, key) in enumerate(arms)
                       if (m, v) == (r.method, r.variant) and (key is None or key == r.config_key)]
            if not matched:
                continue
            cover.runs += 1
            cover.failed += r.status != "complete"
            per_question.setdefault((r.dataset, r.question_id), set()).update(matched)
        for (dataset, _), found in per_question.items():
            target = cover.full if len(found) == len(arms) else cover.partial
            target[dataset] = target.get(dataset, 0) + 1
        return cover

    @property
    def expected(self) -> int | None:
        """Runs the evaluation was asked for (None when a dataset's question count was not recorded)."""
        if any(n is None for n in self.asked.values()):
            return None
        return sum(n or 0 for n in self.asked.values()) * len(self.arms)

    def status(self, stored: str) -> str:
        """``complete`` only when every asked run is stored; otherwise how far the runs got."""
        failed = f", {self.failed} of them failed" if self.failed else ""
        expected = self.expected
        if expected is not None and self.runs >= expected and stored != "running":
            return "complete" + (f" ({self.runs} runs{failed})" if self.failed else "")
        held = f"{self.runs} of {expected} runs stored" if expected is not None else f"{self.runs} runs stored"
        how = "running" if stored == "running" else "incomplete"
        tail = "" if stored in ("running", "complete") else f"; the last command ended {stored}"
        return f"{how}: {held}{failed}{tail}; the same command resumes it"


def _asked(info: dict[str, Any]) -> int | None:
    """How many questions of a dataset the evaluation's last command asked for."""
    if isinstance(info.get("asked"), int):
        return info["asked"]
    return info.get("limit") if isinstance(info.get("limit"), int) else None


def produced_line(evaluation: dict[str, Any]) -> str:
    """``produced by: 2 Ray workers (...) on 1 device (...): 40 runs``, from the evaluation's executions."""
    from explorer.eval.execution import produced_by

    text = produced_by((evaluation.get("settings") or {}).get("executions") or [])
    return f"produced by: {text}" if text else ""


def _dataset_text(name: str, info: dict[str, Any], coverage: Coverage | None = None) -> str:
    """``HotpotQA: 6 of the first 15 questions run by every method, from /data/dev.json (HotpotQA format)``.

    With ``coverage`` the counts are those of the stored runs; without it, the request alone."""
    from explorer.eval.question_formats import FORMAT_TITLES

    asked = _asked(info)
    if coverage is None:
        count = f"first {asked}" if asked is not None else "all"
    else:
        full, partial = coverage.full.get(name, 0), coverage.partial.get(name, 0)
        some = f" (and {partial} more by some methods)" if partial else ""
        if asked is not None and full >= asked:
            count = (f"all {asked} questions" if info.get("limit") is None else f"the first {asked} questions") + \
                ", run by every method"
            more = full - asked + partial
            if more:
                count += f" (and {more} more stored from an earlier, larger request, counted in the tables)"
        elif asked is not None:
            count = (f"{full} of the first {asked} questions run by every method" if full or partial
                     else f"none of the first {asked} questions run yet") + some
        else:
            count = f"{full} questions run by every method{some}"
    if info.get("skipped"):
        count += f" ({info['skipped']} record(s) without an answer left out)"
    if not info.get("file"):
        return f"{dataset_title(name)}: {count}"
    fmt = FORMAT_TITLES.get(info.get("format"), info.get("format"))
    how = f"{fmt} format" + (", detected" if info.get("format_detected") else "")
    joiner = " of" if coverage is None else ", from"
    return f"{dataset_title(name)}: {count}{joiner} {info['file']} ({how})"


def sources_line(store: Any, name: str, scores: EvaluationScores | None = None) -> str:
    """One line naming every dataset of an evaluation, its file and what its stored runs cover (what ``eval``
    prints above its tables)."""
    evaluation = store.evaluation(name) or {}
    settings = evaluation.get("settings") or {}
    datasets = settings.get("datasets") or {}
    coverage = Coverage.of(settings, scores) if scores is not None else None
    return ("Questions: " + "; ".join(_dataset_text(d, v or {}, coverage) for d, v in datasets.items())
            if datasets else "")


def _non_default(method: str, config: dict[str, Any], given: dict[str, Any] | None = None) -> str:
    """The config values that differ from the method's defaults; those the user did not set came from a preset."""
    try:
        from explorer.methods.base import make_config

        defaults = make_config(method, {}).to_dict()
    except Exception:  # a method this checkout does not have: show nothing rather than fail the report
        return ""
    parts = []
    for k, v in sorted(config.items()):
        if defaults.get(k) != v:
            preset = given is not None and k not in given
            parts.append(f"{k}={v}" + (" (model preset)" if preset else ""))
    return ", ".join(parts)


def _require(store: Any, name: str) -> dict[str, Any]:
    evaluation = store.evaluation(name)
    if evaluation is None:
        names = [e["name"] for e in store.evaluations()]
        raise ExplorerError(f"no evaluation named {name!r}", where=str(store.path),
                            fix=f"use one of: {', '.join(names)}" if names else "run `python -m explorer eval` first")
    return evaluation


def report_markdown(store: Any, name: str, scores: EvaluationScores | None = None) -> str:
    """The evaluation's full markdown report: settings, answer, cost and recall tables."""
    evaluation = _require(store, name)
    scores = scores or score_evaluation(store, name)
    parts = [f"## Evaluation `{name}`", "", *_settings_lines(evaluation, scores), ""]
    if not scores.runs:
        parts.append("No runs stored yet.")
        return "\n".join(parts) + "\n"
    for table in (answer_table(scores), cost_table(scores), recall_table(scores)):
        parts += [table_markdown(table), ""]
    return "\n".join(parts).rstrip() + "\n"


def summary_markdown(store: Any, name: str) -> str:
    """The answer and cost tables only (what ``eval`` prints when it ends)."""
    scores = score_evaluation(store, name)
    if not scores.runs:
        return f"evaluation {name!r} has no runs"
    head = [line for line in (sources_line(store, name, scores), _produced(store, name)) if line]
    return "\n\n".join(head + [table_markdown(t) for t in (answer_table(scores), cost_table(scores))])


def _produced(store: Any, name: str) -> str:
    text = produced_line(store.evaluation(name) or {})
    return text[:1].upper() + text[1:]


def summary_csv(scores: EvaluationScores) -> str:
    """One line per (method, dataset) cell with every mean: the machine-readable form of the tables."""
    from explorer.eval.scores import ANSWER_METRICS, COST_METRICS

    names = [*ANSWER_METRICS, "passage_recall", "retrieved_passages", *COST_METRICS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["method", "dataset", "n", "failed", *names])
    for label in scores.labels:
        for d in scores.datasets:
            cell = scores.cell(label, d)
            if cell.n:
                writer.writerow(safe_row([label, d, cell.n, cell.errors,
                                          *("" if cell.means[k] is None else f"{cell.means[k]:.6g}" for k in names)]))
    return out.getvalue()


def questions_csv(scores: EvaluationScores) -> str:
    """One line per run: the per-question metrics behind every cell."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = ["em", "f1", "precision", "recall", "accuracy", "passage_recall", "retrievals", "llm_calls",
            "sampled_sequences", "generated_tokens", "discarded_tokens", "wall_time"]
    writer.writerow(["run_id", "method", "dataset", "question_id", "status", "answer", "gold", *keys])
    for r in scores.runs:
        writer.writerow(safe_row([r.run_id, r.label, r.dataset, r.question_id, r.status, r.answer or "",
                                  json.dumps(r.gold_answers, ensure_ascii=False),
                                  *("" if r.scores[k] is None else f"{r.scores[k]:.6g}" for k in keys)]))
    return out.getvalue()


# --- charts ---------------------------------------------------------------------------------------


def _score_name(scores: EvaluationScores, dataset: str) -> str:
    return "accuracy" if scores.has_yes_no(dataset) else "F1"


def accuracy_figure(scores: EvaluationScores):
    """Answer quality (F1; accuracy for yes/no) against retrievals per question: a point per method and dataset."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    datasets = scores.datasets or [""]
    fig = make_subplots(rows=1, cols=len(datasets), subplot_titles=[html.escape(dataset_title(d)) for d in datasets],
                        horizontal_spacing=0.08)
    palette = _palette(scores.labels)
    for col, d in enumerate(datasets, start=1):
        for label in scores.labels:
            cell = scores.cell(label, d)
            if not cell.n:
                continue
            y = cell.means["accuracy"] if scores.has_yes_no(d) else cell.means["f1"]
            fig.add_trace(go.Scatter(
                x=[cell.means["retrievals"]], y=[y], mode="markers+text", text=[html.escape(label)],
                textposition="top center", name=html.escape(label), legendgroup=label, showlegend=col == 1,
                marker={"size": 12, "color": palette[label]}, cliponaxis=False,
                hovertemplate=(f"{html.escape(label)}<br>retrievals/question %{{x:.2f}}<br>"
                               f"{_score_name(scores, d)} %{{y:.3f}}<br>EM {_fmt(cell.means['em'])}"
                               f"<br>n {cell.n}<extra></extra>")), row=1, col=col)
        fig.update_xaxes(title_text="retrievals per question", row=1, col=col, rangemode="tozero")
        fig.update_yaxes(title_text=_score_name(scores, d), row=1, col=col, rangemode="tozero")
    fig.update_layout(title="Answer quality against retrievals per question", template="plotly_white",
                      height=460, width=max(520, 460 * len(datasets)))
    return fig


def threshold_arms(scores: EvaluationScores) -> dict[tuple[str, str], str]:
    """(method, variant) -> the numeric config field that varies among its runs (the swept threshold)."""
    out = {}
    for key, params in varying_params(scores.runs).items():
        numeric = [p for p in params if all(isinstance(r.config.get(p), (int, float)) and not
                                            isinstance(r.config.get(p), bool)
                                            for r in scores.runs if (r.method, r.variant) == key)]
        if numeric:
            out[key] = next((p for p in numeric if "threshold" in p), numeric[0])
    return out


def threshold_figure(scores: EvaluationScores):
    """Quality and retrievals per question as the swept value varies; None when nothing in the evaluation varies."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    swept = threshold_arms(scores)
    if not swept:
        return None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=False, vertical_spacing=0.14,
                        subplot_titles=["answer quality", "retrievals per question"])
    for (method, variant), param in swept.items():
        for d in scores.datasets:
            points: dict[float, list] = {}
            for r in scores.runs:
                if (r.method, r.variant) == (method, variant) and r.dataset == d:
                    points.setdefault(float(r.config[param]), []).append(r)
            if not points:
                continue
            xs = sorted(points)
            quality = [_mean_of([primary_score(r.scores) for r in points[x]]) for x in xs]
            retrievals = [_mean_of([r.scores["retrievals"] for r in points[x]]) for x in xs]
            name = html.escape(f"{method}:{variant} {dataset_title(d)}")
            fig.add_trace(go.Scatter(x=xs, y=quality, mode="lines+markers", name=f"{name} {_score_name(scores, d)}",
                                     legendgroup=name), row=1, col=1)
            fig.add_trace(go.Scatter(x=xs, y=retrievals, mode="lines+markers", name=f"{name} retrievals",
                                     legendgroup=name, line={"dash": "dot"}), row=2, col=1)
        fig.update_xaxes(title_text=html.escape(param), row=1, col=1)
        fig.update_xaxes(title_text=html.escape(param), row=2, col=1)
    fig.update_yaxes(title_text="F1 / accuracy", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="retrievals / question", rangemode="tozero", row=2, col=1)
    fig.update_layout(title="Threshold sweep: answer quality and retrievals", template="plotly_white",
                      height=720, width=820)
    return fig


def _mean_of(values: list[Any]) -> float | None:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _palette(labels: list[str]) -> dict[str, str]:
    import plotly.colors

    colours = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.Dark24
    return {label: colours[i % len(colours)] for i, label in enumerate(labels)}


def write_figure(fig: Any, path: Path, option: str = "") -> Path:
    """Self-contained HTML: plotly.js is written inline, so the file opens with no network."""
    return write_file(path, fig.to_html(include_plotlyjs=True, full_html=True), option)


#: The files a report folder receives (the charts only when there are runs, the threshold chart for sweeps).
REPORT_FILES = ("evaluation.md", "summary.csv", "questions.csv", "accuracy_vs_retrievals.html", "threshold.html")


def write_report(store: Any, name: str, out_dir: Path | str, option: str = "--out") -> list[Path]:
    """Write evaluation.md, summary.csv, questions.csv and the charts into ``out_dir``; returns the files.

    Each file is written whole or not at all; a failed write names the file (``option`` says which
    command option chose the folder)."""
    _require(store, name)
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(exc, out, option) from exc
    scores = score_evaluation(store, name)
    written = [write_file(out / "evaluation.md", report_markdown(store, name, scores), option),
               write_file(out / "summary.csv", summary_csv(scores), option),
               write_file(out / "questions.csv", questions_csv(scores), option)]
    if scores.runs:
        written.append(write_figure(accuracy_figure(scores), out / "accuracy_vs_retrievals.html", option))
        fig = threshold_figure(scores)
        if fig is not None:
            written.append(write_figure(fig, out / "threshold.html", option))
    return written
