"""Probing-RAG: the prober's probability against a recomputation by hand, its training's determinism,
and the error when no prober matches the model."""

from __future__ import annotations

import re

import pytest
import torch

from explorer.engine.generation import Engine
from explorer.errors import ConfigError
from explorer.methods.base import run_question
from explorer.methods.probing_rag import prober as prober_mod
from explorer.runtime import Runtime

QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def _tiny_prober(config, layer: int, seed: int = 3) -> prober_mod.Prober:
    """A prober for the tiny model fitted on random states (its numbers only need to be reproducible)."""
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(16, config.hidden_size, generator=gen)
    labels = (torch.arange(16) % 2).float()
    head = prober_mod.fit_head(states, labels, seed=seed, steps=20)
    return prober_mod.Prober(head=head, layer=layer, key=prober_mod.model_key(config), manifest={})


def test_fit_head_is_deterministic_given_its_seed() -> None:
    gen = torch.Generator().manual_seed(0)
    states, labels = torch.randn(24, 16, generator=gen), (torch.rand(24, generator=gen) > 0.5).float()
    a = prober_mod.fit_head(states, labels, seed=7, steps=30).state_dict()
    b = prober_mod.fit_head(states, labels, seed=7, steps=30).state_dict()
    c = prober_mod.fit_head(states, labels, seed=8, steps=30).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["linear.weight"], c["linear.weight"])


def test_no_prober_for_the_model_is_a_clear_error(tiny_lm, tmp_path) -> None:
    with pytest.raises(ConfigError) as err:
        prober_mod.load_prober(tiny_lm.model.config, folder=tmp_path)
    text = str(err.value) + str(getattr(err.value, "fix", ""))
    assert "llama-h64-l2" in text and "train-prober" in text


def test_saved_prober_reads_back_the_same(tiny_lm, tmp_path) -> None:
    made = _tiny_prober(tiny_lm.model.config, layer=1)
    made.save(tmp_path)
    back = prober_mod.load_prober(tiny_lm.model.config, folder=tmp_path)
    x = torch.randn(tiny_lm.model.config.hidden_size)
    assert back.layer == 1 and back.probability(x) == pytest.approx(made.probability(x), abs=1e-7)


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_prober_probability_matches_a_recomputation_by_hand(tiny_runtime, tmp_path, monkeypatch,
                                                            threshold: float) -> None:
    model = tiny_runtime.engine.model
    made = _tiny_prober(model.config, layer=0)
    made.save(tmp_path)
    monkeypatch.setattr(prober_mod, "user_folder", lambda: tmp_path)
    trace = run_question("probing_rag", QUESTION, tiny_runtime, config={"threshold": threshold, "max_length": 8,
                                                                        "max_retrievals": 2}, raise_errors=True)
    trace.validate()
    checks = trace.of_kind("check")
    assert checks and all(c.payload["signal"] == "prober_p" and c.payload["layer"] == 0 for c in checks)
    # threshold 0 fires until the cap (2 searches, so 3 checks); threshold 1 never fires
    assert len(trace.of_kind("retrieval")) == (2 if threshold == 0.0 else 0)
    assert len(checks) == (3 if threshold == 0.0 else 1)
    engine = tiny_runtime.engine
    state = made.head.state_dict()
    for check in checks:
        span = trace.event(check.payload["span"])
        gen_ids = [t["id"] for t in span.payload["tokens"]]
        prompt_ids = engine.encode_prompt(span.payload["prompt"])[1]
        assert len(prompt_ids) == span.payload["prompt_tokens"]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt_ids + gen_ids]), output_hidden_states=True)
        h = out.hidden_states[1][0, len(prompt_ids):].mean(0)  # after decoder layer 0
        normed = (h - h.mean()) / torch.sqrt(h.var(unbiased=False) + 1e-5) * state["norm.weight"] + state["norm.bias"]
        p = torch.sigmoid(normed @ state["linear.weight"][0] + state["linear.bias"][0]).item()
        assert check.payload["units"][0]["value"] == pytest.approx(p, abs=1e-4)
        assert (check.payload["fired"] is not None) == (p > threshold and check.payload["round"] < 2)


@pytest.mark.parametrize("folder", sorted(p.name for p in prober_mod.SHIPPED.iterdir() if p.is_dir()))
def test_each_shipped_prober_loads_and_records_how_it_was_trained(folder: str) -> None:
    from types import SimpleNamespace

    path = prober_mod.SHIPPED / folder
    made = prober_mod.read_prober(path)
    m = made.manifest
    shape = re.fullmatch(r"(.+)-h(\d+)-l(\d+)", folder)
    assert shape is not None, folder
    name, hidden, layers = shape.group(1), int(shape.group(2)), int(shape.group(3))
    assert made.key == folder and m["hidden_size"] == hidden and 0 <= made.layer < layers
    command = m["trained_by"]
    assert command.startswith("python -m explorer train-prober --model ")
    assert f"--questions {m['questions']} " in command and command.endswith(f"--seed {m['seed']}")
    assert len(m["data_sha256"]) == 64 and m["train"] + m["held_out"] == m["questions"]
    assert 0.0 <= m["held_out_accuracy"] <= 1.0 and 0.5 <= m["held_out_majority"] <= 1.0
    # the method's own lookup finds it for a model of that name and shape (as a loaded model's config names it)
    config = SimpleNamespace(_name_or_path=f"some/where/{name}", hidden_size=hidden, num_hidden_layers=layers)
    found = prober_mod.load_prober(config, folder=prober_mod.SHIPPED)
    x = torch.randn(hidden)
    assert found.key == folder and found.probability(x) == pytest.approx(made.probability(x), abs=1e-7)
