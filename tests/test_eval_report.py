"""The report of a small stored evaluation: the paper's table layout, the CSVs, the charts, and the command."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from eval_helpers import make_trace, small_evaluation, store_evaluation

from explorer.cli import main
from explorer.eval.report import (
    answer_table,
    cost_table,
    questions_csv,
    recall_table,
    report_markdown,
    summary_csv,
    threshold_figure,
    write_report,
)
from explorer.eval.scores import score_evaluation
from explorer.store import RunStore


@pytest.fixture()
def store(tmp_db: Path) -> RunStore:
    s = RunStore(tmp_db)
    store_evaluation(s, "small", small_evaluation())
    return s


def test_answer_table_has_methods_as_rows_and_datasets_as_columns(store: RunStore) -> None:
    table = answer_table(score_evaluation(store, "small"))
    assert table.columns == ["Method", "HotpotQA EM", "HotpotQA F1", "StrategyQA Acc"]
    assert table.rows == [["wo", "0.000", "0.0000", "0.000"], ["sr", "0.500", "0.9000", "1.000"]]
    assert table.cell_target(1, 2) == ("sr", "hotpotqa")
    assert table.cell_target(0, 3) == ("wo", "strategyqa")
    assert table.cell_target(0, 0) is None and table.cell_target(5, 1) is None
    assert "HotpotQA: 2 questions per method, 1 failed runs" in table.note


def test_cost_and_recall_tables(store: RunStore) -> None:
    scores = score_evaluation(store, "small")
    costs = cost_table(scores)
    assert costs.columns[:5] == ["Method", "HotpotQA #Ret", "HotpotQA #LLM", "HotpotQA Tokens", "HotpotQA Seconds"]
    assert "Discarded" not in " ".join(costs.columns)  # no run discarded anything
    assert costs.rows[1][:5] == ["sr", "1.000", "2.000", "25.0", "3.00"]
    assert costs.rows[0][:5] == ["wo", "0.000", "1.000", "6.0", "0.75"]
    recall = recall_table(scores)
    # Given (passages in an answer prompt; these hand-made traces have no prompt), then all retrieved.
    assert recall.rows[1] == ["sr", "0.000", "0.0", "0.750", "3.0", "–", "0.0", "–", "1.0"]


def test_markdown_report_layout(store: RunStore) -> None:
    text = report_markdown(store, "small")
    lines = text.splitlines()
    assert lines[0] == "## Evaluation `small`"
    start = lines.index("### Answer quality (EM / F1; accuracy for yes/no)")
    assert lines[start + 2:start + 6] == [
        "| Method | HotpotQA EM | HotpotQA F1 | StrategyQA Acc |",
        "|---|---:|---:|---:|",
        "| wo | 0.000 | 0.0000 | 0.000 |",
        "| sr | 0.500 | 0.9000 | 1.000 |",
    ]
    assert "### Cost per question" in text and "### Gold passage recall" in text


def test_csvs_hold_every_cell_and_run(store: RunStore) -> None:
    scores = score_evaluation(store, "small")
    rows = list(csv.DictReader(io.StringIO(summary_csv(scores))))
    assert [(r["method"], r["dataset"]) for r in rows] == [("wo", "hotpotqa"), ("wo", "strategyqa"),
                                                           ("sr", "hotpotqa"), ("sr", "strategyqa")]
    assert rows[2]["f1"] == "0.9" and rows[0]["failed"] == "1" and rows[1]["em"] == ""
    runs = list(csv.DictReader(io.StringIO(questions_csv(scores))))
    assert len(runs) == 6 and {r["status"] for r in runs} == {"complete", "error"}


def test_written_charts_are_self_contained(store: RunStore, tmp_path: Path) -> None:
    files = {p.name: p for p in write_report(store, "small", tmp_path / "out")}
    assert set(files) == {"evaluation.md", "summary.csv", "questions.csv", "accuracy_vs_retrievals.html"}
    page = files["accuracy_vs_retrievals.html"].read_text(encoding="utf-8")
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts and all("src=" not in tag for tag in scripts)  # nothing loaded from a network
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js is inline


def test_threshold_chart_only_when_a_threshold_varies(tmp_db: Path, tmp_path: Path) -> None:
    store = RunStore(tmp_db)
    traces = [make_trace("dragin", "Paris" if th < 1 else "Lyon", ["Paris"], qid=str(q),
                         config={"threshold": th}, hits=[["a#0"]] * (2 if th < 1 else 1))
              for q in range(2) for th in (0.5, 2.0)]
    store_evaluation(store, "sweep", traces)
    scores = score_evaluation(store, "sweep")
    fig = threshold_figure(scores)
    quality, retrievals = fig.data[0], fig.data[1]
    assert list(quality.x) == [0.5, 2.0] and list(quality.y) == [1.0, 0.0]
    assert list(retrievals.y) == [2.0, 1.0]
    names = {p.name for p in write_report(store, "sweep", tmp_path / "r")}
    assert "threshold.html" in names
    assert threshold_figure(score_evaluation(store, "sweep").__class__(runs=[], labels=[], datasets=[])) is None


def test_report_command(store: RunStore, tmp_path: Path, capsys) -> None:
    assert main(["report", "--db", str(store.path)]) == 0
    assert "small  complete" in capsys.readouterr().out
    assert main(["report", "--db", str(store.path), "--name", "small", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "evaluation.md").read_text(encoding="utf-8") == report_markdown(store, "small")
    assert main(["report", "--db", str(store.path), "--name", "nope"]) == 1
    assert "no evaluation named 'nope'" in capsys.readouterr().err
