"""One configuration resolution: the command line, the app's API and the evaluation run the same config.

The same question and settings through ``python -m explorer run``, the app's ``/run`` endpoint and
an evaluation give identical configs (the embedded model's DRAGIN preset θ = 0.3 included, which
the command line used to skip), identical records of where each value came from, and identical
traces apart from ids, timestamps, timings and the gold answer only an evaluation knows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from explorer.cli import main
from explorer.eval.runner import EvalSettings, build_arms, run_evaluation
from explorer.runtime import open_runtime
from explorer.store import RunStore
from explorer.trace import Trace
from explorer.ui.api import endpoints as api
from explorer.ui.page import controls
from explorer.ui.runs.controller import RunController, RuntimeHolder
from tests.test_eval_runner import canonical as eval_canonical

#: Every surface gets these as the user's; one exemplar and two passages keep the three runs' prompts
#: short (their passes over the prompt are most of the test's time).
SETTINGS = {"max_length": 24, "answer_tokens": 4, "fewshot": 1, "top_k": 2}


def first_demo_question() -> str:
    path = Path(__file__).resolve().parent.parent / "corpora/demo/questions.jsonl"
    return json.loads(path.read_text().splitlines()[0])["question"]


def canonical(trace: Trace) -> dict[str, Any]:
    """The eval tests' canonical form, without ``gold`` (the evaluation knows it, a typed question not)."""
    return eval_canonical(trace, also=("gold",))


@pytest.mark.slow
def test_cli_api_and_evaluation_resolve_and_run_alike(tmp_path: Path) -> None:
    question = first_demo_question()
    out = tmp_path / "cli.json"
    # The same thread count on every surface: float sums change in their last bits with it.
    argv = ["run", "--method", "dragin", "--question", question, "--json", str(out),
            "--threads", str(torch.get_num_threads())]
    for name, value in SETTINGS.items():
        argv += ["--set", f"{name}={value}"]
    assert main(argv) in (0, 1)
    from_cli = Trace.from_json(out.read_text())

    store = RunStore(tmp_path / "runs.sqlite")
    holder = RuntimeHolder(lambda: open_runtime("embedded", "demo"), "embedded on demo")
    controller = RunController(store, holder)
    from_api = api.run_settings(controller, controls.model_name("embedded"), question, "dragin", "",
                                json.dumps(SETTINGS))

    settings = EvalSettings(name="same-config", datasets=["demo"], limit=1, model="embedded", corpus="demo",
                            arms=build_arms(["dragin"], settings=[f"{k}={v}" for k, v in SETTINGS.items()]))
    run_evaluation(settings, store, show_progress=False)
    (_row, from_eval), = store.traces(evaluation="same-config")

    assert from_cli.config["threshold"] == 0.3, "the embedded model's preset applies on the command line too"
    assert from_cli.config_sources["threshold"] == "preset"
    assert {k: from_cli.config_sources[k] for k in SETTINGS} == {k: "user" for k in SETTINGS}
    assert from_cli.config == from_api.config == from_eval.config
    assert from_cli.config_sources == from_api.config_sources == from_eval.config_sources
    assert canonical(from_cli) == canonical(from_api) == canonical(from_eval)
