"""BlendFilter end to end: three queries, a filter verdict per set, the union, the answer; a valid trace."""

from __future__ import annotations

import pytest

from explorer.engine.generation import Engine
from explorer.errors import ConfigError
from explorer.methods import run_question
from explorer.methods.base import make_config
from explorer.methods.blendfilter.method import filter_prompt
from explorer.runtime import Runtime
from explorer.summary import render_text
from explorer.trace import Trace

SUPERMANSION = "Which actress from SuperMansion had a recurring role on Workaholics?"
# Small K and short generations keep the slow test short; the flow is the same as with the defaults.
SHORT = {"top_k": 3, "max_length": 32, "internal_tokens": 24, "filter_tokens": 8, "fewshot": 2, "answer_tokens": 8}


def check_blendfilter_trace(trace: Trace, k: int) -> None:
    """Invariants every BlendFilter trace keeps, whatever the model said."""
    trace.validate()
    assert trace.status == "complete", trace.error
    events = trace.events
    queries = trace.of_kind("query")
    assert [q.payload["set"] for q in queries] == ["original", "external", "internal"]
    original, external, internal = (q.payload for q in queries)
    assert original["text"] == trace.question and original["parts"] == [{"source": "original", "text": trace.question}]
    for blended, name in ((external, "external"), (internal, "internal")):
        generated, asked = blended["parts"]
        assert generated["source"] == name and asked == {"source": "original", "text": trace.question}
        gen = events[generated["generation"]]
        assert gen.kind == "generation" and gen.payload["purpose"] == "augment"
        assert gen.payload["augmentation"] == name and gen.payload["text"].strip() == generated["text"]
        assert blended["text"].endswith(trace.question)
    # the external augmentation read the passages of the original query
    ext_gen = events[external["parts"][0]["generation"]]
    assert ext_gen.payload["retrieval_event"] == trace.of_kind("retrieval")[0].id
    assert "Context:" in ext_gen.payload["prompt"]
    assert "Context:" not in events[internal["parts"][0]["generation"]].payload["prompt"]

    retrievals = trace.of_kind("retrieval")
    assert [r.payload["set"] for r in retrievals] == ["original", "external", "internal"]
    assert all(len(r.payload["hits"]) <= k for r in retrievals)
    filters = trace.of_kind("filter")
    assert [f.payload["set"] for f in filters] == ["original", "external", "internal"]
    kept_all: list[str] = []
    for f, r in zip(filters, retrievals, strict=True):
        p = f.payload
        assert p["retrieval"] == r.id
        assert p["passage_ids"] == [h["id"] for h in r.payload["hits"]]
        assert p["kept"] == [p["passage_ids"][n - 1] for n in p["numbers"]]
        assert set(p["kept"]) | set(p["dropped"]) == set(p["passage_ids"]) and not set(p["kept"]) & set(p["dropped"])
        assert events[p["generation"]].payload["purpose"] == "filter"
        assert events[p["generation"]].payload["text"] == p["raw_answer"]
        if p["status"] in ("unparseable", "out_of_range"):
            assert p["kept"] == []
        kept_all += p["kept"]
    selection = trace.of_kind("selection")[-1].payload
    assert selection["passage_ids"] == list(dict.fromkeys(kept_all))
    assert selection["before_filter"] == list(dict.fromkeys(h["id"] for r in retrievals for h in r.payload["hits"]))
    answer_gen = [e for e in trace.of_kind("generation") if e.payload["purpose"] == "answer"][0]
    assert answer_gen.payload["passages"] == selection["passage_ids"]
    assert trace.of_kind("answer")
    assert trace.costs.retrievals == 3
    # two augmentations, three filters, one answer (and one more if the answer phrase had to be completed)
    completed = trace.of_kind("answer")[-1].payload["completed_phrase"]
    assert trace.costs.llm_calls == 6 + int(completed)


def test_blendfilter_runs_on_the_tiny_model(tiny_lm, demo_retriever) -> None:
    """A random model writes nonsense verdicts: the trace must still be whole and say what was read."""
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("blendfilter", SUPERMANSION, runtime, config=SHORT)
    check_blendfilter_trace(trace, 3)
    unreadable = [f for f in trace.of_kind("filter") if f.payload["status"] in ("unparseable", "out_of_range")]
    notes = [n for n in trace.of_kind("note") if "could not be read" in n.payload["message"]]
    assert len(notes) == len(unreadable)
    assert Trace.from_json(trace.to_json()).to_dict() == trace.to_dict()


@pytest.mark.slow
def test_blendfilter_supermansion_on_the_embedded_model(embedded_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("blendfilter", SUPERMANSION, runtime, config=SHORT)
    check_blendfilter_trace(trace, 3)
    # BM25 finds both gold passages for the question itself (the paper's point is the union of three sets)
    assert {"demo-0064", "demo-0065"} <= set(trace.of_kind("selection")[-1].payload["before_filter"])
    text = render_text(trace)
    assert "filter of the original set" in text and "selected" in text and "before filtering" in text


def test_unfiltered_union_and_single_query(tiny_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    trace = run_question("blendfilter", SUPERMANSION, runtime,
                         config={**SHORT, "filter": False, "external_query": False, "internal_query": False})
    trace.validate()
    assert not trace.of_kind("filter")
    selection = trace.of_kind("selection")[-1].payload
    assert selection["passage_ids"] == selection["before_filter"] == [h["id"] for h in
                                                                       trace.of_kind("retrieval")[0].payload["hits"]]
    assert trace.costs.llm_calls in (1, 2) and trace.costs.retrievals == 1


def test_config_is_validated() -> None:
    cfg = make_config("blendfilter", {})
    assert cfg.top_k == 5 and cfg.filter
    with pytest.raises(ConfigError, match="every query"):
        make_config("blendfilter", {"original_query": "false", "external_query": "no", "internal_query": "0"})
    with pytest.raises(ConfigError):
        make_config("blendfilter", {"top_k": 0})
    with pytest.raises(ConfigError):
        make_config("blendfilter", {"filter_tokens": "many"})


def test_filter_prompt_numbers_the_passages(demo_retriever) -> None:
    hits = demo_retriever.search(SUPERMANSION, 4)
    prompt = filter_prompt(SUPERMANSION, hits)
    tail = prompt.rsplit("Passages:\n", 1)[1]
    assert [line.split("]")[0] for line in tail.splitlines()[:4]] == ["[1", "[2", "[3", "[4"]
    assert tail.rstrip().endswith("Helpful passages:")
    assert SUPERMANSION in tail
