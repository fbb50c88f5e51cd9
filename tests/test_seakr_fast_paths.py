"""SEAKR's trace is the same whether the sampled rows repeat the prompt's cache or read it once
(explorer.engine.shared_prefix), and whether or not the prompts' openings come from the prefix cache.

Both are the same computation split differently, so the tokens of every span and sample must be the same
and every signal equal up to float rounding; the faster paths must actually have been taken. The tiny
random model is a Llama with grouped-query attention like the embedded SmolLM2, so its caches are split
and shared the same way, in a fraction of the time; a retrieval on every step (``delta``) makes sure the
re-ranking contexts are measured on both paths.
"""

from __future__ import annotations

import pytest

from explorer.engine.generation import Engine
from explorer.engine.prefix_cache import PrefixCache
from explorer.methods import run_question
from explorer.runtime import Runtime
from explorer.trace import Trace

QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
SMALL = {"k": 5, "step_tokens": 16, "max_steps": 2, "candidates": 2, "max_length": 32, "answer_tokens": 12,
         "fewshot": 2, "delta": -1e6}


def _spans(trace: Trace) -> list[tuple]:
    return [(e.payload["purpose"], [t["id"] for t in e.payload["tokens"]], e.payload["stopped_by"])
            for e in trace.of_kind("generation")]


def _samples(trace: Trace) -> list[list[tuple]]:
    return [[(s["row"], s["text"], s["stopped_by"]) for s in e.payload["samples"]]
            for e in trace.of_kind("uncertainty") if e.payload["estimator"] == "gram"]


def _values(trace: Trace) -> list[tuple[str, float | None]]:
    return [(e.payload["estimator"], e.payload["value"]) for e in trace.of_kind("uncertainty")]


def test_shared_prompt_rows_and_the_prefix_cache_leave_the_trace_unchanged(tiny_lm, demo_retriever) -> None:
    before = Engine(tiny_lm)
    before.shares_prefix = False  # every row holds its own copy of the prompt's keys and values, as before
    now = Engine(tiny_lm)
    now.prefix_cache = PrefixCache()
    a = run_question("seakr", QUESTION, Runtime(engine=before, retriever=demo_retriever, corpus={"name": "demo"}),
                     config=SMALL)
    b = run_question("seakr", QUESTION, Runtime(engine=now, retriever=demo_retriever, corpus={"name": "demo"}),
                     config=SMALL)
    assert now.shares_prefix is True and before.shares_prefix is False
    assert now.prefix_cache.hits > 0, "the contexts after the first reuse the encoded opening"
    assert a.status == b.status == "complete"
    assert _spans(b) == _spans(a)
    assert _samples(b) == _samples(a)
    searched = [[(e.payload["query"], [h["id"] for h in e.payload["hits"]]) for e in t.of_kind("retrieval")]
                for t in (a, b)]
    assert searched[1] == searched[0] and searched[0], "the run retrieved, so re-rank contexts were measured"
    assert [e.payload["chosen"] for e in b.of_kind("rerank")] == [e.payload["chosen"] for e in a.of_kind("rerank")]
    assert b.output == a.output and b.answer == a.answer
    for (name_a, va), (name_b, vb) in zip(_values(a), _values(b), strict=True):
        assert name_a == name_b and (va is None) == (vb is None)
        if va is not None:
            assert vb == pytest.approx(va, rel=1e-3, abs=1e-3), name_a
    tokens_a = [t for e in a.of_kind("generation") for t in e.payload["tokens"]]
    tokens_b = [t for e in b.of_kind("generation") for t in e.payload["tokens"]]
    for x, y in zip(tokens_a, tokens_b, strict=True):
        assert x["id"] == y["id"] and x["signals"].keys() == y["signals"].keys()
        for name, value in x["signals"].items():
            if isinstance(value, float):
                assert y["signals"][name] == pytest.approx(value, abs=1e-4), name
