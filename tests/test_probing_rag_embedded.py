"""Probing-RAG on the embedded model with its shipped prober: every recorded probability is the prober's
reading of the answer's hidden states, recomputed here by a separate forward pass and by hand."""

from __future__ import annotations

import pytest
import torch

from explorer.engine.generation import Engine
from explorer.methods.base import run_question
from explorer.methods.probing_rag import prober as prober_mod
from explorer.runtime import Runtime

QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"


@pytest.mark.slow
def test_the_shipped_probers_probability_on_the_embedded_model_matches_a_recomputation(
        embedded_lm, demo_retriever, tmp_path, monkeypatch) -> None:
    model = embedded_lm.model
    shipped = prober_mod.read_prober(prober_mod.SHIPPED / prober_mod.model_key(model.config))
    monkeypatch.setattr(prober_mod, "user_folder", lambda: tmp_path)  # no prober trained on this machine
    runtime = Runtime(engine=Engine(embedded_lm), retriever=demo_retriever, corpus={"name": "demo"})
    # θ = 0 searches after every answer until the cap: one search, two answers read by the prober
    trace = run_question("probing_rag", QUESTION, runtime, raise_errors=True,
                         config={"threshold": 0.0, "max_retrievals": 1, "max_length": 8, "fewshot": 1})
    trace.validate()
    checks = trace.of_kind("check")
    assert len(checks) == 2 and len(trace.of_kind("retrieval")) == 1
    state = shipped.head.state_dict()
    for check in checks:
        assert check.payload["layer"] == shipped.layer and check.payload["signal"] == "prober_p"
        span = trace.event(check.payload["span"])
        gen_ids = [t["id"] for t in span.payload["tokens"]]
        prompt_ids = runtime.engine.encode_prompt(span.payload["prompt"])[1]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt_ids + gen_ids]), output_hidden_states=True)
        h = out.hidden_states[shipped.layer + 1][0, len(prompt_ids):].mean(0).float()
        normed = (h - h.mean()) / torch.sqrt(h.var(unbiased=False) + 1e-5) * state["norm.weight"] + state["norm.bias"]
        p = torch.sigmoid(normed @ state["linear.weight"][0] + state["linear.bias"][0]).item()
        assert check.payload["units"][0]["value"] == pytest.approx(p, abs=1e-3)
        assert check.payload["units"][0]["eligible"] == (check.payload["round"] < 1)
