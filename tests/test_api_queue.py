"""Many callers at once: every ``/run`` caller gets its run, told its place while it waits; retries repeat nothing.

One real app (``python app.py``, the embedded model, 3 runs at a time) and 10 real
``gradio_client`` clients, each its own session, all calling ``/run`` at once with short ``wo``
and ``sr`` runs: more than three times as many callers as runs at once, so most of them wait in
line, and some still wait once the first runs have finished. All 10 runs complete and are stored
once; callers that had to wait were told
their place in line; a retried call with the same idempotency key returns the same run, also
from a new process's objects without a model (the key lives in the run database, so it survives
a restart), and a key reused for another request is refused.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from explorer.errors import ExplorerError
from explorer.store import RunStore
from explorer.ui.serving.admission import RunGate, client_of

SHORT = '{"max_length": 8, "fewshot": 0, "answer_tokens": 4}'
#: sr with one passage: the prompt passes of 30 runs are most of the test's time on a CPU.
SETTINGS = {"wo": SHORT, "sr": '{"max_length": 8, "fewshot": 0, "answer_tokens": 4, "top_k": 1}'}
QUESTIONS = ["Who built the arena in Lewiston?", "Where did the Maineiacs play?", "Who lived longer?",
             "What is the capacity of the Colisee?", "Who directed the film?"]
#: Callers at once, and runs the app makes at once: the same line as 30 callers on 8 runs would make,
#: at a third of the runs (the suite's wall time).
CLIENTS = 10
CONCURRENT_RUNS = 3


def test_the_gate_runs_a_few_at_once_lines_up_the_rest_and_caps_each_client() -> None:
    gate = RunGate(2, per_client=2, max_waiting=3)
    a, b, c = gate.enter("x"), gate.enter("y"), gate.enter("z")
    assert a.admitted.is_set() and b.admitted.is_set() and c.position == 1 and c.estimate is None
    d = gate.enter("z")
    with pytest.raises(ExplorerError, match="already has 2 runs running or waiting") as refused:
        gate.enter("z")
    assert "EXPLORER_RUNS_PER_CLIENT" in refused.value.fix
    assert d.position == 2 and "number 2 in line" in d.describe()
    a.release()  # c moves up, and now there is a run length to estimate from
    assert c.admitted.is_set() and d.position == 1 and d.estimate is not None and "about" in d.describe()
    gate.enter("w")
    gate.enter("v")
    with pytest.raises(ExplorerError, match="already waiting for the model"):
        gate.enter("u")


def test_a_client_is_its_session_never_the_shared_login() -> None:
    """A class behind one login: each student's page is its own client, so each gets its own places."""
    from types import SimpleNamespace

    a = SimpleNamespace(username="teacher", session_hash="aaa", client=SimpleNamespace(host="10.0.0.5"))
    b = SimpleNamespace(username="teacher", session_hash="bbb", client=SimpleNamespace(host="10.0.0.5"))
    plain = SimpleNamespace(username="teacher", session_hash=None, client=SimpleNamespace(host="10.0.0.9"))
    assert client_of(a) != client_of(b) and "teacher" not in client_of(a)
    assert client_of(plain) == "address:10.0.0.9"  # a plain HTTP call without a session: its address
    gate = RunGate(1, per_client=1, max_waiting=4)
    tickets = [gate.enter(client_of(SimpleNamespace(username="teacher", session_hash=f"s{i}", client=None)))
               for i in range(5)]
    assert [t.position for t in tickets] == [0, 1, 2, 3, 4]
    with pytest.raises(ExplorerError, match="EXPLORER_MAX_WAITING"):  # the line still bounds the server
        gate.enter("session:s5")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from tests.browser_support import start_app

    workdir = tmp_path_factory.mktemp("queue")
    server = start_app(workdir, name="queue", extra_args=("--concurrent-runs", str(CONCURRENT_RUNS)), timeout=300)
    yield server
    server.stop()


@pytest.mark.slow
def test_ten_concurrent_clients_all_get_their_run_and_a_retry_repeats_nothing(app) -> None:
    from gradio_client import Client

    results: list[dict | None] = [None] * CLIENTS
    seen: list[list[dict]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []
    clients: list = [None] * CLIENTS

    def call(i: int) -> None:
        try:
            # A generous connect timeout: many clients reading the app's config at once on a busy 2-core machine.
            clients[i] = client = Client(app.url, verbose=False, httpx_kwargs={"timeout": 120})
            method = ("wo", "sr")[i % 2]
            job = client.submit(QUESTIONS[i % len(QUESTIONS)], method, "", SETTINGS[method], f"key-{i}",
                                api_name="/run")
            for update in job:
                seen[i].append(update)
            results[i] = job.result()
        except BaseException as exc:  # noqa: BLE001 - reported below with the others
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors[:3]
    assert all(r is not None and r["status"] == "complete" for r in results), results
    ids = [r["run_id"] for r in results]  # type: ignore[index]
    assert len(set(ids)) == CLIENTS
    stored = RunStore(app.db, readonly=True)
    assert {r["run_id"] for r in stored.list()} >= set(ids)
    waited = [u for updates in seen for u in updates if u["status"] == "queued"]
    assert waited and min(u["queue_position"] for u in waited) == 1  # callers in line were told their place
    assert any(u["estimate_seconds"] for u in waited)  # ...and, once runs had finished, how long
    # A retried call returns the run the first call made, and starts nothing.
    again = clients[0].predict(QUESTIONS[0], "wo", "", SHORT, "key-0", api_name="/run")
    assert again["run_id"] == ids[0] and again["status"] == "complete"
    with pytest.raises(Exception, match="already used for a different request"):
        clients[1].predict("Another question entirely?", "sr", "", SETTINGS["sr"], "key-1", api_name="/run")
    assert len(RunStore(app.db, readonly=True).list()) == len(stored.list())
    # The key lives in the run database: a new process's objects, with no model at all, find the same run.
    assert retried_after_restart(app.db, QUESTIONS[0], "key-0", f"session:{clients[0].session_hash}") == ids[0]


def retried_after_restart(db: Path, question: str, key: str, client: str) -> str:
    from explorer.ui.api.endpoints import run_spec
    from explorer.ui.runs.controller import RunController, RuntimeHolder
    from explorer.ui.runs.jobs import ApiRuns

    def no_model():
        raise AssertionError("a retried call must not load the model")

    controller = RunController(RunStore(db), RuntimeHolder(no_model, describe="none"))
    spec = run_spec("", "wo", "", SHORT)  # what /run runs
    found = ApiRuns(controller).submit(question, spec, client=client, key=key)
    return str(getattr(found, "run_id", ""))


def test_an_idempotency_key_belongs_to_the_caller_that_sent_it(tiny_lm, demo_retriever, tmp_db) -> None:
    """Two callers using the same key: each gets its own run, and neither is refused for the other's request."""
    from explorer.engine.generation import Engine
    from explorer.runtime import Runtime
    from explorer.ui.api.endpoints import run_spec
    from explorer.ui.runs.controller import RunController, RuntimeHolder
    from explorer.ui.runs.jobs import ApiJob, ApiRuns

    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    runs = ApiRuns(RunController(RunStore(tmp_db), RuntimeHolder(lambda: runtime, describe="tiny")))
    spec = run_spec("tiny", "wo", "", SHORT)

    def finished(job: ApiJob | object) -> str:
        assert isinstance(job, ApiJob)
        assert job.done.wait(120) and job.error is None and job.trace is not None, job.error
        return job.trace.run_id

    alice = finished(runs.submit("Who built the arena?", spec, client="user:alice", key="retry-1"))
    # another caller's same key with another question: its own run, not a refusal naming alice's request
    bob = finished(runs.submit("Where did the Maineiacs play?", spec, client="user:bob", key="retry-1"))
    assert bob != alice
    # each caller's retry returns its own run
    assert runs.submit("Who built the arena?", spec, client="user:alice", key="retry-1").run_id == alice
    assert runs.submit("Where did the Maineiacs play?", spec, client="user:bob", key="retry-1").run_id == bob
    with pytest.raises(ExplorerError, match="already used for a different request"):
        runs.submit("Where did the Maineiacs play?", spec, client="user:alice", key="retry-1")
    assert len(RunStore(tmp_db, readonly=True).list()) == 2
