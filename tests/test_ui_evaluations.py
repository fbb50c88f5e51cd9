"""The Evaluations tab's data functions read what the store holds: picker, tables, cell -> questions -> run id."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest
from eval_helpers import make_trace, small_evaluation, store_evaluation

from explorer.store import RunStore
from explorer.ui.page.evaluations import (
    _escape,
    build_evaluations_tab,
    cell_from_select,
    evaluation_choices,
    load_view,
    question_list,
    run_id_at,
    table_frame,
)


@pytest.fixture()
def store(tmp_db: Path) -> RunStore:
    s = RunStore(tmp_db)
    store_evaluation(s, "small", small_evaluation())
    return s


def test_picker_lists_evaluations_with_status_and_failures(store: RunStore) -> None:
    store.start_evaluation("empty", {})
    choices = dict((value, shown) for shown, value in evaluation_choices(store))
    assert choices["small"] == "small · complete · 6 runs (1 failed)"
    assert choices["empty"] == "empty · running · 0 runs"


def test_view_tables_and_frames(store: RunStore) -> None:
    view = load_view(store, "small")
    assert view is not None and load_view(store, "missing") is None
    frame = table_frame(view.answers)
    assert list(frame.columns) == ["Method", "HotpotQA EM", "HotpotQA F1", "StrategyQA Acc"]
    assert frame.values.tolist() == [["wo", "0.000", "0.0000", "0.000"], ["sr", "0.500", "0.9000", "1.000"]]
    assert view.accuracy_plot is not None and view.threshold_plot is None
    assert "Evaluation small" in view.header


def test_clicked_cell_lists_its_questions_and_each_row_gives_its_run(store: RunStore) -> None:
    view = load_view(store, "small")
    target = cell_from_select(view.answers, [1, 1])  # the sr row, HotpotQA EM column
    assert target == ("sr", "hotpotqa")
    assert cell_from_select(view.answers, [1, 0]) is None  # the method name column
    assert cell_from_select(view.costs, (0, 2)) == ("wo", "hotpotqa")
    assert cell_from_select(view.answers, 3) is None
    rows, ids = question_list(view.scores, *target)
    assert [r[1] for r in rows] == ["q1", "q2"]
    assert rows[1][3:7] == ["New York City", "Big Apple | New York", "0", "0.800"]
    for row, run_id in zip(rows, ids, strict=True):
        trace = store.get(run_id)
        assert trace.gold["id"] == row[1] and trace.method == "sr"
    assert run_id_at(ids, [1, 4]) == ids[1] and run_id_at(ids, 0) == ids[0]
    assert run_id_at(ids, [7, 0]) is None and run_id_at(ids, None) is None


def test_failed_runs_show_in_the_list(store: RunStore) -> None:
    rows, _ = question_list(load_view(store, "small").scores, "wo", "hotpotqa")
    assert [r[-1] for r in rows] == ["complete", "error"]


def test_text_from_models_is_escaped(tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    store_evaluation(store, "<img src=x onerror=alert(1)>", [make_trace("wo", "<b>x</b>", ["y"])])
    view = load_view(store, "<img src=x onerror=alert(1)>")
    assert "<img" not in view.header and "&lt;img src=x onerror=alert(1)&gt;" in view.header
    assert _escape("*a* [l](u) `c` <s>") == "\\*a\\* \\[l\\](u) \\`c\\` &lt;s&gt;"


def test_the_tab_builds_inside_a_blocks_context(store: RunStore) -> None:
    opened: list[str] = []
    with gr.Blocks():
        target = gr.Textbox()
        tab = build_evaluations_tab(lambda: store, lambda run_id: opened.append(run_id) or f"opened {run_id}",
                                    open_outputs=[target])
    assert tab.picker.value == "small"
    assert tab.threshold_plot.visible is False
    assert tab.reload_outputs[0] is tab.picker
    update, header, *_ = tab.reload("small")
    assert update["value"] == "small" and "Evaluation small" in header
