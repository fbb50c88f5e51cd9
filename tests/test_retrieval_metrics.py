"""The retrieval-metrics command: scores, the pooled corpus, DR-RAG traces without a model, the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.eval.retrieval_metrics import (
    DATASETS,
    Row,
    drrag_trace,
    exact_paragraphs,
    load_items,
    measure,
    paragraph_precision,
    pooled_corpus,
    render_markdown,
    selected,
)


def test_paragraph_scores() -> None:
    gold = ["aaa", "bbb#2"]
    assert paragraph_precision(gold, ["aaa", "ccc"]) == 0.5
    assert paragraph_precision(gold, ["bbb#1", "aaa"]) == 1.0  # another piece of a gold paragraph counts
    assert paragraph_precision(gold, []) == 0.0
    assert exact_paragraphs(gold, ["bbb#1", "aaa", "aaa"]) == 1.0
    assert exact_paragraphs(gold, ["aaa"]) == 0.0
    assert exact_paragraphs(gold, ["aaa", "bbb", "ccc"]) == 0.0
    row = Row()
    row.add(gold, ["aaa", "ccc"], ["aaa", "ccc", "bbb#1", "ddd"], pairs=3.0)
    row.add(gold, [], pairs=1.0)
    assert row.mean("recall") == 0.25 and row.mean("precision") == 0.25 and row.mean("kept") == 1.0
    assert row.mean("pairs") == 2.0 and row.n == 2
    # honest recall: what was given (0.5, 0) against everything retrieved on the way (1.0, 0)
    assert row.mean("candidate_recall") == 0.5 and row.mean("candidates") == 2.0


def test_pooled_corpus_holds_every_gold_paragraph(shared_data: Path) -> None:
    retriever = pooled_corpus(shared_data)
    items = load_items(shared_data, retriever)  # raises if a gold id were missing
    assert {i.dataset for i in items} == {"hotpotqa", "musique"} and len(items) == 200
    assert 2_500 < len(retriever) < 5_000
    hits = retriever.search(items[0].question, 5)
    assert len(hits) == 5


def test_drrag_trace_stops_at_the_selection(shared_data: Path) -> None:
    retriever = pooled_corpus(shared_data)
    item = load_items(shared_data, retriever, limit=1)[0]
    trace = drrag_trace(retriever, item.question, "qdc", 4)
    trace.validate()
    assert not trace.of_kind("generation") and not trace.of_kind("answer")
    ids = selected(trace)
    assert len(ids) == 4 and ids[:2] == [h.passage.id for h in retriever.search(item.question, 2)]
    assert trace.costs.retrievals == 3 and trace.costs.llm_calls == 0


def _first_questions(shared_data: Path, folder: Path, n: int) -> Path:
    """A data folder holding the first ``n`` questions of each default file (so the pool, and the
    passages the dense retriever embeds, stay small), laid out as the benchmark data is."""
    import json

    from explorer.eval.datasets import DEFAULT_FILES

    for name in DATASETS:
        source, target = shared_data / DEFAULT_FILES[name], folder / DEFAULT_FILES[name]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(json.loads(source.read_text(encoding="utf-8"))[:n]), encoding="utf-8")
    return folder


def test_measure_and_report_without_the_model(shared_data: Path, tmp_path: Path) -> None:
    data = _first_questions(shared_data, tmp_path, 12)
    report = measure(data, methods=["bm25", "sm", "qdc"], ks=[2, 4], limit=3, bases=("bm25", "dense"))
    assert report.counts == {"hotpotqa": 3, "musique": 3}
    for k in (2, 4):
        for d in ("hotpotqa", "musique"):
            assert report.rows[("bm25", k, d)].n == 3 and report.rows[("sm", k, d)].mean("kept") == k
            for base in ("bm25", "dense"):
                row = report.rows[(f"qdc:{base}", k, d)]
                assert row.mean("kept") <= k and 0.0 <= row.mean("recall") <= row.mean("candidate_recall") <= 1.0
                assert row.mean("candidates") > row.mean("kept")  # QDC chooses from more than it gives
    # more passages never find fewer gold paragraphs with BM25
    assert report.rows[("bm25", 4, "musique")].mean("recall") >= report.rows[("bm25", 2, "musique")].mean("recall")
    assert report.retrievers["dense"]["embedder"] == "all-MiniLM-L6-v2"
    text = render_markdown(report)
    assert "| 2 | BM25 |" in text and "| 4 | QDC on BM25 |" in text and "| 4 | QDC on SM |" in text
    assert "| 4 | SM (dense) |" in text and "85.57" in text  # the paper's SM recall on HotpotQA at k = 4
    assert "Honest recall" in text and "BlendFilter" not in text.split("\n## ")[-1]


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from explorer.cli import main

    assert main(["retrieval-metrics", "--methods", "bm25,magic"]) == 1
    assert "unknown method(s) magic" in capsys.readouterr().err
    assert main(["retrieval-metrics", "--limit", "0"]) == 1
    assert main(["retrieval-metrics", "--retriever", "bm25,colbert"]) == 1
    assert "unknown retriever(s) colbert" in capsys.readouterr().err
    assert main(["retrieval-metrics", "--retriever-set", "rrf_k=-1"]) == 1
    with pytest.raises(SystemExit):
        main(["retrieval-metrics", "--k", "3,x"])


def _hotpot(qid: str, topic: str) -> dict:
    gold_a = [f"{topic} Alpha", [f"{topic} Alpha was founded by {topic} Beta in 1900."]]
    gold_b = [f"{topic} Beta", [f"{topic} Beta was a painter born in Lisbon."]]
    noise = [[f"{topic} Noise {i}", [f"Unrelated text number {i} about rivers and hills."]] for i in range(3)]
    return {"_id": qid, "question": f"Where was the founder of {topic} Alpha born?", "answer": "Lisbon",
            "supporting_facts": [[gold_a[0], 0], [gold_b[0], 0]], "context": [gold_a, gold_b, *noise]}


def test_own_question_files_are_measured_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from explorer.cli import main
    from explorer.eval.datasets import resolve_sources
    from explorer.paths import PROJECT_ROOT

    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([_hotpot("a", "Zorblat"), _hotpot("b", "Quendor"), _hotpot("c", "Vexmoor")]),
                    encoding="utf-8")
    report = measure(tmp_path, sources=resolve_sources([str(mine)]), methods=["bm25", "qdc", "cfs"], ks=[2])
    assert report.counts == {"mine": 3} and report.rows[("bm25", 2, "mine")].n == 3
    assert report.rows[("bm25", 2, "mine")].mean("recall") > 0.5  # the gold paragraphs share the question's words
    assert report.classifier["path"]  # CFS ran with the classifier found by default (the shipped one here)
    text = render_markdown(report)
    assert f"mine ({mine.resolve()})" in text and "| 2 | CFS on SM |" in text and "HotpotQA dev" not in text
    # the command writes into the current folder, never into the project's results
    results = PROJECT_ROOT / "benchmarks" / "results" / "retrieval_metrics.md"
    before = results.stat().st_mtime_ns if results.exists() else None
    monkeypatch.chdir(tmp_path)
    assert main(["retrieval-metrics", "--dataset", str(mine), "--methods", "bm25", "--k", "2"]) == 0
    assert (tmp_path / "retrieval_metrics.md").is_file() and "wrote retrieval_metrics.md" in capsys.readouterr().err
    assert (results.stat().st_mtime_ns if results.exists() else None) == before
    questions_only = tmp_path / "q.jsonl"
    questions_only.write_text('{"question": "Who?", "answer": "x"}\n', encoding="utf-8")
    assert main(["retrieval-metrics", "--dataset", str(questions_only), "--methods", "bm25"]) == 1
    assert "hold no paragraphs" in capsys.readouterr().err


def test_paper_columns_beside_another_split_carry_a_caution(tmp_path: Path) -> None:
    """Filed under the paper's key (hotpotqa=FILE), a train file's recall sits beside dev-split figures: said so."""
    import json

    from explorer.eval.datasets import resolve_sources
    from explorer.eval.retrieval_metrics import split_of

    rows = json.dumps([_hotpot("a", "Zorblat"), _hotpot("b", "Quendor"), _hotpot("c", "Vexmoor")])
    train = tmp_path / "hotpotqa_train_v1.1.json"
    dev = tmp_path / "dev" / "my_hotpot.json"
    dev.parent.mkdir()
    for path in (train, dev):
        path.write_text(rows, encoding="utf-8")
    assert [split_of(p) for p in (train, dev, tmp_path / "mine.json")] == ["train", "dev", None]
    text = render_markdown(measure(tmp_path, sources=resolve_sources([f"hotpotqa={train}"]), methods=["bm25"], ks=[3]))
    assert ("⚠ Caution: the paper's HotpotQA figures were measured on HotpotQA's dev split; the hotpotqa questions "
            "here come from the train split (hotpotqa_train_v1.1.json)") in text
    assert "| paper recall ⚠ | paper given ⚠ |" in text and "64.67" in text  # the figures stay, marked
    same = render_markdown(measure(tmp_path, sources=resolve_sources([f"hotpotqa={dev}"]), methods=["bm25"], ks=[3]))
    assert "Caution" not in same and "64.67" in same


def test_a_stopped_run_keeps_its_measurements_and_the_same_call_goes_on(tmp_path: Path) -> None:
    """Stopped after a few measurements, the tables hold those and a rerun measures only the rest; the result equals
    an uninterrupted run and the kept file is gone."""
    import json

    from explorer.eval.datasets import resolve_sources

    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([_hotpot(q, t) for q, t in (("a", "Zorblat"), ("b", "Quendor"), ("c", "Vexmoor"))]),
                    encoding="utf-8")
    kept = tmp_path / "kept"
    calls: list[int] = []

    def stop_after_four() -> None:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt

    def run(**kwargs):
        return measure(tmp_path, sources=resolve_sources([str(mine)]), methods=["bm25", "qdc"], ks=[2, 3],
                       bases=("bm25",), **kwargs)

    stopped = run(checkpoint_dir=kept, on_measure=stop_after_four)  # 2 strategies x 2 k x 3 questions = 12
    assert stopped.stopped == (4, 12) and len(list(kept.glob("*.jsonl"))) == 1
    assert "**Partial: the run was stopped after 4 of 12 measurements" in render_markdown(stopped)
    assert stopped.rows[("bm25", 2, "mine")].n == 3 and ("bm25", 3, "mine") in stopped.rows
    calls.clear()
    resumed = run(checkpoint_dir=kept, on_measure=lambda: calls.append(1))
    assert len(calls) == 8 and resumed.stopped is None and not list(kept.glob("*.jsonl"))
    whole = run()

    def tables(report) -> str:
        return render_markdown(report).split("Wall time")[0]

    assert tables(resumed) == tables(whole) and "Partial" not in tables(resumed)
