"""Runs stored from their start: checkpoints while running, ``interrupted`` after a crash, every reader.

The kill test is real: ``python -m explorer run`` on the embedded model, a long DRAGIN run,
``SIGKILL`` once the database holds its first checkpoints, then the run is reopened.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.engine.generation import Engine
from explorer.journal import RunJournal, owner_gone, owner_token
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"


@pytest.fixture(scope="module")
def runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def dead_owner() -> str:
    """The owner token of a process that has ended (its pid is not running any more)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    host = owner_token().split(":")[0]
    return f"{host}:{proc.stdout.strip()}:1"


class Spy:
    """A listener that reads the database at each event, as another process would."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.seen: list[tuple[str, int]] = []

    def __call__(self, kind: str, data: dict) -> None:
        if kind != "event":
            return
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as conn:
            status = conn.execute("SELECT status FROM runs").fetchone()[0]
            events = conn.execute("SELECT COUNT(*) FROM live_events").fetchone()[0]
        conn.close()
        self.seen.append((status, events))


def test_a_run_is_stored_when_it_starts_and_checkpointed_while_it_runs(runtime, tmp_db) -> None:
    store = RunStore(tmp_db)
    spy = Spy(tmp_db)
    journal = RunJournal(store, every=0.0)  # a checkpoint at every notification
    trace = run_question("fl", QUESTION, runtime, config={"max_length": 24, "window": 8, "fewshot": 1},
                         listeners=[spy], journal=journal)
    assert trace.status == "complete" and journal.checkpoints >= 3
    assert spy.seen[0][0] == "running"  # stored before its first event
    assert all(status == "running" for status, _ in spy.seen)
    assert max(n for _, n in spy.seen) >= len(trace.events) - 2  # the checkpoints kept up with the events
    assert store.get(trace.run_id).to_dict() == trace.to_dict()  # the end replaces the checkpoints
    with store._db() as db:
        assert db.execute("SELECT COUNT(*) FROM live_events").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM live_runs").fetchone()[0] == 0


def test_checkpoints_are_batched(runtime, tmp_db) -> None:
    journal = RunJournal(RunStore(tmp_db), every=3600.0)
    trace = run_question("fl", QUESTION, runtime, config={"max_length": 24, "window": 8, "fewshot": 1},
                         journal=journal)
    assert len(trace.events) >= 5 and journal.checkpoints == 0  # nothing between start and end within an hour


def _half_run(store: RunStore, runtime: Runtime) -> tuple[Trace, list[dict]]:
    """A run stopped half-way as a killed process leaves it: checkpoints, streamed tokens, no end."""
    trace = run_question("fl", QUESTION, runtime, config={"max_length": 24, "window": 8, "fewshot": 1})
    events = trace.events[: len(trace.events) // 2]
    partial = Trace.from_dict({**trace.to_dict(), "events": [], "status": "running", "answer": None})
    store.begin_run(partial, owner=dead_owner())
    partial.events = list(events)
    span = next(e for e in trace.events[len(events):] if e.kind == "generation")
    tokens = [{"purpose": span.payload["purpose"], "step": span.step, **t} for t in span.payload["tokens"][:3]]
    store.checkpoint_run(partial, events, tokens)
    return partial, tokens


def test_a_run_whose_process_died_reopens_as_interrupted_with_its_partial_trace(runtime, tmp_db) -> None:
    store = RunStore(tmp_db)
    earlier = run_question("sr", QUESTION, runtime, config={"max_length": 8, "fewshot": 1})
    store.save(earlier)
    partial, tokens = _half_run(store, runtime)
    reopened = RunStore(tmp_db)  # the next process to open the file
    row = next(r for r in reopened.list() if r["run_id"] == partial.run_id)
    assert row["status"] == "interrupted" and "stopped before the run ended" in row["error"]
    trace = reopened.get(partial.run_id)
    trace.validate()
    assert trace.status == "interrupted"
    assert [e.to_dict() for e in trace.events[: len(partial.events)]] == [e.to_dict() for e in partial.events]
    cut = trace.events[len(partial.events)]
    assert cut.kind == "generation" and cut.payload["partial"] and len(cut.payload["tokens"]) == len(tokens)
    assert cut.payload["text"] == "".join(t["text"] for t in tokens)
    assert trace.events[-1].kind == "note" and "last checkpoint" in trace.events[-1].payload["message"]
    assert reopened.get(earlier.run_id).to_dict() == earlier.to_dict()
    assert reopened.integrity_check() == "ok"
    with reopened._db() as db:  # stored for good: no checkpoint rows are left
        assert db.execute("SELECT COUNT(*) FROM live_runs").fetchone()[0] == 0


def test_a_run_of_a_live_process_stays_running(runtime, tmp_db) -> None:
    store = RunStore(tmp_db)
    trace = Trace(question="Q?", method="wo", variant="paper", config={}, model={"name": "m"})
    store.begin_run(trace, owner=owner_token())
    assert not owner_gone(owner_token()) and owner_gone(dead_owner())
    assert not owner_gone("another-host:1:1")  # another machine's run is not judged from here
    assert RunStore(tmp_db).get(trace.run_id).status == "running"
    store.delete(trace.run_id)  # deleting a running run also drops its checkpoints
    with store._db() as db:
        assert db.execute("SELECT COUNT(*) FROM live_runs").fetchone()[0] == 0


def test_interrupted_runs_are_read_by_every_reader(runtime, tmp_db) -> None:
    from explorer.eval.scores import score_runs
    from explorer.summary import render_text
    from explorer.ui.page.viewblock import Shown, after_show
    from explorer.ui.runs import history
    from explorer.ui.runs.history import TraceCache
    from explorer.ui.views.render import render_runs

    store = RunStore(tmp_db)
    done = run_question("sr", QUESTION, runtime, config={"max_length": 8, "fewshot": 1})
    store.save(done, evaluation="e", dataset="demo", question_id="q1")
    partial, _ = _half_run(store, runtime)
    with store._db() as db, db.conn:
        db.execute("UPDATE runs SET evaluation = 'e', dataset = 'demo', question_id = 'q1' WHERE run_id = ?",
                   [partial.run_id])
    store = RunStore(tmp_db)
    trace = store.get(partial.run_id)
    assert "interrupted" in history.label(store.list(status="interrupted")[0])
    page = render_runs([trace])
    assert 'data-status="interrupted"' in page and "last checkpoint" in page
    html, *_ = after_show(TraceCache(store), Shown([done.run_id, trace.run_id], compare=True), "prob")
    assert "interrupted" in str(html)
    assert "interrupted" in render_text(trace)
    scores = score_runs(store.traces(evaluation="e"))
    statuses = {r.run_id: r.status for r in scores.runs}
    assert statuses[partial.run_id] == "interrupted" and statuses[done.run_id] == "complete"
    assert store.discard_incomplete("e") == 1 and [r["run_id"] for r in store.list()] == [done.run_id]


def test_a_read_only_store_shows_a_dead_run_as_interrupted_without_writing(runtime, tmp_db) -> None:
    store = RunStore(tmp_db)
    partial, _ = _half_run(store, runtime)
    before = tmp_db.read_bytes()
    ro = RunStore(tmp_db, readonly=True)
    assert [r["status"] for r in ro.list()] == ["interrupted"]
    assert ro.get(partial.run_id).status == "interrupted"
    with pytest.raises(Exception, match="read-only"):
        ro.save(partial)
    assert tmp_db.read_bytes() == before


def test_an_unexpected_failure_is_stored_as_an_error_not_left_running(runtime, tmp_db) -> None:
    store = RunStore(tmp_db)

    def explode(kind: str, data: dict) -> None:
        if kind == "event" and data["kind"] == "retrieval":
            raise RuntimeError("listener broke")

    with pytest.raises(RuntimeError):
        run_question("fl", QUESTION, runtime, config={"max_length": 32, "window": 8, "fewshot": 1},
                     listeners=[explode], journal=RunJournal(store))
    row = store.list()[0]
    assert row["status"] == "error" and "RuntimeError" in row["error"]


@pytest.mark.slow
def test_kill_9_during_a_long_run_leaves_it_interrupted_with_its_partial_events(tmp_path) -> None:
    db = tmp_path / "runs.sqlite"
    store = RunStore(db)
    earlier = Trace(question="Who wrote Hamlet?", method="wo", variant="paper", config={}, model={"name": "m"},
                    status="complete", answer="Shakespeare")
    store.save(earlier)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "explorer", "run", "--method", "dragin", "--question",
                             "Who is the spouse of the Green performer?", "--set", "threshold=0.01", "--set",
                             "max_length=400", "--set", "max_rounds=64", "--db", str(db)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.25)
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                seen = conn.execute("SELECT COUNT(*) FROM live_events").fetchone()[0]
                # Killed once a retrieval is checkpointed, so the partial trace has one to show.
                searched = conn.execute("SELECT COUNT(*) FROM live_events WHERE json_extract(event, '$.kind') = "
                                        "'retrieval'").fetchone()[0]
            conn.close()
            if seen >= 4 and searched:
                break
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]!r}"
        assert seen >= 4, "no checkpoint was written"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = RunStore(db)
    rows = {r["run_id"]: r for r in store.list()}
    assert store.get(earlier.run_id).to_dict() == earlier.to_dict()
    killed = next(r for r in rows.values() if r["run_id"] != earlier.run_id)
    assert killed["status"] == "interrupted"
    trace = store.get(killed["run_id"])
    trace.validate()
    assert trace.method == "dragin" and trace.status == "interrupted"
    assert len(trace.events) >= seen + 1
    assert any(e.kind == "generation" for e in trace.events) and any(e.kind == "retrieval" for e in trace.events)


def test_a_nan_threshold_stored_before_it_was_refused_does_not_break_the_what_if_slider(tmp_db) -> None:
    from explorer.ui.page.viewblock import theta_update
    from explorer.ui.runs.history import TraceCache
    from tests.ui_payloads import hostile_trace

    trace = hostile_trace("oldnan0000000000")
    for event in trace.events:
        if event.kind == "check":
            event.payload["threshold"] = float("nan")
            event.payload["units"][0]["value"] = float("inf")
    store = RunStore(tmp_db)
    store.save(trace)
    update = theta_update(TraceCache(store), trace.run_id)
    assert all(v == v and abs(v) != float("inf") for v in (update["minimum"], update["maximum"], update["value"]))
