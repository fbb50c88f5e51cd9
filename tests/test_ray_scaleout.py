"""Evaluations on Ray workers: the same results as one process, workers that die, drivers that are stopped.

One local Ray instance (2 CPUs) serves the whole module, because starting Ray is the slow part;
every evaluation here runs the seeded tiny random model (``random:tiny``, which every worker
builds from its spec) on the demo corpus, and the single-process evaluation it is compared with
runs with one torch thread, as each worker does. The instance is shut down at the end and the
module checks that no process of it is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from explorer.cli import main
from explorer.errors import ConfigError
from explorer.eval.cluster import ClusterOptions
from explorer.eval.report import report_markdown
from explorer.eval.runner import EvalSettings, build_arms, run_evaluation
from explorer.store import RunStore
from explorer.trace import Trace
from tests.test_eval_runner import SMALL, canonical, metrics_without_time, stored

ROOT = Path(__file__).resolve().parent.parent
METHODS = ["wo", "sr", "fl", "dragin"]
LIMIT = 3
RUNS = LIMIT * len(METHODS)


def settings(name: str, *, batch: int = 8) -> EvalSettings:
    return EvalSettings(name=name, datasets=["demo"], arms=build_arms(METHODS, settings=SMALL), limit=LIMIT,
                        model="random:tiny", corpus="demo", batch_size=batch)


def one_thread_run(*args: Any, **kwargs: Any):
    """run_evaluation in this process with one torch thread, like each worker (the same sums, the same floats)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_evaluation(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc), zombies excluded."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray instance for the module; shut down (and checked gone) at the end."""
    import logging

    import ray

    before = descendants(os.getpid())
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        deadline = time.monotonic() + 30
        while descendants(os.getpid()) - before and time.monotonic() < deadline:
            time.sleep(0.5)
        left = descendants(os.getpid()) - before
        assert not left, f"Ray left processes behind: {sorted(left)}"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict[tuple, dict[str, Any]]:
    """The single-process evaluation every Ray evaluation is compared with."""
    store = RunStore(tmp_path_factory.mktemp("baseline") / "runs.sqlite")
    result = one_thread_run(settings("e"), store, show_progress=False)
    assert (result.ran, result.errors) == (RUNS, 0)
    runs = stored(store, "e")
    assert any(t["costs"]["retrievals"] for t in runs.values())  # the comparison covers retrieving runs
    return {"traces": runs, "metrics": metrics_without_time(store, "e")}


def test_two_workers_give_the_single_process_results(ray_address, baseline, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    result = run_evaluation(settings("e"), store, show_progress=False, cluster=ClusterOptions(workers=2))
    assert (result.ran, result.skipped, result.errors, result.status) == (RUNS, 0, 0, "complete")
    runs = stored(store, "e")
    assert runs.keys() == baseline["traces"].keys()
    for key, trace in runs.items():
        assert trace == baseline["traces"][key], f"{key} differs between Ray workers and one process"
    assert metrics_without_time(store, "e") == baseline["metrics"]
    (execution,) = store.evaluation("e")["settings"]["executions"]
    assert execution["mode"] == "ray" and execution["workers"] == 2 and execution["runs"] == RUNS
    assert len(set(execution["pids"])) == 2 and os.getpid() not in execution["pids"]
    assert execution["devices"] == [{"node": execution["nodes"][0], "kind": "cpu", "index": None, "name": "cpu"}]
    assert execution["threads"] == 1
    report = report_markdown(store, "e")
    assert (f"- produced by: 2 Ray workers (a local Ray instance) on 1 device (cpu, 1 thread per worker) on 1 node: "
            f"{RUNS} runs") in report


def test_a_killed_worker_has_its_runs_redone_elsewhere(ray_address, baseline, tmp_db: Path) -> None:
    store = RunStore(tmp_db)
    killed: list[int] = []

    def kill_a_worker(_trace: Trace) -> None:
        if not killed:
            pid = store.evaluation("k")["settings"]["executions"][-1]["pids"][0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    result = run_evaluation(settings("k", batch=2), store, show_progress=False, on_run=kill_a_worker,
                            cluster=ClusterOptions(workers=2))
    assert (result.ran, result.errors, result.status) == (RUNS, 0, "complete")
    row = store.evaluation("k")
    assert row["runs"] == {"complete": RUNS} and store.integrity_check() == "ok"
    assert stored(store, "k") == baseline["traces"]  # every run once, each as one process makes it
    execution = row["settings"]["executions"][-1]
    assert execution["requeued"] >= 1, "the killed worker's runs were not re-queued"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)


class Stop(Exception):
    """Stands for Ctrl-C reaching the driver between two runs."""


def stop_after(count: int, seen: list[Trace]):
    def on_run(trace: Trace) -> None:
        seen.append(trace)
        if len(seen) == count:
            raise Stop

    return on_run


@pytest.mark.parametrize("first, then", [("ray", "process"), ("process", "ray")])
def test_an_interrupted_driver_resumes_with_or_without_ray(ray_address, baseline, tmp_db: Path, first: str,
                                                           then: str) -> None:
    store = RunStore(tmp_db)
    seen: list[Trace] = []
    ray_options = ClusterOptions(workers=2)
    with pytest.raises(Stop):
        if first == "ray":
            run_evaluation(settings("i", batch=3), store, show_progress=False, on_run=stop_after(5, seen),
                           cluster=ray_options)
        else:
            one_thread_run(settings("i", batch=3), store, show_progress=False, on_run=stop_after(5, seen))
    row = store.evaluation("i")
    assert row["status"] == "interrupted" and row["runs"] == {"complete": 5}  # every trace received is written
    assert {r["run_id"] for r in store.list(evaluation="i")} == {t.run_id for t in seen}
    if then == "ray":
        result = run_evaluation(settings("i"), store, show_progress=False, cluster=ray_options)
    else:
        result = one_thread_run(settings("i"), store, show_progress=False)
    assert (result.ran, result.skipped, result.status) == (RUNS - 5, 5, "complete")
    assert stored(store, "i") == baseline["traces"]
    modes = [e["mode"] for e in store.evaluation("i")["settings"]["executions"]]
    assert modes == [first, then]


def test_a_stopped_cli_driver_on_the_cluster_resumes_without_ray(ray_address, tmp_path: Path, capsys) -> None:
    """SIGTERM to ``eval --ray-address``: received runs stay, workers go, and a plain rerun finishes the rest."""
    db = tmp_path / "runs.sqlite"
    runs = 6 * 2
    # Longer runs than elsewhere, so the driver is caught in the middle.
    command = [sys.executable, "-m", "explorer", "eval", "--dataset", "demo", "--methods", "wo,fl", "--limit", "6",
               "--corpus", "demo", "--model", "random:tiny", "--db", str(db), "--name", "c", "--write-batch", "1",
               "--quiet", "--set", "max_length=64", "--set", "fewshot=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_ADDRESS": ""}
    proc = subprocess.Popen([*command, "--ray-address", ray_address], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists() and (RunStore(db).evaluation("c") or {}).get("runs", {}).get("complete", 0) >= 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the evaluation ended before it could be stopped: {proc.communicate()}"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    store = RunStore(db)
    row = store.evaluation("c")
    done = row["runs"]["complete"]
    assert row["status"] == "interrupted" and set(row["runs"]) == {"complete"} and 2 <= done < runs
    assert store.integrity_check() == "ok"
    assert row["settings"]["executions"][0]["address"] == ray_address
    assert main(command[3:]) == 0
    assert f"{runs - done} runs made, {done} already stored" in capsys.readouterr().err
    assert store.evaluation("c")["runs"] == {"complete": runs} and len(stored(store, "c")) == runs


def test_ray_is_never_imported_without_workers(tmp_path: Path) -> None:
    """A plain evaluation and the web app load nothing of Ray (checked in a fresh interpreter)."""
    script = f"""
import sys
from pathlib import Path
from explorer.cli import main
assert main(["eval", "--dataset", "demo", "--methods", "wo", "--limit", "1", "--corpus", "demo", "--model",
             "random:tiny", "--db", {str(tmp_path / 'runs.sqlite')!r}, "--quiet", "--set", "max_length=8"]) == 0
import app  # the web app's entry point, as `python app.py` imports it
from explorer.ui.page.app import AppSettings, build_app
build_app(AppSettings(db=Path({str(tmp_path / 'app.sqlite')!r}), model="embedded", corpus="demo", preload=False))
loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
assert not loaded, loaded
print("no ray")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and "no ray" in done.stdout, done.stderr[-3000:]


def test_a_sweep_on_workers_gives_the_single_process_sweep(ray_address, tmp_path: Path, capsys) -> None:
    """``sweep --workers 2`` (on the module's Ray instance) stores the runs one process stores and says who ran them."""
    import torch

    small = [x for s in SMALL for x in ("--set", s)]
    out, dbs = {}, {}
    for mode, flags in (("process", []), ("ray", ["--workers", "2"])):
        dbs[mode] = tmp_path / f"{mode}.sqlite"
        out[mode] = tmp_path / mode
        command = ["sweep", "--method", "dragin", "--param", "threshold", "--values", "0.1,50", "--dataset", "demo",
                   "--limit", "2", "--corpus", "demo", "--model", "random:tiny", "--db", str(dbs[mode]), "--quiet",
                   "--out", str(out[mode]), *small, *flags]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as each worker runs
        try:
            assert main(command) == 0
        finally:
            torch.set_num_threads(threads)
        assert "4 runs made, 0 already stored, 0 failed" in capsys.readouterr().err
    single, workers = (RunStore(dbs[m]) for m in ("process", "ray"))
    (name,) = [e["name"] for e in workers.evaluations()]

    def by_threshold(store: RunStore) -> dict[tuple, dict[str, Any]]:
        runs = {(row["question_id"], trace.config["threshold"]): canonical(trace)
                for row, trace in store.traces(evaluation=name)}
        assert len(runs) == 4, "a run stored twice or missing"
        return runs

    runs = by_threshold(workers)
    assert runs == by_threshold(single)
    assert sorted(t for _, t in runs) == [0.1, 0.1, 50.0, 50.0]
    report = (out["ray"] / "evaluation.md").read_text()
    assert "- produced by: 2 Ray workers (a local Ray instance) on 1 device (cpu, 1 thread per worker)" in report
    single_report = (out["process"] / "evaluation.md").read_text()
    assert "- produced by: one process (no Ray) on cpu, 1 thread: 4 runs" in single_report
    assert (out["ray"] / "threshold.html").is_file()


@pytest.mark.parametrize("flags, message", [
    (["--worker-gpus", "1"], "no Ray workers were asked for"),
    (["--workers", "2", "--worker-gpus", "1", "--device", "cpu"], "gives each worker a GPU, but the device is cpu"),
    (["--workers", "2", "--device", "cuda:1"], "sees it as cuda"),
    (["--workers", "2", "--device", "cuda", "--worker-gpus", "0"], "Ray would hide every GPU"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--workers", "2", "--worker-cpus", "0"], "--worker-cpus must be more than 0"),
])
def test_contradictory_worker_options_are_refused_before_anything_runs(flags, message, tmp_db: Path,
                                                                       capsys) -> None:
    code = main(["eval", "--dataset", "demo", "--methods", "wo", "--corpus", "demo", "--db", str(tmp_db), "--quiet",
                 *flags])
    err = capsys.readouterr().err
    assert code == 1 and message in err and "Traceback" not in err
    assert not tmp_db.exists() or RunStore(tmp_db).evaluations() == []


def test_a_runtime_object_cannot_go_to_workers(tiny_lm, demo_retriever, tmp_db: Path) -> None:
    from explorer.engine.generation import Engine
    from explorer.runtime import Runtime

    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    with pytest.raises(ConfigError, match="Ray workers open theirs from the settings"):
        run_evaluation(settings("r"), RunStore(tmp_db), runtime=runtime, cluster=ClusterOptions(workers=2))


def test_the_report_line_names_workers_devices_and_nodes() -> None:
    """GPU workers (as a cluster records them) and a plain process, each with the runs it made."""
    from explorer.eval.execution import produced_by

    gpu = {"node": "a", "kind": "cuda", "index": "0", "name": "NVIDIA H100"}
    entries = [
        {"mode": "ray", "address": "10.0.0.5:6379", "workers": 3, "threads": 1, "nodes": ["a", "b"], "runs": 40,
         "requeued": 2, "devices": [gpu, {**gpu, "index": "1"}, {**gpu, "node": "b"}]},
        {"mode": "process", "workers": 1, "threads": 4, "nodes": ["c"], "runs": 1,
         "devices": [{"node": "c", "kind": "cpu", "index": None, "name": "cpu"}]},
        {"mode": "ray", "address": "local", "workers": 2, "runs": 0, "devices": []},  # started, ran nothing
    ]
    assert produced_by(entries) == ("3 Ray workers (the Ray cluster 10.0.0.5:6379) on 3 devices (3 × NVIDIA H100) on "
                                    "2 nodes: 40 runs, 2 re-queued after a worker died; one process (no Ray) on cpu, "
                                    "4 threads: 1 run")


def test_random_model_specs_are_checked() -> None:
    from explorer.engine.random_models import parse_random_spec
    from explorer.errors import ModelError

    assert parse_random_spec("random:tiny") == ("tiny", None) and parse_random_spec("random:1b:4") == ("1b", 4)
    for bad in ("random:2b", "random:tiny:x"):
        with pytest.raises(ModelError, match="random:tiny\\[:SEED\\], random:1b\\[:LAYERS\\] or random:8b"):
            parse_random_spec(bad)


def test_the_1b_benchmark_model_builds_and_generates() -> None:
    """The GPU benchmarks' random:1b model, cut to one layer: same code path, same shape per layer."""
    from explorer.engine.generation import Engine
    from explorer.engine.random_models import load_random_model

    lm = load_random_model("random:1b:1", dtype="bfloat16")
    assert lm.model.config.num_hidden_layers == 1 and lm.model.config.hidden_size == 2048
    gen = Engine(lm).generate("The capital of France is", max_new_tokens=3, attention=True, ignore_eos=True)
    assert len(gen.tokens) == 3 and all(t.entropy >= 0 for t in gen.tokens)
    again = load_random_model("random:1b:1", dtype="bfloat16")
    assert Engine(again).generate("The capital of France is", max_new_tokens=3, ignore_eos=True).ids == gen.ids


def test_workers_open_the_evaluations_retriever_and_attention_backend() -> None:
    """Every setting that picks the runtime travels to the workers in the spec (dense, hybrid, --attn)."""
    from explorer.eval.runtime_spec import runtime_spec
    from explorer.retrieval.choice import retriever_config

    hybrid = retriever_config("hybrid", None, {"rrf_k": 30}).recorded()
    spec = runtime_spec(EvalSettings(name="h", datasets=["demo"], arms=build_arms(["wo"]), model="random:tiny",
                                     retriever=hybrid, attn="eager"))
    assert spec.attn == "eager" and spec.retriever == hybrid
    assert spec.retriever_choice().kind == "hybrid" and spec.retriever_choice().recorded() == hybrid
    assert spec.retriever_choice().rrf_k == 30
    assert spec.with_device("cuda").retriever == hybrid  # a GPU worker keeps the retriever
    plain = runtime_spec(EvalSettings(name="p", datasets=["demo"], arms=build_arms(["wo"]), model="random:tiny"))
    assert plain.retriever_choice().recorded() == {"kind": "bm25"}


@pytest.mark.slow
def test_passage_shards_embedded_on_a_ray_worker_are_the_local_vectors(ray_address, tmp_path: Path) -> None:
    """The dense embedding pass of a large corpus on Ray: shards come back from a worker holding the encoder and
    are written by the driver; a shard already on disk is not embedded again."""
    import numpy as np

    from explorer.retrieval import dense_shards
    from explorer.retrieval.corpora import load_corpus
    from explorer.retrieval.embeddings import get_encoder

    corpus = load_corpus("demo")
    store = corpus.store
    plan = dense_shards.ShardPlan(24, 8)
    encoder = get_encoder()
    folder = tmp_path / "shards"
    folder.mkdir()
    first = dense_shards.embed_texts(encoder, dense_shards.shard_texts(store, plan, 0), 16)
    dense_shards.write_shard(folder, 0, first)  # written by an earlier, interrupted run
    embed = dense_shards.embed_on_ray(store, plan, embedder=None, batch_size=16, workers=1, address=ray_address)
    returned: list[int] = []

    def counted(todo: list[int]):
        for i, matrix in embed(todo):
            returned.append(i)
            yield i, matrix

    manifest = dense_shards.build_shards(folder, store, encoder.dim, "k", counted, plan=plan)
    assert sorted(returned) == [1, 2] and manifest["shards"] == 3
    stored = np.concatenate([np.asarray(s, dtype=np.float32) for s in dense_shards.open_shards(folder, plan)])
    local = dense_shards.embed_texts(encoder, [p.as_context() for p in store[:24]], 16)
    assert np.allclose(stored, local, atol=2e-3)
