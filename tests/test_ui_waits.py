"""Waits told before a live run and in line come from run lengths measured here, and say when they are only a
first estimate; a fork on a model not loaded yet says that model is loading.

Runs are real (a tiny random model on the demo corpus) and stored in a real SQLite file; the line is
the app's own gate.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from explorer.forks import ForkChange, ForkPlan, ForkPoint, fork_run
from explorer.journal import RunJournal
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.ui.runs.waits import FIRST_GUESS_SECONDS, HISTORY, TOGETHER_SHARE, RunRates
from explorer.ui.serving.admission import RunGate

QUESTION = "Who built the arena in Lewiston?"
SHORT = {"max_length": 8, "answer_tokens": 2}


@pytest.fixture(scope="module")
def runtime(tiny_lm, demo_retriever) -> Runtime:
    from explorer.engine.generation import Engine

    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


@pytest.fixture(scope="module")
def stored(runtime, tmp_path_factory) -> tuple[RunStore, list]:
    """Two complete wo runs, one cancelled sr run and a fork of a wo run, in a real run database."""
    store = RunStore(tmp_path_factory.mktemp("waits") / "runs.sqlite")
    journal = RunJournal(store)
    done = [run_question("wo", QUESTION, runtime, config=SHORT, journal=journal) for _ in range(2)]
    stop = threading.Event()
    stop.set()
    cancelled = run_question("sr", QUESTION, runtime, config=SHORT, cancel=stop, journal=journal)
    span = next(e.id for e in done[0].events if e.kind == "generation")
    fork = fork_run(done[0], ForkPlan(done[0].run_id, ForkPoint(span=span, token=0), ForkChange("none")), runtime,
                    journal=journal)
    return store, [*done, cancelled, fork]


def test_a_first_estimate_says_so_until_a_run_of_the_method_finished_on_that_model() -> None:
    rates = RunRates()
    guess = rates.estimate("seakr", "m")
    assert not guess.measured and guess.seconds == FIRST_GUESS_SECONDS["seakr"]
    assert "a first estimate: seakr has not run on this server yet" in guess.describe()
    rates.record("seakr", "m", 42.0)
    measured = rates.estimate("seakr", "m")
    assert measured.measured and measured.seconds == 42.0
    assert measured.describe() == "about 42 s on this server (measured over its last 1 run)"
    assert not rates.estimate("seakr", "another model").measured  # rates do not carry over to another model


def test_the_stored_runs_teach_only_complete_whole_runs(stored, runtime) -> None:
    store, (first, second, cancelled, fork) = stored
    assert cancelled.status == "cancelled" and fork.fork["parent"] == first.run_id
    assert {r["status"] for r in store.list()} == {"complete", "cancelled"}
    rates = RunRates()
    assert rates.load_store(store) == 2  # the fork is complete too, but replays its parent: not a whole run
    model = runtime.engine.fingerprint()["name"]
    wo = rates.estimate("wo", model)
    assert wo.measured and wo.measured_runs == 2
    assert wo.seconds == pytest.approx((first.costs.total_time + second.costs.total_time) / 2, rel=1e-3)
    assert not rates.estimate("sr", model).measured  # its only run was cancelled
    both = rates.estimate_all(["wo", "sr"], model)
    assert both.seconds == pytest.approx(wo.seconds + FIRST_GUESS_SECONDS["sr"]) and both.guessed == ("sr",)
    assert "a first estimate: sr has not run" in both.describe()
    at_once = rates.estimate_all(["wo", "sr"], model, together=True)  # one press through the batch
    apart = wo.seconds + FIRST_GUESS_SECONDS["sr"]
    assert at_once.seconds == pytest.approx(max(TOGETHER_SHARE * apart, wo.seconds, FIRST_GUESS_SECONDS["sr"]))
    assert at_once.seconds < apart and not at_once.measured


def test_recent_runs_outweigh_old_ones() -> None:
    rates = RunRates()
    for seconds in [100.0] * HISTORY + [2.0] * HISTORY:
        rates.record("wo", "m", seconds)
    assert rates.estimate("wo", "m").seconds == 2.0


def test_the_controller_measures_its_own_runs_and_tells_the_line(stored, runtime) -> None:
    from explorer.ui.page.controls import RunSpec
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    store, _ = stored
    holder = RuntimeHolder(lambda: runtime, describe="tiny model")
    holder.get()
    controller = RunController(store, holder, gate=RunGate(1))
    before = controller.wait_estimate(["sr"])
    assert not before.measured
    updates = list(controller.stream(QUESTION, [RunSpec("sr", "paper", dict(SHORT))], gold=None, session="s"))
    ran = store.get(updates[-1].run_ids[0])
    after = controller.wait_estimate(["sr"])
    assert after.measured and after.seconds == pytest.approx(ran.costs.total_time)
    # A page's place in line carries that length: the caller behind it is told it, not a fixed guess.
    running = controller.admit("session:a", ["sr"])
    waiting = controller.admit("session:b", ["wo"])
    assert running.admitted.is_set() and running.expected == pytest.approx(after.seconds)
    assert waiting.position == 1 and waiting.estimate == pytest.approx(max(after.seconds, 1.0), abs=0.5)
    assert "at the run lengths measured here" in waiting.describe()
    running.release()
    waiting.release()


def test_the_line_plays_forward_from_measured_lengths_not_one_mean() -> None:
    gate = RunGate(1)
    old = gate.enter("x")  # a long run earlier (a first run that also loaded the model): 5 minutes
    old.started = time.monotonic() - 300
    old.release()
    running = gate.enter("a", expected=12.0)
    waiting = gate.enter("b", expected=8.0)
    behind = gate.enter("c", expected=8.0, guessed=True)
    assert waiting.estimate == pytest.approx(12.0, abs=0.5)  # not "about 5 min"
    assert "number 1 in line, about 12 s at the run lengths measured here" in waiting.describe()
    assert behind.estimate == pytest.approx(20.0, abs=0.5)
    assert "about 20 s by a first estimate" not in behind.describe()  # its own guess does not delay it
    unknown = gate.enter("d")  # says nothing of its length: the recent mean stands in for it
    assert unknown.estimate == pytest.approx(28.0, abs=0.5)
    late = gate.enter("e")
    assert late.estimate == pytest.approx(28.0 + 300.0, abs=1.0)
    running.started = time.monotonic() - 10  # two seconds of it are left
    assert waiting.estimate == pytest.approx(2.0, abs=0.5)
    for ticket in (running, waiting, behind, unknown, late):
        ticket.release()
    two = RunGate(2)
    a, b = two.enter("a", expected=10.0, guessed=True), two.enter("b", expected=30.0)
    c, d = two.enter("c", expected=20.0), two.enter("d", expected=5.0)
    assert c.estimate == pytest.approx(10.0, abs=0.5) and d.estimate == pytest.approx(30.0, abs=0.5)
    assert "by a first estimate" in d.describe()  # a's length, which d waits behind, is a guess
    for ticket in (a, b, c, d):
        ticket.release()


def test_a_fork_on_a_model_not_loaded_yet_says_that_it_is_loading(runtime, demo_retriever, tmp_path) -> None:
    """The app forks a run recorded on its other model after loading that model (minutes on a CPU for Gemma-3
    270M); here a second tiny random model stands in for it."""
    from explorer.engine.generation import Engine
    from explorer.engine.loader import tiny_random_model
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    other = Runtime(engine=Engine(tiny_random_model(seed=1)), retriever=demo_retriever, corpus={"name": "demo"})
    store = RunStore(tmp_path / "runs.sqlite")
    parent = run_question("wo", QUESTION, other, config=SHORT, journal=RunJournal(store))
    name = other.engine.fingerprint()["name"]
    opened: list[Runtime] = []

    def reopen(have: Runtime, recorded: dict, progress) -> Runtime:  # the app's reopen: load once, keep it
        if recorded.get("name") == have.engine.fingerprint()["name"]:
            return have
        if not opened:
            progress(str(recorded["name"]))
            progress("reading the weights")
            opened.append(other)
        return opened[0]

    controller = RunController(store, RuntimeHolder(lambda: runtime, describe="tiny model"), reopen=reopen)
    span = next(e.id for e in parent.events if e.kind == "generation")
    plan = ForkPlan(parent.run_id, ForkPoint(span=span, token=0), ForkChange("none"))
    updates = list(controller.stream_fork(parent, plan, session="s"))
    loading = [i for i, u in enumerate(updates) if f"Loading {name}, the model this run was made with" in u.status]
    assert loading and "reading the weights" in updates[loading[-1]].status
    assert f'data-run="{parent.run_id}"' in updates[loading[0]].html  # the parent stays shown meanwhile
    assert updates[-1].done and len(updates[-1].run_ids) == 1 and "Loading" not in updates[-1].status
    assert store.get(updates[-1].run_ids[0]).fork["parent"] == parent.run_id
    again = list(controller.stream_fork(parent, plan, session="s"))
    assert again[-1].done and not any("Loading" in u.status for u in again)  # loaded once: no notice
    assert controller.wait_estimate(["wo"], name).measured_runs == 1  # the parent; its forks are no whole runs


def test_a_run_call_waiting_in_line_is_told_the_same_forecast() -> None:
    from explorer.ui.page.controls import RunSpec
    from explorer.ui.runs.jobs import ApiJob, progress

    gate = RunGate(1)
    running = gate.enter("a", expected=12.0)
    job = ApiJob(QUESTION, RunSpec("wo", "paper", {}), "", "", ticket=gate.enter("b", expected=3.0))
    told = progress(job)
    assert told["status"] == "queued" and told["queue_position"] == 1
    assert told["estimate_seconds"] == pytest.approx(12.0, abs=0.5)
    assert re.fullmatch(r"number 1 in line, about 1[12] s", told["message"])
    running.expected, running.guessed = 40.0, True
    assert re.fullmatch(r"number 1 in line, about (39|40) s by a first estimate", progress(job)["message"])
    running.release()
    assert progress(job)["status"] == "running"
    job.ticket.release()
