"""TARG's small-N variance gate: its score against a recomputation, its decision, its seed, and the CLI.

The recorded prefixes' tokens are re-scored by one forward pass each (prompt + prefix), so the
log-probabilities the sampler recorded, each prefix's mean and their variance are all checked
against numbers computed here by the textbook definitions, not read back from the method.
"""

from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path

import pytest
import torch

from explorer.cli import main as cli_main
from explorer.engine.generation import Engine
from explorer.methods import common, prompts
from explorer.methods.base import make_config, run_question
from explorer.methods.targ.variance import mean_logprob, variance
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.views import case_stories
from explorer.ui.views.render import render_run, theta_range
from explorer.ui.views.view import ViewOptions

QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
BASE = {"gate": "variance", "max_length": 16, "answer_tokens": 4, "prefix_tokens": 6, "prefixes": 4}


@pytest.fixture(scope="module")
def tiny_runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def _run(runtime: Runtime, **config) -> Trace:
    trace = run_question("targ", QUESTION, runtime, config={**BASE, **config})
    assert trace.status == "complete", trace.error
    trace.validate()
    return trace


def _unit(trace: Trace) -> dict:
    return trace.of_kind("check")[0].payload["units"][0]


def _rescored(runtime: Runtime, trace: Trace, ids: list[int]) -> list[float]:
    """log p of each of ``ids`` after the run's prompt, from one full forward pass of prompt + ids."""
    cfg = make_config("targ", trace.config)
    _, prompt_ids, _ = runtime.engine.encode_prompt(prompts.build_prompt(QUESTION, shots=common.shots(cfg, QUESTION)))
    with torch.inference_mode():
        logits = runtime.engine.lm.model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float()
    p = len(prompt_ids)
    logp = torch.log_softmax(logits[p - 1: p - 1 + len(ids)], dim=-1)
    return [float(logp[i, t]) for i, t in enumerate(ids)]


def test_the_variance_is_recomputed_from_the_prefixes_tokens(tiny_runtime) -> None:
    trace = _run(tiny_runtime, threshold=0.0)
    check = trace.of_kind("check")[0].payload
    unit = _unit(trace)
    assert check["signal"] == "prefix variance" and check["gate"] == "variance"
    prefixes = unit["prefixes"]
    assert len(prefixes) + unit["empty_prefixes"] == 4
    assert len(prefixes) >= 2
    assert unit["sampling"] == {"temperature": 1.0, "top_k": None, "top_p": None, "seed": 0, "n": 4}
    rescored_means = []
    for prefix in prefixes:
        assert 1 <= len(prefix["ids"]) <= 6
        rescored = _rescored(tiny_runtime, trace, prefix["ids"])
        assert prefix["logprobs"] == pytest.approx(rescored, abs=1e-4)
        assert prefix["value"] == pytest.approx(sum(prefix["logprobs"]) / len(prefix["logprobs"]), rel=1e-9)
        rescored_means.append(sum(rescored) / len(rescored))
    recorded = [p["value"] for p in prefixes]
    mean = sum(recorded) / len(recorded)
    by_hand = sum((v - mean) ** 2 for v in recorded) / (len(recorded) - 1)
    assert unit["value"] == pytest.approx(by_hand, rel=1e-9)
    assert unit["scores"]["variance"] == unit["value"]
    assert unit["value"] == pytest.approx(statistics.variance(rescored_means), rel=1e-2, abs=1e-7)
    # The other two scores stay as the draft's: the margin and entropy gates read the same draft.
    assert unit["scores"]["margin"] == pytest.approx(sum(unit["margins"]) / len(unit["margins"]))
    assert unit["scores"]["entropy"] == pytest.approx(sum(unit["entropies"]) / len(unit["entropies"]))
    assert trace.costs.sampled_sequences == 4


def test_the_gate_opens_when_the_variance_exceeds_tau(tiny_runtime) -> None:
    score = _unit(_run(tiny_runtime, threshold=0.0))["value"]
    assert score > 0.0
    for tau, opens in ((score * 0.5, True), (score * 2.0, False)):
        trace = _run(tiny_runtime, threshold=tau)
        check = trace.of_kind("check")[0].payload
        assert _unit(trace)["value"] == pytest.approx(score, rel=1e-9)
        assert (check["fired"] == 0) is opens
        assert len(trace.of_kind("retrieval")) == (1 if opens else 0)
        assert len(trace.of_kind("trigger")) == (1 if opens else 0)
        if not opens:  # the answer continues the greedy draft, not a sampled prefix
            assert trace.output.startswith(trace.of_kind("generation")[0].payload["text"].strip())


def test_the_same_seed_draws_the_same_prefixes_and_another_seed_others(tiny_runtime) -> None:
    def drawn(seed: int) -> tuple[list[list[int]], float]:
        unit = _unit(_run(tiny_runtime, threshold=100.0, seed=seed))
        return [p["ids"] for p in unit["prefixes"]], unit["value"]

    first, again, other = drawn(0), drawn(0), drawn(7)
    assert first == again
    assert other[0] != first[0]
    assert other[1] != first[1]


def test_score_helpers_state_their_edges() -> None:
    assert mean_logprob([]) is None
    assert variance([-1.0]) is None
    assert variance([-1.0, -3.0]) == pytest.approx(2.0)  # n - 1 in the denominator


def test_the_variance_gate_runs_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``eval --set targ.gate=variance``: the evaluation's seed becomes the run's sampling seed."""
    db = tmp_path / "runs.sqlite"
    code = cli_main(["eval", "--dataset", "demo", "--methods", "targ", "--limit", "1", "--corpus", "demo",
                     "--model", "random:tiny", "--db", str(db), "--name", "v", "--quiet", "--seed", "3",
                     "--set", "targ.gate=variance", "--set", "targ.prefixes=3", "--set", "prefix_tokens=4",
                     "--set", "max_length=8"])
    assert code == 0, capsys.readouterr().err
    [(_, trace)] = list(RunStore(db).traces(evaluation="v"))
    assert trace.status == "complete", trace.error
    trace.validate()
    assert trace.config["gate"] == "variance" and trace.config["seed"] == 3
    check = trace.of_kind("check")[0].payload
    assert check["signal"] == "prefix variance"
    unit = check["units"][0]
    assert len(unit["prefixes"]) + unit["empty_prefixes"] == 3
    assert unit["sampling"]["seed"] == 3


def _figure(markup: str) -> dict:
    found = re.search(r'data-name="signal" style="[^"]*" data-fig="([^"]*)"', markup)
    assert found, "no decision chart in the view"
    return json.loads(html.unescape(found.group(1)))


def test_the_page_draws_the_variance_as_the_decision_and_tells_it(tiny_runtime) -> None:
    trace = _run(tiny_runtime, threshold=0.0)
    unit = _unit(trace)
    markup = render_run(trace, ViewOptions(interactive=True))
    fig = _figure(markup)
    assert fig["data"][0]["y"] == pytest.approx([unit["value"]])  # one bar: the question's variance
    assert fig["layout"]["yaxis"]["title"]["text"] == "prefix variance"
    assert "Decision signal: prefix variance" in markup
    assert "how much a few drafts sampled without passages differ" in html.unescape(markup)
    lo, hi, _, recorded = theta_range(trace)
    assert recorded == 0.0 and lo <= unit["value"] <= hi
    told = case_stories._targ(trace, None)
    said = " ".join(told.facts)
    assert f"its {len(unit['prefixes'])} sampled prefixes was" in said and "over τ = 0" in said


def test_each_gate_gets_its_own_preset_or_the_model_free_default() -> None:
    """τ is read on the chosen gate's scale: the margin's preset must not reach a variance run."""
    from explorer.methods.resolve import resolve_config

    smol = "SmolLM2-135M-Instruct"
    cases = [({}, 0.4, "preset"), ({"gate": "variance"}, 0.6, "preset"), ({"gate": "entropy"}, 0.5, "paper"),
             ({"gate": "variance", "threshold": "0.2"}, 0.2, "user")]
    for given, tau, source in cases:
        resolved = resolve_config("targ", None, smol, given)
        assert (resolved.config.threshold, resolved.sources["threshold"]) == (tau, source), given
    assert resolve_config("targ", None, "Gemma-3-270M", {"gate": "variance"}).sources["threshold"] == "paper"
