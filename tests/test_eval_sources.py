"""Evaluations over a user's own question files: fingerprints refuse a resume on other questions, reports name the
data, and one live process per evaluation (a lock that a crash cannot leave behind)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.errors import ExplorerError
from explorer.eval.lock import EvaluationLock, lock_path
from explorer.eval.report import report_markdown
from explorer.eval.runner import EvalSettings, build_arms, run_evaluation
from explorer.paths import DEMO_CORPUS_DIR
from explorer.runtime import Runtime
from explorer.store import RunStore

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["max_length=8", "answer_tokens=4", "fewshot=1"]


def tiny_runtime(lm, retriever) -> Runtime:
    from explorer.engine.generation import Engine

    return Runtime(engine=Engine(lm), retriever=retriever, corpus={"name": "demo"})


def demo_rows(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (DEMO_CORPUS_DIR / "questions.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return [{"idx": r["id"], "question": r["question"], "answer": r["answers"][0] if "answers" in r else r["answer"]}
            for r in rows[:n]]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def settings(name: str, datasets: list[str], *, limit: int = 2, data_dir: str | None = None) -> EvalSettings:
    return EvalSettings(name=name, datasets=datasets, arms=build_arms(["wo"], settings=SMALL), limit=limit,
                        model="embedded", corpus="demo", data_dir=data_dir)


# --- question sources ------------------------------------------------------------------------------


def test_an_evaluation_over_a_question_only_file_names_it(tiny_lm, demo_retriever, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    mine = write_jsonl(tmp_path / "bamboogle.jsonl", demo_rows(3))
    result = run_evaluation(settings("mine", [str(mine), "demo"]), store, runtime=runtime, show_progress=False)
    assert (result.ran, result.status) == (4, "complete")
    stored = store.evaluation("mine")["settings"]["datasets"]
    assert stored["bamboogle"]["file"] == str(mine) and stored["bamboogle"]["format"] == "questions"
    assert stored["bamboogle"]["format_detected"] is True
    assert stored["bamboogle"]["fingerprint"].startswith("questions:")
    assert stored["demo"]["format"] == "demo"
    assert {row["dataset"] for row in store.list(evaluation="mine")} == {"bamboogle", "demo"}
    report = report_markdown(store, "mine")
    assert f"bamboogle: the first 2 questions, run by every method, from {mine} (question-only format, detected)" \
        in report
    assert "| bamboogle EM |" in report and "2WikiMultihopQA" not in report


def test_resume_on_other_questions_is_refused(tiny_lm, demo_retriever, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    first = write_jsonl(tmp_path / "a" / "2wikimultihopqa" / "dev_500_questions.jsonl", demo_rows(2))
    other = write_jsonl(tmp_path / "b" / "2wikimultihopqa" / "dev_500_questions.jsonl", demo_rows(4)[2:])
    run_evaluation(settings("e", ["2wiki"], data_dir=str(tmp_path / "a")), store, runtime=runtime,
                   show_progress=False)
    # the same data folder resumes (nothing left to do)
    again = run_evaluation(settings("e", ["2wiki"], data_dir=str(tmp_path / "a")), store, runtime=runtime,
                           show_progress=False)
    assert (again.ran, again.skipped) == (0, 2)
    # another data folder (or a forgotten --data) would add other questions under the same name
    with pytest.raises(ExplorerError) as info:
        run_evaluation(settings("e", ["2wiki"], data_dir=str(tmp_path / "b")), store, runtime=runtime,
                       show_progress=False)
    assert f"it read {first} (2WikiMultihopQA), this run reads {other} (2WikiMultihopQA)" in str(info.value)
    assert f"dataset=2wiki={first}" not in str(info.value)  # the Python keyword, not a command option
    # from the command line the fix names eval's own options; the model is never loaded for a refusal
    code = main(["eval", "--dataset", "2wiki", "--data", str(tmp_path / "b"), "--methods", "wo", "--limit", "2",
                 "--corpus", "demo", "--name", "e", "--db", str(store.path), "--quiet",
                 *[x for s in SMALL for x in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 1 and f"rerun with the same questions: --dataset 2wiki={first}" in err
    assert "--name NEW_NAME" in err and "Traceback" not in err
    # an edited file is another source too
    first.write_text(first.read_text(encoding="utf-8").replace("?", "??"), encoding="utf-8")
    with pytest.raises(ExplorerError, match="has changed since the evaluation began"):
        run_evaluation(settings("e", ["2wiki"], data_dir=str(tmp_path / "a")), store, runtime=runtime,
                       show_progress=False)
    # and so is the same file read in another format
    mine = write_jsonl(tmp_path / "mine.jsonl", demo_rows(2))
    run_evaluation(settings("f", [str(mine)]), store, runtime=runtime, show_progress=False)
    as_nq = settings("f", [str(mine)])
    as_nq.dataset_format = "nq"
    with pytest.raises(ExplorerError, match="it read .* as question-only, this run reads it as NQ-open"):
        run_evaluation(as_nq, store, runtime=runtime, show_progress=False)
    assert store.evaluation("e")["runs"] == {"complete": 2}  # nothing was added or lost


def test_another_source_joins_an_evaluation_only_when_added_and_the_header_counts_stored_runs(
        tiny_lm, demo_retriever, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A source the evaluation does not have is refused (naming it and --add-dataset), not merged; the
    header's question counts and status come from the stored runs after an added source, an interrupted
    run and a smaller --limit."""
    store = RunStore(tmp_path / "runs.sqlite")
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    rows = demo_rows(8)
    train = write_jsonl(tmp_path / "hotpotqa_train.jsonl", rows[:6])
    other = write_jsonl(tmp_path / "musique_train.jsonl", rows[6:8])
    bamboo = write_jsonl(tmp_path / "bamboogle.jsonl", rows[2:4])
    run_evaluation(settings("held", [str(train)], limit=2), store, runtime=runtime, show_progress=False)
    code = main(["eval", "--dataset", f"{other},{bamboo}", "--name", "held", "--methods", "wo", "--limit", "2",
                 "--corpus", "demo", "--db", str(store.path), "--quiet", *[x for s in SMALL for x in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "holds the questions of hotpotqa_train (hotpotqa_train.jsonl)" in err
    assert "musique_train (musique_train.jsonl), bamboogle (bamboogle.jsonl) are not among its question sources" in err
    assert f"--add-dataset {other},{bamboo}" in err and "--name NEW_NAME" in err
    assert set(store.evaluation("held")["settings"]["datasets"]) == {"hotpotqa_train"}
    assert {r["dataset"] for r in store.list(evaluation="held")} == {"hotpotqa_train"}

    added = settings("held", [str(train)], limit=2)
    added.add_datasets = [str(other)]
    result = run_evaluation(added, store, runtime=runtime, show_progress=False)
    assert (result.ran, result.skipped) == (2, 2)
    assert set(store.evaluation("held")["settings"]["datasets"]) == {"hotpotqa_train", "musique_train"}

    def stop_after_one(trace) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # a larger request stopped after one more question
        run_evaluation(settings("held", [str(train)], limit=5), store, runtime=runtime, on_run=stop_after_one,
                       show_progress=False)
    header = report_markdown(store, "held").split("### ")[0]
    # stopped: 3 of the 5 questions now asked for are stored, and the same command resumes it
    assert "- status: incomplete: 5 of 7 runs stored; the last command ended interrupted" in header, header
    assert f"hotpotqa_train: 3 of the first 5 questions run by every method, from {train}" in header
    smaller = run_evaluation(settings("held", [str(train)], limit=2), store, runtime=runtime, show_progress=False)
    assert (smaller.ran, smaller.status) == (0, "complete")  # the smaller request itself is done...
    header = report_markdown(store, "held").split("### ")[0]
    # ...and so is the evaluation as now asked: its header says complete (the same command would run
    # nothing) and names the question an earlier, larger request left in the tables
    assert "- status: complete, started" in header and "incomplete" not in header and "resumes" not in header
    assert (f"hotpotqa_train: the first 2 questions, run by every method (and 1 more stored from an earlier, "
            f"larger request, counted in the tables), from {train}") in header
    assert f"musique_train: the first 2 questions, run by every method, from {other}" in header
    assert "first 15" not in header and "first 5" not in header


# --- the lock --------------------------------------------------------------------------------------


HOLDER = textwrap.dedent("""
    import sys, time
    from explorer.eval.lock import EvaluationLock
    lock = EvaluationLock(sys.argv[1], sys.argv[2]).acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def _start_holder(db: Path, name: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read()
    return proc


def test_a_second_live_process_is_refused_and_a_crashed_ones_lock_is_cleared(tiny_lm, demo_retriever,
                                                                              tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]
                                                                              ) -> None:
    db = tmp_path / "runs.sqlite"
    store = RunStore(db)
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    holder = _start_holder(db, "demo-2")
    try:
        with pytest.raises(ExplorerError) as info:
            run_evaluation(settings("demo-2", ["demo"]), store, runtime=runtime, show_progress=False)
        message = str(info.value)
        assert f"already being run by process {holder.pid}" in message and "another --name" in message
        assert store.evaluation("demo-2") is None  # the refused process wrote nothing
        code = main(["eval", "--dataset", "demo", "--methods", "wo", "--limit", "2", "--corpus", "demo", "--name",
                     "demo-2", "--db", str(db), "--quiet"])
        assert code == 1 and f"process {holder.pid}" in capsys.readouterr().err
        # another name is not blocked
        assert run_evaluation(settings("other", ["demo"], limit=1), store, runtime=runtime,
                              show_progress=False).status == "complete"
        holder.send_signal(signal.SIGKILL)  # a crash: no clean-up runs
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lock_path(db, "demo-2").exists()  # the crashed process's record is still there
    said: list[str] = []
    result = run_evaluation(settings("demo-2", ["demo"]), store, runtime=runtime, show_progress=False,
                            progress=said.append)
    assert result.status == "complete" and result.ran == 2
    assert any(f"cleared the stale lock of evaluation 'demo-2' left by process {holder.pid}" in s
               and "no longer running" in s for s in said), said
    assert not lock_path(db, "demo-2").exists()  # released when the run ended


def test_lock_within_one_process_and_release_on_errors(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    with EvaluationLock(db, "x") as held:
        assert held.held and held.stale is None
        with pytest.raises(ExplorerError, match=f"process {os.getpid()}"):
            EvaluationLock(db, "x").acquire()
        with EvaluationLock(db, "y"):  # other names are independent
            pass
    assert not held.held and not lock_path(db, "x").exists()
    assert not lock_path(db, "x").parent.exists()  # no empty lock folder is left beside the database
    # an evaluation that fails (here: an unreadable question file) releases its lock
    store = RunStore(db)
    with pytest.raises(ExplorerError):
        run_evaluation(settings("z", [str(tmp_path / "missing.jsonl")]), store, show_progress=False)
    with EvaluationLock(db, "z") as again:
        assert again.stale is None
    assert lock_path(db, "a/b") != lock_path(db, "a_b") and lock_path(db, "a/b").parent == lock_path(db, "x").parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX processes")
def test_two_processes_racing_for_one_lock_get_it_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    script = textwrap.dedent("""
        import sys, time
        from explorer.errors import ExplorerError
        from explorer.eval.lock import EvaluationLock
        deadline = float(sys.argv[3])
        time.sleep(max(0.0, deadline - time.time()))
        try:
            lock = EvaluationLock(sys.argv[1], sys.argv[2]).acquire()
            print("won", flush=True)
            time.sleep(3)
            lock.release()
        except ExplorerError:
            print("refused", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db), "race", start], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outcomes == ["refused", "refused", "won"]
