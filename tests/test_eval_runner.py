"""The evaluation runner: arms from the command line, resumes, interrupts, refusals, failures, determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from explorer.cli import main
from explorer.errors import ConfigError, DatasetError, ExplorerError
from explorer.eval.report import summary_csv
from explorer.eval.runner import EvalSettings, build_arms, default_name, run_evaluation
from explorer.eval.scores import score_evaluation
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace

SMALL = ["max_length=12", "answer_tokens=6", "fewshot=1"]


def tiny_runtime(lm, retriever) -> Runtime:
    from explorer.engine.generation import Engine

    return Runtime(engine=Engine(lm), retriever=retriever, corpus={"name": "demo"})


def settings_for(name: str, methods: list[str], *, limit: int = 3, batch: int = 8,
                 extra: tuple[str, ...] = ()) -> EvalSettings:
    return EvalSettings(name=name, datasets=["demo"], arms=build_arms(methods, settings=[*SMALL, *extra]),
                        limit=limit, model="embedded", corpus="demo", batch_size=batch)


def canonical(trace: Trace, *, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trace without what legitimately differs between identical runs: ids, timestamps, timings
    (and the top-level fields named in ``also``)."""
    d = trace.to_dict()
    for key in ("run_id", "created_at", *also):
        d.pop(key)
    d["costs"].pop("wall_time")
    d["costs"].pop("total_time")
    for event in d["events"]:
        event.pop("t")
        event["payload"].pop("seconds", None)
    return d


def stored(store: RunStore, name: str) -> dict[tuple, dict[str, Any]]:
    out = {}
    for row, trace in store.traces(evaluation=name):
        key = (row["dataset"], row["question_id"], trace.method, trace.variant)
        assert key not in out, f"{key} stored twice"
        out[key] = canonical(trace)
    return out


def metrics_without_time(store: RunStore, name: str) -> list[list[str]]:
    lines = [line.split(",") for line in summary_csv(score_evaluation(store, name)).splitlines()]
    drop = lines[0].index("wall_time")
    return [line[:drop] + line[drop + 1:] for line in lines]


# --- arms from the command line ------------------------------------------------------------------


def test_arms_take_settings_per_method_and_for_all() -> None:
    arms = build_arms(["wo", "dragin", "flare"], settings=["max_length=16", "dragin.threshold=0.5"],
                      variants=["dragin=reference"])
    by = {a.method: a for a in arms}
    assert by["wo"].given == {"max_length": 16} and by["flare"].given == {"max_length": 16}
    assert by["dragin"].given == {"max_length": 16, "threshold": 0.5} and by["dragin"].variant == "reference"
    assert by["flare"].variant == "paper"
    both = build_arms(["dragin", "dragin:reference"])
    assert [(a.method, a.variant) for a in both] == [("dragin", "paper"), ("dragin", "reference")]


def test_configs_resolve_like_run_question_with_the_model_preset() -> None:
    from explorer.methods.base import make_config
    from explorer.methods.presets import preset_for

    (plain,) = build_arms(["dragin"])
    (chosen,) = build_arms(["dragin"], settings=["dragin.threshold=2.5"])
    default = make_config("dragin", {}).to_dict()["threshold"]
    preset = preset_for("SmolLM2-135M-Instruct", "dragin", "paper").get("threshold", default)
    assert plain.resolve("SmolLM2-135M-Instruct")["threshold"] == preset
    assert plain.resolve("some-other-model")["threshold"] == default
    assert chosen.resolve("SmolLM2-135M-Instruct")["threshold"] == 2.5  # what the user sets wins


@pytest.mark.parametrize("methods, settings, variants, message", [
    (["wo"], ["nothing=1"], [], "no listed method has a parameter 'nothing'"),
    (["wo"], ["flare.threshold=0.2"], [], "not among the methods"),
    (["wo"], ["max_length"], [], "not of the form"),
    (["dragin"], [], ["dragin=nope"], "no variant 'nope'"),
    (["dragin"], ["dragin.threshold=-1"], [], "out of range"),
    (["nosuch"], [], [], "unknown method"),
])
def test_bad_arms_are_refused(methods, settings, variants, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build_arms(methods, settings=settings, variants=variants)


def test_default_name_ignores_methods_so_adding_one_resumes() -> None:
    name = default_name(["hotpotqa", "musique"], 30, "embedded", "benchmark")
    assert name == "hotpotqa+musique-30-embedded-benchmark"
    assert default_name(["nq"], None, "/models/llama/", "demo") == "nq-all-llama-demo"


# --- bad input --------------------------------------------------------------------------------------


def test_a_malformed_question_file_fails_with_file_line_and_reason(tmp_path: Path, tmp_db: Path, capsys) -> None:
    folder = tmp_path / "data" / "2wikimultihopqa"
    folder.mkdir(parents=True)
    bad = folder / "dev_500_questions.jsonl"
    bad.write_text('{"question": "ok?", "answer": "a"}\n{"question": "no answer here?"}\n', encoding="utf-8")
    store = RunStore(tmp_db)
    settings = EvalSettings(name="bad", datasets=["2wiki"], arms=build_arms(["wo"]), data_dir=str(tmp_path / "data"))
    with pytest.raises(DatasetError) as info:
        run_evaluation(settings, store, show_progress=False)
    assert f"line 2 of {bad}" in str(info.value) and "has no 'answer' field" in str(info.value)
    assert store.evaluation("bad") is None  # nothing was started
    code = main(["eval", "--dataset", "2wiki", "--methods", "wo", "--db", str(tmp_db), "--data",
                 str(tmp_path / "data"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and f"line 2 of {bad}" in err and "Traceback" not in err


def test_a_rerun_with_another_config_or_model_is_refused(tiny_lm, demo_retriever, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    run_evaluation(settings_for("e", ["wo", "dragin"], limit=1), store, runtime=runtime, show_progress=False)
    with pytest.raises(ExplorerError, match=r"ran dragin \(paper\) with another config \(threshold: 1.2 -> 0.3\)"):
        run_evaluation(settings_for("e", ["dragin"], limit=1, extra=("dragin.threshold=0.3",)), store,
                       runtime=runtime, show_progress=False)
    other_model = settings_for("e", ["wo"], limit=1)
    other_model.model = "/elsewhere/model"
    with pytest.raises(ExplorerError, match="was run with model='embedded'"):
        run_evaluation(other_model, store, runtime=runtime, show_progress=False)
    # Defaults that changed since the evaluation began (a new preset, say) are named, with the way to keep them.
    settings = store.evaluation("e")["settings"]
    settings["arms"][1]["config"]["top_k"] = 5
    store.update_evaluation("e", settings=settings)
    with pytest.raises(ExplorerError, match=r"top_k: 5 -> 3.*--set dragin.top_k=5"):
        run_evaluation(settings_for("e", ["dragin"], limit=1), store, runtime=runtime, show_progress=False)
    settings["model_name"] = "another-model"
    store.update_evaluation("e", settings=settings)
    with pytest.raises(ExplorerError, match="ran on model 'another-model'"):
        run_evaluation(settings_for("e", ["wo"], limit=1), store, runtime=runtime, show_progress=False)


# --- running with the tiny model --------------------------------------------------------------------


class Stop(Exception):
    """Stands for Ctrl-C arriving between two runs."""


def test_interrupted_evaluation_keeps_finished_runs_and_resumes(tiny_lm, demo_retriever, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    seen: list[Trace] = []

    def stop_after_four(trace: Trace) -> None:
        seen.append(trace)
        if len(seen) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_evaluation(settings_for("e", ["wo", "sr", "fs"], batch=3), store, runtime=runtime,
                       on_run=stop_after_four, show_progress=False)
    row = store.evaluation("e")
    assert row["status"] == "interrupted"
    assert row["runs"] == {"complete": 4}  # three written as a batch, the fourth written on the way out
    assert {r["run_id"] for r in store.list(evaluation="e")} == {t.run_id for t in seen}
    result = run_evaluation(settings_for("e", ["wo", "sr", "fs"], batch=3), store, runtime=runtime,
                            show_progress=False)
    assert (result.ran, result.skipped, result.status) == (5, 4, "complete")
    assert store.evaluation("e")["status"] == "complete" and len(stored(store, "e")) == 9
    again = run_evaluation(settings_for("e", ["wo", "sr", "fs"]), store, runtime=runtime, show_progress=False)
    assert (again.ran, again.skipped) == (0, 9)


def test_gold_in_every_trace_and_methods_added_later(tiny_lm, demo_retriever, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    run_evaluation(settings_for("e", ["wo"], limit=2), store, runtime=runtime, show_progress=False)
    result = run_evaluation(settings_for("e", ["wo", "sr"], limit=2), store, runtime=runtime, show_progress=False)
    assert (result.ran, result.skipped) == (2, 2)
    settings = store.evaluation("e")["settings"]
    assert [a["method"] for a in settings["arms"]] == ["wo", "sr"]
    for row, trace in store.traces(evaluation="e"):
        assert trace.gold["id"] == row["question_id"] and trace.gold["dataset"] == "demo"
        assert trace.gold["answers"] and trace.gold["gold_passages"]  # the explorer marks these passages
        assert trace.config["max_length"] == 12


class BrokenRetriever:
    """A retriever whose index has gone: every search raises, as a crashed backend would."""

    name = "broken"

    def search(self, query: str, k: int):
        raise RuntimeError("index file vanished")

    def __len__(self) -> int:
        return 0


def test_a_crashing_run_is_stored_as_failed_and_the_evaluation_goes_on(tiny_lm, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    result = run_evaluation(settings_for("e", ["wo", "sr"], limit=2), store,
                            runtime=tiny_runtime(tiny_lm, BrokenRetriever()), show_progress=False)
    assert (result.ran, result.errors, result.status) == (4, 2, "complete")
    rows = store.list(evaluation="e")
    assert {(r["method"], r["status"]) for r in rows} == {("wo", "complete"), ("sr", "error")}
    assert all("index file vanished" in r["error"] for r in rows if r["status"] == "error")
    assert store.run_keys("e") == {("demo", "dq-01", "wo", "paper"), ("demo", "dq-02", "wo", "paper")}


@pytest.mark.shared_data
def test_real_questions_carry_their_gold_passages_into_the_trace(shared_data: Path) -> None:
    from explorer.eval.datasets import load_dataset

    for name in ("hotpotqa", "musique"):
        for q in load_dataset(name, limit=5, data_dir=shared_data):
            gold = q.gold()
            assert gold["dataset"] == name and gold["id"] == q.id and gold["answers"][0] == q.answer
            assert len(gold["gold_passages"]) >= 2 and json.loads(json.dumps(gold)) == gold


def test_interrupted_and_resumed_equals_uninterrupted(tiny_lm, demo_retriever, tmp_path: Path) -> None:
    """2 questions x 3 methods: stop after 4 runs (one batch of 3 written, the 4th on the way out) and resume,
    or run straight through; same traces, same metrics. On the tiny model: what a resume must keep is the
    runner's (which runs, which exemplars, which order), the same whatever model writes; the evaluation on
    the embedded model runs from the command line below."""
    runtime = tiny_runtime(tiny_lm, demo_retriever)
    methods = ["wo", "sr", "flare"]
    straight = RunStore(tmp_path / "straight.sqlite")
    run_evaluation(settings_for("e", methods, limit=2), straight, runtime=runtime, show_progress=False)

    resumed = RunStore(tmp_path / "resumed.sqlite")
    count = 0

    def interrupt(_trace: Trace) -> None:
        nonlocal count
        count += 1
        if count == 4:
            raise Stop

    with pytest.raises(Stop):
        run_evaluation(settings_for("e", methods, limit=2, batch=3), resumed, runtime=runtime, on_run=interrupt,
                       show_progress=False)
    assert resumed.evaluation("e")["status"] == "interrupted" and len(stored(resumed, "e")) == 4
    run_evaluation(settings_for("e", methods, limit=2, batch=3), resumed, runtime=runtime, show_progress=False)

    a, b = stored(straight, "e"), stored(resumed, "e")
    assert len(a) == 6 and a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], f"{key} differs between the straight and the resumed evaluation"
    assert metrics_without_time(straight, "e") == metrics_without_time(resumed, "e")
    assert any(t["costs"]["retrievals"] for t in a.values())  # the comparison covered retrieving runs


# --- the embedded model -----------------------------------------------------------------------------


@pytest.mark.slow
def test_eval_and_sweep_commands_end_to_end(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "runs.sqlite")
    small = [x for s in SMALL for x in ("--set", s)]
    code = main(["eval", "--dataset", "demo", "--methods", "wo,dragin", "--limit", "1", "--corpus", "demo",
                 "--db", db, "--name", "cli", "--quiet", *small])
    out = capsys.readouterr().out
    assert code == 0 and "| Method | Demo EM | Demo F1 |" in out and "| dragin |" in out
    code = main(["sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,50", "--dataset", "demo",
                 "--limit", "1", "--corpus", "demo", "--db", db, "--quiet", "--out", str(tmp_path / "sw"), *small])
    assert code == 0
    store = RunStore(db)
    name = "sweep-dragin-threshold-demo-1-embedded-demo"
    traces = [t for _, t in store.traces(evaluation=name)]
    assert sorted(t.config["threshold"] for t in traces) == [0.1, 50.0]
    assert store.evaluation(name)["settings"]["sweep"]["values"] == [0.1, 50.0]
    assert (tmp_path / "sw" / "threshold.html").is_file()
    low, high = sorted(traces, key=lambda t: t.config["threshold"])
    assert low.costs.retrievals >= high.costs.retrievals == 0  # nothing scores over 50


@pytest.mark.slow
def test_a_killed_eval_process_keeps_its_finished_runs_and_resumes(tmp_path: Path, capsys) -> None:
    """SIGTERM to ``python -m explorer eval`` mid-evaluation: finished runs stay, the evaluation says interrupted.

    While it runs, the same evaluation started a second time is refused (the lock names the live process).
    Both processes run the tiny random model (``random:tiny``): what is checked is the process's
    signal handling, the lock and the store, the same whatever model writes, and two start-ups of
    the embedded model cost most of a minute; the command-line evaluation on the embedded model is
    the end-to-end test above. Runs of 64 tokens keep the process busy long enough to be caught."""
    import os
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "runs.sqlite"
    runs = 6 * 2
    command = [sys.executable, "-m", "explorer", "eval", "--dataset", "demo", "--methods", "wo,sr", "--limit", "6",
               "--corpus", "demo", "--model", "random:tiny", "--db", str(db), "--name", "k", "--write-batch", "1",
               "--quiet", "--set", "max_length=64", "--set", "fewshot=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists() and (RunStore(db).evaluation("k") or {}).get("runs", {}).get("complete", 0) >= 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the evaluation ended before it could be stopped: {proc.communicate()}"
        assert main(command[3:]) == 1  # the same evaluation from a second process, while the first is alive
        refused = capsys.readouterr().err
        assert f"already being run by process {proc.pid}" in refused and "Traceback" not in refused
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    store = RunStore(db)
    row = store.evaluation("k")
    assert row["status"] == "interrupted" and 2 <= row["runs"].get("complete", 0) < runs
    assert set(row["runs"]) == {"complete"} and store.integrity_check() == "ok"
    done = row["runs"]["complete"]
    resumed = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{runs - done} runs made, {done} already stored" in resumed.stderr
    assert store.evaluation("k")["status"] == "complete" and store.evaluation("k")["runs"] == {"complete": runs}
