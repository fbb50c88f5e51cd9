"""Choosing the retriever per run: traces, stored runs, evaluations, reports, views and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.cli import main
from explorer.errors import ExplorerError
from explorer.eval.report import recall_table, retriever_text
from explorer.eval.runner import EvalSettings, build_arms, default_name, run_evaluation
from explorer.eval.scores import given_ids, score_evaluation, score_trace
from explorer.methods.base import run_question
from explorer.retrieval.choice import retriever_config
from explorer.runtime import runtime_for
from explorer.store import RunStore
from explorer.trace import Trace, TraceRecorder
from explorer.ui.panels import compare, header
from explorer.ui.views.view import TraceView, ViewOptions

SMALL = {"max_length": 8, "answer_tokens": 4, "fewshot": 1}
PARAPHRASE = "tune about giving up a baby girl"  # shares no word with its passage, Little Green (demo-0106)


@pytest.fixture(scope="module")
def engine(tiny_lm):
    from explorer.engine.generation import Engine

    return Engine(tiny_lm)


def test_switching_retriever_changes_the_trace_and_the_stored_run(engine, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    traces = {}
    for kind in ("bm25", "dense", "hybrid"):
        runtime = runtime_for(engine, "demo", retriever=kind)
        trace = run_question("sr", PARAPHRASE, runtime, config=SMALL)
        assert trace.status == "complete"
        traces[kind] = store.get(store.save(trace))
    facts = {kind: t.corpus for kind, t in traces.items()}
    assert [facts[k]["retriever"] for k in facts] == ["bm25", "dense", "hybrid"]
    assert facts["bm25"]["embedder"] is None and facts["dense"]["embedder"] == "all-MiniLM-L6-v2"
    assert facts["dense"]["index_type"].startswith("exact") and facts["dense"]["retriever_config"]["kind"] == "dense"
    assert len({facts[k]["index_fingerprint"] for k in facts}) == 3
    hits = {kind: [h["id"] for e in t.of_kind("retrieval") for h in e.payload["hits"]] for kind, t in traces.items()}
    assert "demo-0106" in hits["dense"][:1] and "demo-0106" not in hits["bm25"]
    assert hits["dense"] != hits["bm25"]
    # the views say which retriever answered
    opts = ViewOptions()
    assert "dense · all-MiniLM-L6-v2 · exact" in header.render(TraceView(traces["dense"]), opts)
    assert "retriever <span class=\"dre-retriever\">BM25</span>" in header.render(TraceView(traces["bm25"]), opts)
    table = compare.render(list(traces.values()))
    assert "<th>retriever</th>" in table and "hybrid · all-MiniLM-L6-v2" in table


def test_runs_stored_before_retrievers_were_chosen_read_as_bm25() -> None:
    assert header.retriever_label({"name": "demo"}) == "BM25"
    assert retriever_text(None) == "bm25"
    assert retriever_text({"kind": "hybrid", "embedder": "embedded", "index": "auto", "rrf_k": 60,
                           "bm25_weight": 1.0, "dense_weight": 2.0}).startswith("hybrid (all-MiniLM-L6-v2")


def test_an_evaluation_keeps_its_retriever_and_refuses_another(engine, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    arms = build_arms(["sr"], settings=[f"{k}={v}" for k, v in SMALL.items()])
    dense = retriever_config("dense")
    settings = EvalSettings(name="e", datasets=["demo"], arms=arms, limit=2, corpus="demo", retriever=dense.recorded())
    run_evaluation(settings, store, runtime=runtime_for(engine, "demo", retriever=dense), show_progress=False)
    stored = store.evaluation("e")["settings"]
    assert stored["retriever"]["kind"] == "dense" and stored["retriever"]["embedder"] == "embedded"
    assert all(t.corpus["retriever"] == "dense" for _, t in store.traces(evaluation="e"))
    as_bm25 = EvalSettings(name="e", datasets=["demo"], arms=arms, limit=2, corpus="demo")
    with pytest.raises(ExplorerError, match="was run with retriever="):
        run_evaluation(as_bm25, store, runtime=runtime_for(engine, "demo"), show_progress=False)
    # An evaluation stored before the retriever was recorded was a BM25 one: resuming it with BM25 is fine.
    run_evaluation(EvalSettings(name="old", datasets=["demo"], arms=arms, limit=1, corpus="demo"), store,
                   runtime=runtime_for(engine, "demo"), show_progress=False)
    old = store.evaluation("old")["settings"]
    old.pop("retriever")
    store.update_evaluation("old", settings=old)
    run_evaluation(EvalSettings(name="old", datasets=["demo"], arms=arms, limit=1, corpus="demo"), store,
                   runtime=runtime_for(engine, "demo"), show_progress=False)
    with pytest.raises(ExplorerError, match="was run with retriever="):
        run_evaluation(EvalSettings(name="old", datasets=["demo"], arms=arms, limit=1, corpus="demo",
                                    retriever=dense.recorded()), store, show_progress=False)
    # default names keep evaluations of different retrievers apart
    assert default_name(["hotpotqa"], 30, "embedded", "benchmark") == "hotpotqa-30-embedded-benchmark"
    assert default_name(["hotpotqa"], 30, "embedded", "benchmark", retriever=dense) == \
        "hotpotqa-30-embedded-benchmark-dense(all-MiniLM-L6-v2)"


def test_recall_over_given_passages_beside_all_retrieved() -> None:
    trace = Trace(question="q", method="drrag", variant="paper", config={}, model={}, corpus={},
                  gold={"gold_passages": ["a", "b"]})
    rec = TraceRecorder(trace)
    hits = [{"id": pid, "title": f"T{pid}", "text": f"text of {pid}", "score": 1.0, "rank": i}
            for i, pid in enumerate(["a", "b", "c", "d"], start=1)]
    rec.add("retrieval", query=0, hits=hits, k=4)
    rec.add("generation", purpose="judge", prompt="Passage A: Tb: text of b\nPassage B: Tc: text of c", text="no")
    rec.add("generation", purpose="answer", prompt="Context:\n[1] Ta: text of a\n[2] Td: text of d\nQuestion: q",
            text="x")
    assert given_ids(trace) == ["a", "d"]  # b was only judged, never given to the answer
    scores = score_trace(trace)
    assert scores["given_recall"] == 0.5 and scores["given_passages"] == 2
    assert scores["passage_recall"] == 1.0 and scores["retrieved_passages"] == 4


def test_the_evaluation_report_shows_both_recalls(engine, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    arms = build_arms(["sr"], settings=[f"{k}={v}" for k, v in SMALL.items()])
    run_evaluation(EvalSettings(name="r", datasets=["demo"], arms=arms, limit=2, corpus="demo"), store,
                   runtime=runtime_for(engine, "demo"), show_progress=False)
    table = recall_table(score_evaluation(store, "r"))
    assert table.columns[1:] == ["Demo Recall (given)", "Demo Given", "Demo Recall (retrieved)", "Demo Retrieved"] \
        or "Recall (given)" in table.columns[1]
    given, retrieved = float(table.rows[0][1]), float(table.rows[0][3])
    assert 0.0 <= given <= retrieved <= 1.0 and float(table.rows[0][2]) == 3.0  # SR gives its 3 passages


def test_the_command_line_chooses_the_retriever(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["retrieve", "--corpus", "demo", "--retriever", "dense", "-k", "1", PARAPHRASE]) == 0
    assert "demo-0106" in capsys.readouterr().out
    assert main(["retrieve", "--corpus", "demo", "--retriever", "hybrid", "--retriever-set", "bm25_weight=0",
                 "-k", "2", "--json", PARAPHRASE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and '"id": "demo-0106"' in lines[0]  # BM25's ranking weighs nothing: dense order
    assert main(["retrieve", "--corpus", "demo", "--retriever", "colbert", "x"]) == 1
    assert "'colbert' is not allowed" in capsys.readouterr().err
    assert main(["retrieve", "--corpus", "demo", "--retriever", "dense", "--embedder", "/no/such/model", "x"]) == 1
    err = capsys.readouterr().err
    assert "embedder '/no/such/model' is neither a folder" in err and "Traceback" not in err
    assert main(["run", "--method", "wo", "--question", "q", "--retriever", "dense",
                 "--retriever-set", "nprobe=0"]) == 1
    assert "out of range" in capsys.readouterr().err


def test_the_app_runs_with_the_retriever_chosen_beside_the_corpus(engine, tmp_db: Path) -> None:
    from explorer.runtime import Runtime
    from explorer.ui.page import controls
    from explorer.ui.page.app import AppSettings, _retargeter, build_app
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    demo = build_app(AppSettings(db=tmp_db, preload=False, retriever="hybrid"))
    by_id = {c.get("props", {}).get("elem_id"): c for c in demo.config["components"]}
    assert by_id["retriever"]["props"]["value"] == "hybrid"
    assert [c[0] if isinstance(c, (list, tuple)) else c for c in by_id["retriever"]["props"]["choices"]] == \
        ["bm25", "dense", "hybrid"]
    assert by_id["corpus"]["props"]["value"] == "demo" and by_id["embedder"]["props"]["value"] == "embedded"

    base = runtime_for(engine, "demo")
    controller = RunController(RunStore(tmp_db), RuntimeHolder(lambda: base, describe="tiny"),
                               retarget=_retargeter("demo"))
    spec = controls.build_specs(["sr"], {}, {("sr", k): v for k, v in SMALL.items()}, model="tiny")[0]
    ids = {}
    for kind in ("dense", "bm25"):
        final = list(controller.stream(PARAPHRASE, [spec], gold=None, session="s", retriever=kind))[-1]
        assert final.done and "Done: 1 run(s) stored" in final.status
        ids[kind] = final.run_ids[0]
    stored = {kind: controller.store.get(i) for kind, i in ids.items()}
    assert stored["dense"].corpus["retriever"] == "dense" and stored["bm25"].corpus["retriever"] == "bm25"
    assert isinstance(base, Runtime) and base.corpus["retriever"] == "bm25"  # the loaded runtime is left as it was
    final = list(controller.stream(PARAPHRASE, [spec], gold=None, session="s", retriever="dense",
                                   embedder="/no/such/encoder"))[-1]
    assert final.done and "neither a folder" in final.status and not final.run_ids
