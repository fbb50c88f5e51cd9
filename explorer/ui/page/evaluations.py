"""The app's Evaluations tab: pick a stored evaluation, read its tables and charts, drill into single cases.

The flow is table -> cell -> question -> trace: clicking a cell (a method on a dataset) lists that
cell's questions with their answers and scores; clicking a question hands its run id to the app's
callback, which opens the trace in the explorer. Everything shown is read from the run store
through :mod:`explorer.eval.scores` and :mod:`explorer.eval.report`, the same code the
``report`` command uses, so the tab and the written report always agree.

The pure functions (``evaluation_choices``, ``load_view``, ``table_frame``, ``cell_from_select``,
``question_list``, ``run_id_at``) hold all the logic and are tested without a browser; the Gradio
wiring in :func:`build_evaluations_tab` only connects them to components.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from explorer.eval.report import (
    Table,
    _settings_lines,
    accuracy_figure,
    answer_table,
    cost_table,
    dataset_title,
    per_question_rows,
    recall_table,
    threshold_figure,
)
from explorer.eval.scores import EvaluationScores, score_evaluation

#: The tab's events are the page's own wiring, not part of the scripting API (see explorer/ui/api/endpoints.py).
PRIVATE: dict[str, Any] = {"api_visibility": "private"}
QUESTION_COLUMNS = ["#", "Question id", "Question", "Answer", "Gold", "EM", "F1", "Acc", "Gold recall",
                    "Retrievals", "LLM calls", "Seconds", "Status"]


@dataclass
class EvaluationView:
    """Everything the tab shows for one evaluation."""

    name: str
    header: str
    scores: EvaluationScores
    answers: Table
    costs: Table
    recall: Table
    accuracy_plot: Any
    threshold_plot: Any | None


_MARKDOWN_SPECIALS = "\\`*_[]#|~"


def _escape(text: Any) -> str:
    """Text for a Markdown component: HTML-escaped, with Markdown's markup characters backslash-escaped."""
    marked = "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in str(text))
    return html.escape(marked, quote=True)


def evaluation_choices(store: Any) -> list[tuple[str, str]]:
    """(shown text, evaluation name) for the picker, newest first, with status and run counts."""
    out = []
    for e in store.evaluations():
        info = store.evaluation(e["name"]) or {}
        counts = info.get("runs") or {}
        total = sum(counts.values())
        failed = total - counts.get("complete", 0)
        shown = f"{e['name']} · {e.get('status')} · {total} runs" + (f" ({failed} failed)" if failed else "")
        out.append((shown, e["name"]))
    return out


def load_view(store: Any, name: str, scores: EvaluationScores | None = None) -> EvaluationView | None:
    """The tables, charts and header of evaluation ``name``; None when the store has no such evaluation."""
    evaluation = store.evaluation(name)
    if evaluation is None:
        return None
    scores = scores or score_evaluation(store, name)
    lines = [f"**Evaluation {_escape(name)}**", "",
             *(f"- {_escape(line[2:])}" for line in _settings_lines(evaluation, scores))]
    if not scores.runs:
        lines += ["", "No runs stored yet."]
    else:
        lines += ["", "Click a cell of a table to list its questions; click a question to open its trace."]
    return EvaluationView(name=name, header="\n".join(lines), scores=scores, answers=answer_table(scores),
                          costs=cost_table(scores), recall=recall_table(scores),
                          accuracy_plot=accuracy_figure(scores) if scores.runs else None,
                          threshold_plot=threshold_figure(scores) if scores.runs else None)


def table_frame(table: Table):
    """A table as the pandas DataFrame a ``gr.Dataframe`` shows (cells as plain strings, never HTML)."""
    import pandas as pd

    return pd.DataFrame([[str(c) for c in row] for row in table.rows], columns=table.columns)


def cell_from_select(table: Table, index: Any) -> tuple[str, str] | None:
    """The (arm label, dataset) of a clicked cell from a select event's ``index`` ([row, col]); None otherwise."""
    if not isinstance(index, (list, tuple)) or len(index) != 2:
        return None
    try:
        row, col = int(index[0]), int(index[1])
    except (TypeError, ValueError):
        return None
    return table.cell_target(row, col)


def _num(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def question_list(scores: EvaluationScores, label: str, dataset: str) -> tuple[list[list[str]], list[str]]:
    """The rows of one cell's per-question list, and the run id behind each row (same order)."""
    rows, run_ids = [], []
    for i, r in enumerate(per_question_rows(scores, label, dataset), start=1):
        rows.append([str(i), r["question_id"], r["question"], r["answer"] or "", r["gold"], _num(r["em"], 0),
                     _num(r["f1"], 3), _num(r["accuracy"], 0), _num(r["passage_recall"], 2), str(r["retrievals"]),
                     str(r["llm_calls"]), _num(r["wall_time"], 1), r["status"]])
        run_ids.append(r["run_id"])
    return rows, run_ids


def cell_caption(label: str, dataset: str, count: int) -> str:
    return f"**{_escape(label)}** on **{_escape(dataset_title(dataset))}**: {count} questions"


def run_id_at(run_ids: Sequence[str], index: Any) -> str | None:
    """The run id of a clicked question row (``index`` is [row, col] or a row number)."""
    if isinstance(index, (list, tuple)):
        index = index[0] if index else None
    try:
        row = int(index)
    except (TypeError, ValueError):
        return None
    return run_ids[row] if 0 <= row < len(run_ids) else None


@dataclass
class EvaluationsTab:
    """The tab's components, for an app that wants to wire more events to them."""

    picker: Any
    refresh: Any
    header: Any
    answers: Any
    costs: Any
    recall: Any
    accuracy_plot: Any
    threshold_plot: Any
    cell_caption: Any
    questions: Any
    run_id: Any
    #: The listed questions' run ids (a ``gr.State``), in the order of ``questions``.
    run_ids: Any = None
    #: ``reload(picker_value)`` re-reads the store; wire it to the page's load event to show fresh runs:
    #: ``demo.load(tab.reload, inputs=tab.picker, outputs=tab.reload_outputs)``.
    reload: Callable[..., Any] | None = None
    reload_outputs: list[Any] = field(default_factory=list)

    @property
    def shown(self) -> list[Any]:
        """What showing an evaluation fills, in :func:`_shower`'s order."""
        return [self.header, self.answers, self.costs, self.recall, self.accuracy_plot, self.threshold_plot,
                self.cell_caption, self.questions, self.run_ids]


def build_evaluations_tab(store: Any | Callable[[], Any], open_run: Callable[[str], Any] | None = None, *,
                          open_outputs: Sequence[Any] | None = None) -> EvaluationsTab:
    """Build the Evaluations tab's components inside the caller's current Gradio context.

    Call it inside ``with gr.Tab("Evaluations"):`` (or any ``gr.Blocks`` context)::

        tab = build_evaluations_tab(store, open_run, open_outputs=[trace_view, tabs])

    Args:
        store: the :class:`~explorer.store.RunStore` to read, or a zero-argument callable returning
            it (so the app can switch databases without rebuilding the tab).
        open_run: called with a run id when the user clicks a question in a cell's list. Its return
            value is sent to ``open_outputs`` (one value per component, a tuple when there are
            several), so it can render the trace and select the explorer's tab.
        open_outputs: the app's components that ``open_run``'s return value updates; None or empty
            when the callback returns nothing to show.

    Returns:
        :class:`EvaluationsTab` with the components; ``run_id`` is a read-only textbox holding the
        last opened run id, whose ``.change`` event an app may use instead of the callback.
    """
    views = EvaluationViews(store if callable(store) and not hasattr(store, "evaluations") else (lambda: store))
    choices = evaluation_choices(views.store())
    parts = _layout(choices, views.of(choices[0][1]) if choices else None)
    show = _shower(views)
    shown = parts.shown
    parts.picker.change(show, inputs=parts.picker, outputs=shown, **PRIVATE)

    def reload(name: str | None):
        views.clear()
        fresh = evaluation_choices(views.store())
        names = [v for _, v in fresh]
        chosen = name if name in names else (names[0] if names else None)
        return (gr.update(choices=fresh, value=chosen), *show(chosen))

    parts.refresh.click(reload, inputs=parts.picker, outputs=[parts.picker, *shown], **PRIVATE)
    for which in ("answers", "costs", "recall"):
        getattr(parts, which).select(_cell_picker(views, which), inputs=parts.picker,
                                     outputs=[parts.cell_caption, parts.questions, parts.run_ids], **PRIVATE)
    outputs_extra = list(open_outputs or [])
    parts.questions.select(_question_picker(open_run, len(outputs_extra)), inputs=parts.run_ids,
                           outputs=[parts.run_id, *outputs_extra], **PRIVATE)
    parts.reload, parts.reload_outputs = reload, [parts.picker, *shown]
    return parts


class EvaluationViews:
    """Loaded evaluation views, reloaded when the evaluation's runs or status change."""

    def __init__(self, store: Callable[[], Any]) -> None:
        self.store = store
        self._cache: dict[str, tuple[tuple, EvaluationView]] = {}

    def clear(self) -> None:
        self._cache.clear()

    def of(self, name: str | None) -> EvaluationView | None:
        if not name:
            return None
        s = self.store()
        info = s.evaluation(name)
        if info is None:
            return None
        stamp = (str(s.path), tuple(sorted(info["runs"].items())), info.get("status"))
        cached = self._cache.get(name)
        if cached is None or cached[0] != stamp:
            view = load_view(s, name)
            if view is None:
                return None
            self._cache[name] = (stamp, view)
        return self._cache[name][1]


def _layout(choices: list[tuple[str, str]], first: EvaluationView | None) -> EvaluationsTab:
    with gr.Row():
        picker = gr.Dropdown(choices=choices, value=choices[0][1] if choices else None, label="Evaluation",
                             scale=4, interactive=True, elem_id="eval-pick")
        refresh = gr.Button("Refresh", scale=1, elem_id="eval-refresh")
    header = gr.Markdown(first.header if first else "No evaluations stored yet: run `python -m explorer eval ...`.",
                         sanitize_html=True)
    # A table with nothing to show is hidden, not drawn with placeholder columns.
    shown = first is not None and bool(first.scores.runs)
    answers = gr.Dataframe(table_frame(first.answers) if shown else None, label="Answer quality (click a cell)",
                           interactive=False, datatype="str", wrap=True, elem_id="eval-answers", visible=shown)
    costs = gr.Dataframe(table_frame(first.costs) if shown else None, label="Cost per question (click a cell)",
                         interactive=False, datatype="str", wrap=True, visible=shown)
    recall = gr.Dataframe(table_frame(first.recall) if shown else None, label="Gold passage recall (click a cell)",
                          interactive=False, datatype="str", wrap=True, visible=shown)
    with gr.Row():
        accuracy_plot = gr.Plot(first.accuracy_plot if first else None, label="Answer quality against retrievals",
                                visible=bool(first and first.accuracy_plot is not None))
        threshold_plot = gr.Plot(first.threshold_plot if first else None, label="Threshold sweep",
                                 visible=bool(first and first.threshold_plot is not None))
    caption = gr.Markdown(sanitize_html=True)
    questions = gr.Dataframe(headers=QUESTION_COLUMNS, label="Questions (click one to open its trace)",
                             interactive=False, datatype="str", wrap=True, elem_id="eval-questions", visible=False)
    run_ids = gr.State([])
    run_id = gr.Textbox(label="Opened run", interactive=False, elem_id="eval-run-id")
    return EvaluationsTab(picker=picker, refresh=refresh, header=header, answers=answers, costs=costs, recall=recall,
                          accuracy_plot=accuracy_plot, threshold_plot=threshold_plot, cell_caption=caption,
                          questions=questions, run_id=run_id, run_ids=run_ids)


def _shower(views: EvaluationViews) -> Callable[[str | None], tuple]:
    """An evaluation's header, tables and plots (and an empty question list) for the picker."""
    def show(name: str | None) -> tuple:
        view = views.of(name)
        hidden = gr.update(value=None, visible=False)
        no_questions = gr.update(value=table_frame(Table("", QUESTION_COLUMNS, [])), visible=False)
        if view is None:
            message = "No evaluations stored yet: run `python -m explorer eval ...`." if not name else \
                f"No evaluation named {_escape(name)}."
            return (message, hidden, hidden, hidden, hidden, hidden, "", no_questions, [])
        if not view.scores.runs:
            return (view.header, hidden, hidden, hidden, hidden, hidden, "", no_questions, [])

        def table(t: Table) -> Any:
            return gr.update(value=table_frame(t), visible=True)

        return (view.header, table(view.answers), table(view.costs), table(view.recall),
                gr.update(value=view.accuracy_plot, visible=view.accuracy_plot is not None),
                gr.update(value=view.threshold_plot, visible=view.threshold_plot is not None),
                "", no_questions, [])

    return show


def _cell_picker(views: EvaluationViews, which: str) -> Callable[..., tuple]:
    """A click on a cell of table ``which`` lists that method's questions in that column."""
    def handler(name: str | None, evt: gr.SelectData) -> tuple:
        view = views.of(name)
        if view is None:
            return gr.update(), gr.update(), gr.update()
        target = cell_from_select(getattr(view, which), evt.index)
        if target is None:
            return gr.update(), gr.update(), gr.update()
        rows, ids = question_list(view.scores, *target)
        return (cell_caption(target[0], target[1], len(rows)),
                gr.update(value=table_frame(Table("", QUESTION_COLUMNS, rows)), visible=True), ids)

    return handler


def _question_picker(open_run: Callable[[str], Any] | None, extra: int) -> Callable[..., Any]:
    """A click on a listed question gives its run id (and ``open_run``'s values for ``extra`` outputs)."""
    def pick_question(ids: list[str], evt: gr.SelectData) -> Any:
        chosen = run_id_at(ids, evt.index)
        if not extra:  # a single output takes the bare value (a 1-tuple would arrive as its repr)
            return gr.update() if chosen is None else chosen
        if chosen is None:
            return (gr.update(), *(gr.update() for _ in range(extra)))
        result = open_run(chosen) if open_run is not None else None
        values = result if extra > 1 else (result,)
        return (chosen, *values)

    return pick_question
