"""Choosing the attention backend (``--attn``), hub ids from the Hugging Face cache, and the words that go with them.

A backend whose kernels never materialise attention weights (flash attention on a GPU) is
stood in for by a real kernel registered with transformers' AttentionInterface that runs the
family's own attention and returns no weights, which is what flash attention gives the explorer. Methods that
need no attention must run on it; DRAGIN must stop with a fix the user can type.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from explorer.cli import build_parser
from explorer.cli import main as cli_main
from explorer.engine.generation import Engine
from explorer.engine.loader import load_model
from explorer.engine.tiny import tiny_model
from explorer.errors import ModelError
from explorer.methods.base import run_question
from explorer.runtime import Runtime

WEIGHTLESS = "no-weights-kernel"
QUESTION = "Which actress from SuperMansion had a recurring role on Workaholics?"
SHORT = {"max_length": 10, "fewshot": 1, "answer_tokens": 4}


def _register_weightless() -> None:
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import AttentionInterface

    from explorer.engine.attention import eager_for

    def weightless(module, query, key, value, attention_mask, **kwargs):
        out, _ = eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # the family's own kernel
        return out, None

    AttentionInterface.register(WEIGHTLESS, weightless)
    AttentionMaskInterface.register(WEIGHTLESS, eager_mask)


@pytest.fixture(scope="module")
def weightless_runtime(demo_retriever) -> Runtime:
    _register_weightless()
    lm = tiny_model("llama", seed=5, attn_implementation=WEIGHTLESS)
    assert lm.model.config._attn_implementation == WEIGHTLESS
    return Runtime(engine=Engine(lm), retriever=demo_retriever, corpus={"spec": "demo"})


@pytest.mark.parametrize("method,config", [
    ("wo", {}), ("sr", {}), ("flare", {"max_rounds": 2}), ("drrag", {"judge": "llm", "k": 2, "k1": 1, "k2": 2}),
    ("blendfilter", {"top_k": 2, "internal_tokens": 8, "filter_tokens": 4}),
    ("seakr", {"k": 3, "max_steps": 1, "step_tokens": 6, "candidates": 1, "compare_estimators": False}),
])
def test_methods_without_attention_run_on_a_backend_without_weights(weightless_runtime, method, config) -> None:
    trace = run_question(method, QUESTION, weightless_runtime, config={**SHORT, **config})
    assert trace.status == "complete", trace.error
    assert trace.model["attention_signals"] == "none" and trace.model["attn_implementation"] == WEIGHTLESS
    assert trace.answer is not None


@pytest.mark.parametrize("variant", ["paper", "reference"])
def test_dragin_on_a_backend_without_weights_stops_with_a_fix(weightless_runtime, variant) -> None:
    trace = run_question("dragin", QUESTION, weightless_runtime, variant=variant, config=SHORT)
    assert trace.status == "error"
    assert WEIGHTLESS in trace.error and "never materialise" in trace.error
    assert "--attn auto" in trace.error and "--attn eager" in trace.error


def _save(arch: str, folder: Path) -> Path:
    lm = tiny_model(arch, seed=1)
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("arch,auto", [("llama", "sdpa"), ("gemma2", "eager"), ("falcon", "eager")])
def test_auto_picks_a_backend_whose_weights_the_explorer_can_read(tmp_path: Path, arch: str, auto: str) -> None:
    folder = _save(arch, tmp_path / arch)
    lm = load_model(str(folder), progress=lambda _m: None)
    assert lm.attn_implementation == auto and lm.extra["attn_requested"] == "auto"
    engine = Engine(lm)
    assert engine.probe.readable
    gen = engine.generate("Question: " + QUESTION + "\nAnswer:", max_new_tokens=6)
    assert all(t.amax is not None for t in gen.tokens[:-1])


def test_gemma2_refuses_sdpa_with_a_fix_the_user_can_apply(tmp_path: Path) -> None:
    folder = _save("gemma2", tmp_path / "gemma2")
    with pytest.raises(ModelError) as info:
        load_model(str(folder), attn_implementation="sdpa", progress=lambda _m: None)
    assert "--attn sdpa" in info.value.message
    assert "--attn auto" in info.value.fix and "--attn eager" in info.value.fix and "EXPLORER_ATTN" in info.value.fix


def test_model_info_says_what_the_backend_means(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _save("llama", tmp_path / "llama")
    assert cli_main(["model", "info", "--model", str(folder), "--attn", "sdpa"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split("  ")[0] == "attention")
    assert "sdpa" in line and "probe on the last layer" in line and "need" not in line
    assert cli_main(["model", "info", "--model", str(folder)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split("  ")[0] == "attention")
    assert "picked by --attn auto" in line


def test_attn_option_defaults_to_auto_or_explorer_attn(monkeypatch: pytest.MonkeyPatch) -> None:
    from explorer.ui.serving import server

    base = ["--method", "wo", "--question", "q"]
    monkeypatch.delenv("EXPLORER_ATTN", raising=False)
    assert build_parser().parse_args(["run", *base]).attn == "auto"
    assert "auto (default" in build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    monkeypatch.setenv("EXPLORER_ATTN", "eager")
    parser = build_parser()
    assert parser.parse_args(["run", *base]).attn == "eager"
    assert parser.parse_args(["eval", "--dataset", "demo", "--methods", "wo"]).attn == "eager"
    assert parser.parse_args(["sweep", "--dataset", "demo", "--method", "dragin", "--param", "threshold",
                              "--values", "0.1,0.2"]).attn == "eager"
    assert parser.parse_args(["run", *base, "--attn", "sdpa"]).attn == "sdpa"
    assert server.parse_args([]).attn == "eager"


def test_run_command_threads_attn_into_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _save("llama", tmp_path / "llama")
    out = tmp_path / "trace.json"
    code = cli_main(["run", "--method", "wo", "--question", QUESTION, "--model", str(folder), "--attn", "eager",
                     "--set", "max_length=8", "--set", "fewshot=0", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["model"]["attn_implementation"] == "eager"


# --- hub ids ---------------------------------------------------------------------------------------

def _hub_layout(hub: Path, repo_id: str, commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """The Hugging Face cache layout (models--org--name/refs/main, snapshots/<commit>/...) holding a tiny model."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return _save("qwen2", repo / "snapshots" / commit)


def test_a_hub_id_loads_from_the_hugging_face_cache_when_offline(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snapshot = _hub_layout(tmp_path / "hf" / "hub", "tiny-org/tiny-qwen")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model("tiny-org/tiny-qwen", progress=lambda _m: None)
    assert lm.name == "tiny-org/tiny-qwen" and lm.source == "hub:tiny-org/tiny-qwen"
    assert lm.extra["hub_revision"] == snapshot.name
    reference = tiny_model("qwen2", seed=1)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(lm.model(ids).logits, reference.model(ids).logits, atol=1e-5)  # same weights
    # Without the switch, an unreachable Hub also falls back to the cache instead of failing.
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    assert load_model("tiny-org/tiny-qwen", progress=lambda _m: None).extra["hub_revision"] == snapshot.name


def test_a_hub_id_not_in_the_cache_offline_says_every_way_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as info:
        load_model("tiny-org/absent-model", progress=lambda _m: None)
    assert str(tmp_path / "hf" / "hub") in info.value.message and "HF_HUB_OFFLINE" in info.value.message
    assert "hf download tiny-org/absent-model" in info.value.fix and "HF_HOME" in info.value.fix
