"""Concurrent runs decoding as one batch give each run exactly what it gets alone.

Each check runs the same runs twice on one model: one after another with no batch (the engine's
own loop), then all at once in threads with the engine's batcher on, so their decode steps share
forward passes. Tokens, stop reasons, retrieval decisions and answers must be identical;
signals agree to 1e-5 in float32 (relative for values above 1: an entropy sums ~49k terms). The
tiny random model (near-uniform distributions, so every threshold fires and every path runs)
covers the mixed-method case and the isolation of cancel, errors and retrieval; the embedded model
checks that the same holds on real weights.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from explorer.engine import batching
from explorer.engine.generation import Engine
from explorer.methods.base import run_question
from explorer.runtime import Runtime
from explorer.trace import Trace, TraceRecorder

LEWISTON = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
SAVILLE = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
SMALL = {"max_length": 16, "answer_tokens": 6, "fewshot": 1}
SEAKR_SMALL = {**SMALL, "k": 4, "max_steps": 2, "step_tokens": 8, "candidates": 2}
DRAGIN_SMALL = {**SMALL, "max_length": 24, "threshold": 0.05}  # low enough to retrieve on the tiny model
#: Eight runs of mixed methods: baselines, both DRAGIN variants (attention signals, QFS rows), FLARE,
#: SEAKR (sampled rows with hidden states, re-ranking) and BlendFilter.
MIXED = [("wo", "paper", LEWISTON, SMALL), ("sr", "paper", SAVILLE, SMALL), ("fl", "paper", LEWISTON, SMALL),
         ("flare", "paper", SAVILLE, SMALL), ("dragin", "paper", LEWISTON, DRAGIN_SMALL),
         ("dragin", "reference", SAVILLE, DRAGIN_SMALL), ("seakr", "paper", LEWISTON, SEAKR_SMALL),
         ("fs", "paper", SAVILLE, SMALL)]


def close(a: Any, b: Any) -> bool:
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def assert_same_run(alone: Trace, batched: Trace) -> None:
    """The same events in the same order: identical tokens, texts and decisions, signals within tolerance."""
    assert batched.status == alone.status, batched.error
    assert [e.kind for e in batched.events] == [e.kind for e in alone.events]
    for a, b in zip(alone.events, batched.events, strict=True):
        if a.kind == "generation":
            ta, tb = a.payload["tokens"], b.payload["tokens"]
            assert [t["id"] for t in tb] == [t["id"] for t in ta], a.payload["purpose"]
            assert [t["text"] for t in tb] == [t["text"] for t in ta]
            assert b.payload["stopped_by"] == a.payload["stopped_by"]
            for x, y in zip(ta, tb, strict=True):
                assert close(x["signals"], y["signals"]), (x, y)
                assert [t[0] for t in x["top"]] == [t[0] for t in y["top"]]
        elif a.kind in ("check", "trigger", "uncertainty", "rerank", "query", "retrieval", "truncation", "answer"):
            fields = {k: v for k, v in a.payload.items() if k != "seconds"}
            other = {k: v for k, v in b.payload.items() if k != "seconds"}
            assert close(fields, other), (a.kind, fields, other)
    assert batched.answer == alone.answer
    for cost in ("llm_calls", "forward_passes", "generated_tokens", "retrievals", "sampled_sequences"):
        assert getattr(batched.costs, cost) == getattr(alone.costs, cost), cost


def run_all(runtime: Runtime, runs: list[tuple], *, concurrent: bool) -> list[Trace]:
    """Each run's trace, one after another or all at once in threads."""
    out: list[Trace | None] = [None] * len(runs)

    def one(i: int) -> None:
        method, variant, question, config = runs[i]
        out[i] = run_question(method, question, runtime, variant=variant, config=dict(config), raise_errors=True)

    if not concurrent:
        for i in range(len(runs)):
            one(i)
    else:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(runs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(t is not None for t in out)
    return out  # type: ignore[return-value]


@pytest.fixture()
def tiny_runtime(tiny_lm, demo_retriever):
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    yield runtime
    batching.disable(runtime.engine)


def test_eight_concurrent_runs_of_mixed_methods_match_their_runs_alone(tiny_runtime) -> None:
    alone = run_all(tiny_runtime, MIXED, concurrent=False)
    batcher = batching.enable(tiny_runtime.engine, samples=True)  # SEAKR's sampled rows join the batch too
    batched = run_all(tiny_runtime, MIXED, concurrent=True)
    for a, b in zip(alone, batched, strict=True):
        assert_same_run(a, b)
    assert batcher.unsupported is None
    # The runs really shared forward passes: more rows were stepped than steps were taken.
    assert batcher.largest >= 4 and batcher.row_steps > 2 * batcher.steps
    assert not any(e.payload.get("unbatched") for t in batched for e in t.of_kind("note"))


def test_on_a_cpu_sampled_rows_decode_as_their_own_batch_beside_the_shared_one(tiny_runtime) -> None:
    """By default on a CPU a sampler's k + 1 rows keep their own batch (the shared prompt read once), and
    the greedy spans of the other runs still share theirs; every run is the one it would be alone."""
    runs = [MIXED[6], MIXED[0], MIXED[3]]  # SEAKR beside two greedy runs
    alone = run_all(tiny_runtime, runs, concurrent=False)
    batcher = batching.enable(tiny_runtime.engine)
    assert batcher.samples is False
    batched = run_all(tiny_runtime, runs, concurrent=True)
    for a, b in zip(alone, batched, strict=True):
        assert_same_run(a, b)
    k = SEAKR_SMALL["k"]
    assert batcher.steps > 0 and batcher.largest < k + 1, "sampled rows joined the shared batch"
    assert not any(e.payload.get("unbatched") for t in batched for e in t.of_kind("note"))


def test_retrieval_cancel_and_an_error_in_one_run_leave_the_others_untouched(tiny_runtime) -> None:
    engine = tiny_runtime.engine
    prompt = "Question: who built the arena in Lewiston?\nAnswer:"
    plain_alone = engine.generate(prompt, max_new_tokens=24, attention=True)
    dragin_alone = run_all(tiny_runtime, [MIXED[4]], concurrent=False)[0]
    batching.enable(engine)
    results: dict[str, Any] = {}

    def dragin() -> None:  # retrieves mid-run: its spans leave the batch and rejoin after each search
        results["dragin"] = run_all(tiny_runtime, [MIXED[4]], concurrent=False)[0]

    def plain() -> None:
        results["plain"] = engine.generate(prompt, max_new_tokens=24, attention=True)

    def cancelled() -> None:
        trace = Trace(question="q", method="wo", variant="paper", config={}, model={})
        rec = TraceRecorder(trace)
        seen: list[int] = []

        def listener(kind: str, data: dict) -> None:
            if kind == "token":
                seen.append(data["id"])
                if len(seen) == 3:
                    rec.cancel.set()

        rec.listeners.append(listener)
        try:  # listeners run in the run's own thread, so Cancel lands a few tokens later than it is pressed
            engine.generate(prompt, max_new_tokens=200, rec=rec, ignore_eos=True)
        except Exception as exc:  # noqa: BLE001 - the Cancelled that unwinds the run
            span = trace.of_kind("generation")[0].payload
            results["cancelled"] = (type(exc).__name__, span["stopped_by"], len(span["tokens"]))

    def failing() -> None:
        def until(tokens: list) -> bool:
            if len(tokens) == 4:
                raise ValueError("a method's stop rule failed")
            return False

        try:
            engine.generate(prompt, max_new_tokens=40, until=until)
        except ValueError as exc:
            results["failing"] = str(exc)

    threads = [threading.Thread(target=f) for f in (dragin, plain, cancelled, failing)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["failing"] == "a method's stop rule failed"
    name, stopped, kept = results["cancelled"]
    assert name == "Cancelled" and stopped == "cancelled" and 3 <= kept < 200
    assert results["plain"].ids == plain_alone.ids
    assert close([t.signals for t in results["plain"].tokens], [t.signals for t in plain_alone.tokens])
    assert close(results["plain"].attention_row(5), plain_alone.attention_row(5))
    assert_same_run(dragin_alone, results["dragin"])
    assert dragin_alone.costs.retrievals >= 1  # it did pause for retrieval and rejoin
    assert engine.batcher.live_rows == 0  # nothing left behind in the batch


def test_a_model_whose_cache_cannot_be_batched_decodes_alone_and_says_so(demo_retriever) -> None:
    from explorer.engine.tiny import tiny_model

    engine = Engine(tiny_model("mistral"))  # a sliding window on every layer
    runtime = Runtime(engine=engine, retriever=demo_retriever, corpus={"name": "demo"})
    alone = run_all(runtime, [MIXED[0]], concurrent=False)[0]
    batching.enable(engine)
    try:
        batched = run_all(runtime, [MIXED[0], MIXED[0]], concurrent=True)
    finally:
        batching.disable(engine)
    notes = [e for e in batched[0].events if e.kind == "note" and e.payload.get("unbatched")]
    assert notes and "SlidingWindowLayer" in notes[0].payload["message"]
    ids = [[t["id"] for t in g.payload["tokens"]] for g in batched[0].of_kind("generation")]
    assert ids == [[t["id"] for t in g.payload["tokens"]] for g in alone.of_kind("generation")]


@pytest.mark.slow
def test_three_concurrent_runs_on_the_embedded_model_match_their_runs_alone(embedded_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    # Short prompts and spans: on a CPU the prompt passes dominate, and three runs are enough to share steps.
    small = {"max_length": 10, "fewshot": 0, "answer_tokens": 4}
    runs = [("dragin", "paper", LEWISTON, small), ("wo", "paper", SAVILLE, small),
            ("seakr", "paper", SAVILLE, {**small, "k": 3, "max_steps": 1, "step_tokens": 6, "candidates": 1})]
    alone = run_all(runtime, runs, concurrent=False)
    batcher = batching.enable(runtime.engine, samples=True)
    try:
        batched = run_all(runtime, runs, concurrent=True)
    finally:
        batching.disable(runtime.engine)
    for a, b in zip(alone, batched, strict=True):
        assert_same_run(a, b)
    assert batcher.largest >= 3


def test_an_evaluation_with_batch_stores_the_runs_it_stores_one_at_a_time(tiny_runtime, tmp_path) -> None:
    from explorer.eval.runner import EvalSettings, build_arms, run_evaluation
    from explorer.store import RunStore
    from tests.test_eval_runner import stored

    arms = build_arms(["wo", "dragin"], settings=["max_length=16", "answer_tokens=6", "fewshot=1",
                                                  "dragin.threshold=0.05"])
    results = {}
    for batch in (1, 3):
        store = RunStore(tmp_path / f"runs-{batch}.sqlite")
        settings = EvalSettings(name="e", datasets=["demo"], arms=arms, limit=2, model="embedded", corpus="demo",
                                concurrency=batch)
        run_evaluation(settings, store, runtime=tiny_runtime, show_progress=False)
        results[batch] = stored(store, "e")
        executions = store.evaluation("e")["settings"]["executions"]
        assert executions[-1]["batch"] == batch
    assert results[1].keys() == results[3].keys() and len(results[1]) == 4
    for key, alone in results[1].items():
        assert close(alone, results[3][key]), key
    assert tiny_runtime.engine.batcher.largest >= 2


#: The stated bf16 agreement: signals within 2e-2 (relative), and a greedy token may differ only where the
#: two best tokens' probabilities are that close (a GPU's batched kernels round differently from batch 1).
BF16_TOLERANCE = 2e-2


def test_bfloat16_runs_in_a_batch_agree_with_their_runs_alone_within_the_stated_tolerance() -> None:
    import torch

    from explorer.engine.loader import tiny_random_model

    lm = tiny_random_model(seed=0)  # its own copy: the shared one may carry hooks of other tests' engines
    lm.model.to(torch.bfloat16)
    lm.dtype = "bfloat16"
    engine = Engine(lm)
    prompts = ["Question: who wrote Hamlet?\nAnswer:", "The arena in Lewiston seats", "Once upon a time"]
    alone = [engine.generate(p, max_new_tokens=8, attention=True, ignore_eos=True) for p in prompts]
    batching.enable(engine)
    batched: list[Any] = [None] * len(prompts)

    def one(i: int) -> None:
        batched[i] = engine.generate(prompts[i], max_new_tokens=8, attention=True, ignore_eos=True)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        batching.disable(engine)
    for a, b in zip(alone, batched, strict=True):
        for ta, tb in zip(a.tokens, b.tokens, strict=True):
            for key in ("prob", "entropy", "logprob", "amax"):
                if ta.signals[key] is not None:
                    assert math.isclose(ta.signals[key], tb.signals[key], rel_tol=BF16_TOLERANCE, abs_tol=1e-4), key
            if ta.id != tb.id:  # only a near-tie may go the other way, and the spans part there
                (_, p1), (_, p2) = ta.top[:2]
                assert abs(p1 - p2) <= BF16_TOLERANCE * p1
                break
