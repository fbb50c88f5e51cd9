"""Turning a model spec ("embedded", a folder, a .gguf file, a hub id) into a ready :class:`LoadedModel`.

Every way a load can go wrong is turned into a :class:`ModelError` that says what to do, because
users type these specs into the CLI and the app. Loaded models are put into a deterministic
state (eval mode, greedy decoding by default) so two runs with the same inputs give the same
trace.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.engine.embedded import (
    EMBEDDED_NAME,
    WHEEL_REQUIREMENT,
    embedded_tokenizer_dir,
    ensure_embedded_model,
    read_manifest,
)
from explorer.engine.model import LoadedModel
from explorer.errors import ModelError

DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16", "half": "float16",
                  "bf16": "bfloat16"}
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flex_attention")
#: Backends from which attention signals can be read (see explorer.engine.attention).
SIGNAL_ATTN = ("eager", "sdpa")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_TRUTHY = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class _Resolved:
    """Where to load from: a folder (local or hub id) and, for GGUF, the file inside it."""

    location: str
    kind: str  # "embedded", "folder", "gguf" or "hub"
    gguf_file: str | None = None


def normalise_dtype(dtype: str) -> str:
    """The canonical dtype name, or a ModelError listing the choices."""
    name = _DTYPE_ALIASES.get(str(dtype).strip().lower(), str(dtype).strip().lower())
    if name not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}", fix=f"use one of {', '.join(DTYPES)}")
    return name


def check_device(device: str) -> str:
    """Validate a torch device string and that the hardware behind it exists."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ModelError(f"unknown device {device!r}", fix="use cpu, cuda, cuda:N or mps") from exc
    if parsed.type == "cpu":
        return "cpu"
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelError(f"device {device!r} asked for, but no CUDA GPU is available", fix="use --device cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ModelError(f"device {device!r} does not exist ({torch.cuda.device_count()} GPU(s) found)",
                             fix="use cuda:0 or --device cpu")
        return str(parsed)
    if parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise ModelError("device 'mps' asked for, but Apple's MPS backend is not available",
                             fix="use --device cpu")
        return "mps"
    raise ModelError(f"unsupported device {device!r}", fix="use cpu, cuda, cuda:N or mps")


def check_attention(attn_implementation: str, need_attentions: bool) -> str:
    """Refuse attention settings that cannot work, before any weights are read."""
    if attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise ModelError(f"unknown attention implementation {attn_implementation!r}",
                         fix=f"use one of {', '.join(ATTN_IMPLEMENTATIONS)}")
    if need_attentions and attn_implementation not in SIGNAL_ATTN:
        raise ModelError(f"attention signals need attn_implementation=\"eager\" (or \"sdpa\", whose last layer the "
                         f"explorer reads through an eager probe), got {attn_implementation!r}: "
                         f"{attn_implementation} kernels never materialise attention weights",
                         fix="load the model with attn_implementation=\"eager\" (--attn eager) or \"sdpa\"")
    return attn_implementation


def _hub_offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUTHY for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _looks_like_path(spec: str) -> bool:
    """A spec that can only mean a local path (so a missing one is reported as such, not as a hub id)."""
    return (spec.startswith(("/", "./", "../", "~", ".\\")) or "\\" in spec or spec.endswith(".gguf")
            or spec.count("/") > 1 or spec in (".", ".."))


def resolve_spec(spec: str, progress: Callable[[str], None] = print) -> _Resolved:
    """Decide what ``spec`` names and check the files it needs are there."""
    spec = (spec or "").strip()
    if not spec:
        raise ModelError("no model given", fix="pass 'embedded', a model folder, a .gguf file or a hub id")
    if spec == "embedded":
        return _Resolved(str(ensure_embedded_model(progress)), "embedded")
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_local(path)
    if _looks_like_path(spec):
        raise ModelError("this model path does not exist", where=spec,
                         fix="check the path, or use 'embedded' for the packaged SmolLM2-135M-Instruct")
    if not _hub_offline() and not _hub_reachable():
        raise ModelError(f"{spec!r} is not a local path, and the Hugging Face Hub cannot be reached to fetch it "
                         "as a hub id (no network)", fix=_HUB_FIX)
    return _Resolved(spec, "hub")


_HUB_FIX = ("pass a local folder with config.json and weights, a .gguf file, or 'embedded'; "
            "a hub id works only with network access to huggingface.co")


def _hub_reachable() -> bool:
    """A quick name lookup, so an offline machine fails at once instead of after ~30 s of retries."""
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def _resolve_local(path: Path) -> _Resolved:
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return _Resolved(str(path.parent), "gguf", path.name)
        if path.name == "config.json":
            raise ModelError("this is a config file, not a model", where=str(path),
                             fix=f"pass its folder: {path.parent}")
        raise ModelError("this is neither a model folder nor a .gguf file", where=str(path),
                         fix="pass a folder with config.json and model weights, or a .gguf file")
    if (path / "config.json").is_file():
        _check_causal_config(path)
        has_weights = any((path / name).is_file() for name in _WEIGHT_FILES) or any(path.glob("*.safetensors"))
        if not has_weights:
            raise ModelError("config.json is there but no model weights", where=str(path),
                             fix="add model.safetensors (or pytorch_model.bin) to the folder, or pass a .gguf file")
        return _Resolved(str(path), "folder")
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return _Resolved(str(path), "gguf", ggufs[0].name)
    if len(ggufs) > 1:
        names = ", ".join(g.name for g in ggufs)
        raise ModelError(f"{path} holds several GGUF files ({names})", fix="pass the path of the one to load")
    raise ModelError("this folder has no config.json and no .gguf file, so it is not a model folder", where=str(path),
                     fix="pass a folder with config.json and model weights (model.safetensors), or a .gguf file")


def _check_causal_config(folder: Path) -> None:
    """Read config.json and refuse models that cannot generate text, before loading any weights."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config_path = folder / "config.json"
    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot read the model config: {exc}", where=str(config_path),
                         fix="make config.json a valid transformers config with a known model_type") from exc
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING or _is_encoder(config):
        raise ModelError(_not_causal_message(config), where=str(config_path), fix=_NOT_CAUSAL_FIX)


def _is_encoder(config: Any) -> bool:
    """True for encoder families (BERT, RoBERTa, ...) configured as encoders.

    These families also register a causal-LM class, so AutoModelForCausalLM would load them, but
    that class only generates sensibly when the config says ``is_decoder``; an ordinary encoder
    checkpoint would produce noise, so it is refused here.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    if getattr(config, "is_encoder_decoder", False):
        return True
    return type(config) in MODEL_FOR_MASKED_LM_MAPPING and not getattr(config, "is_decoder", False)


_NOT_CAUSAL_FIX = ("use a decoder (causal language) model such as Llama, Qwen, GPT-2 or SmolLM2; "
                   "encoders like BERT cannot generate text")


def _not_causal_message(config: Any) -> str:
    arch = ", ".join(getattr(config, "architectures", None) or []) or "no architectures listed"
    return f"model type {getattr(config, 'model_type', '?')!r} ({arch}) is not a causal language model"


def load_model(spec: str = "embedded", *, dtype: str = "float32", device: str = "cpu",
               attn_implementation: str = "eager", need_attentions: bool = False,
               progress: Callable[[str], None] = print) -> LoadedModel:
    """Load a causal LM and its tokenizer, ready for deterministic generation.

    ``need_attentions`` is for callers whose signals read attention weights (DRAGIN, FLARE's
    variants): it makes a non-eager attention implementation an error up front instead of a
    silent ``None`` mid-run. ``load_seconds`` covers the whole call, including a first-time
    conversion of the embedded model.
    """
    started = time.perf_counter()
    dtype = normalise_dtype(dtype)
    device = check_device(device)
    attn_implementation = check_attention(attn_implementation, need_attentions)
    resolved = resolve_spec(spec, progress)
    model, tokenizer = _load_weights(resolved, spec, dtype, device, attn_implementation)
    _make_deterministic(model, tokenizer)
    extra: dict[str, Any] = {}
    if resolved.kind == "embedded":
        name, source = EMBEDDED_NAME, "embedded"
        manifest = read_manifest(Path(resolved.location)) or {}
        weights = manifest.get("files", {}).get("model.safetensors", {})
        extra = {"weights": f"{WHEEL_REQUIREMENT} Q4_1 GGUF, de-quantized to float32",
                 "weights_sha256": str(weights.get("sha256", ""))[:16]}
    else:
        source = resolved.location if resolved.gguf_file is None else str(Path(resolved.location) / resolved.gguf_file)
        name = _display_name(model, resolved)
        if resolved.gguf_file:
            extra = {"gguf_file": resolved.gguf_file}
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, source=source, dtype=dtype, device=device,
                       attn_implementation=attn_implementation, load_seconds=time.perf_counter() - started,
                       extra=extra)


def _display_name(model: Any, resolved: _Resolved) -> str:
    if resolved.kind == "hub":
        return resolved.location
    if resolved.gguf_file:
        return Path(resolved.gguf_file).stem
    raw = str(getattr(model.config, "_name_or_path", "") or "")
    # A local load records the folder path; its last part is the readable name.
    return Path(raw).name if raw and Path(raw).name else Path(resolved.location).name


def _load_weights(resolved: _Resolved, spec: str, dtype: str, device: str, attn: str) -> tuple[Any, Any]:
    try:
        return _load_weights_from(resolved, spec, dtype, device, attn)
    except Exception as exc:
        # A cut-off download surfaces as whatever the parser tripped on (numpy's "cannot
        # reshape", struct's "unpack_from requires a buffer"): say what it really is.
        damage = _gguf_damage(Path(resolved.location) / resolved.gguf_file) if resolved.gguf_file else None
        if damage is not None:
            raise damage from exc
        raise


def _gguf_damage(path: Path) -> ModelError | None:
    """A ModelError when the GGUF file's own index does not fit in the file (truncated or corrupt), else None."""
    try:
        size = path.stat().st_size
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        reason = None if end <= size else f"its tensors need {end} bytes, the file has {size}"
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to read its own index is damage
        reason = f"{type(exc).__name__}: {_first_line(exc)}"
    if reason is None:
        return None
    return ModelError(f"the GGUF file is truncated or corrupt ({reason})", where=str(path),
                      fix="download it again (compare its size and checksum with the source), or pass another model")


def _load_weights_from(resolved: _Resolved, spec: str, dtype: str, device: str, attn: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "attn_implementation": attn}
    if resolved.gguf_file:
        kwargs["gguf_file"] = resolved.gguf_file
    if resolved.kind in ("embedded", "folder", "gguf"):
        kwargs["local_files_only"] = True
    tok_kwargs = {k: kwargs[k] for k in ("gguf_file", "local_files_only") if k in kwargs}
    try:
        model = AutoModelForCausalLM.from_pretrained(resolved.location, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(resolved.location, **tok_kwargs)
        model.to(device)
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise ModelError(f"out of memory while loading {spec} as {dtype} on {device}",
                         fix="use a smaller dtype (--dtype bfloat16 or float16), another device, "
                             "or a smaller model") from exc
    except OSError as exc:
        raise _os_error(resolved, spec, exc) from exc
    except ValueError as exc:
        raise _value_error(resolved, spec, attn, exc) from exc
    except ImportError as exc:
        raise ModelError(f"loading {spec} needs a package that is missing: {exc}",
                         fix="install it, or use attn_implementation='eager'") from exc
    return model, tokenizer


def _os_error(resolved: _Resolved, spec: str, exc: OSError) -> ModelError:
    if resolved.kind == "hub":
        why = "the Hugging Face Hub is switched off (HF_HUB_OFFLINE)" if _hub_offline() else "it could not be fetched"
        return ModelError(f"{spec!r} is not a local model folder and {why}: {_first_line(exc)}", fix=_HUB_FIX)
    return ModelError(f"cannot read the model files: {_first_line(exc)}", where=resolved.location,
                      fix="check the folder is complete (config.json, weights, tokenizer files) and readable")


def _value_error(resolved: _Resolved, spec: str, attn: str, exc: ValueError) -> ModelError:
    text = str(exc)
    if "AutoModelForCausalLM" in text or "Unrecognized configuration class" in text:
        return ModelError(f"{spec} is not a causal language model: {_first_line(exc)}", fix=_NOT_CAUSAL_FIX)
    if resolved.kind == "hub" and ("repo id" in text.lower() or "repo_id" in text.lower()):
        return ModelError(f"{spec!r} is neither an existing path nor a valid hub id",
                          fix="check the spelling, or use 'embedded'")
    if "attn" in text.lower() or "attention" in text.lower():
        return ModelError(f"this model cannot use attn_implementation={attn!r}: {_first_line(exc)}",
                          fix="use attn_implementation='eager'")
    return ModelError(f"cannot load {spec}: {_first_line(exc)}",
                      fix="check the model files, or use 'embedded' for the packaged model")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _make_deterministic(model: Any, tokenizer: Any) -> None:
    """Eval mode and greedy decoding as the default, so generate() repeats itself exactly.

    Sampling knobs are cleared (not just ignored) so transformers neither warns about them nor
    lets a model's shipped generation_config turn sampling back on.
    """
    model.eval()
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    gen = model.generation_config
    gen.do_sample = False
    gen.temperature = None
    gen.top_p = None
    gen.top_k = None
    if gen.pad_token_id is None and tokenizer.pad_token_id is not None:
        gen.pad_token_id = tokenizer.pad_token_id


def tiny_random_model(seed: int = 0, *, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                      attn_implementation: str = "eager") -> LoadedModel:
    """A small randomly initialised Llama-style model with the embedded tokenizer, for fast tests.

    It shares the real tokenizer so text handling (sub-word merging, stopwords, prompts) is
    exercised exactly as with the embedded model, while a forward pass takes milliseconds. The
    output head is NOT tied to the embeddings: a tied random model only ever repeats the last
    prompt token, whereas an untied one writes varied words, which the method tests need.
    The seed is applied inside a forked RNG so building one does not disturb the caller's
    random state.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    started = time.perf_counter()
    if hidden % heads or heads % kv_heads:
        raise ModelError(f"hidden={hidden}, heads={heads}, kv_heads={kv_heads} do not divide evenly",
                         fix="make hidden a multiple of heads and heads a multiple of kv_heads")
    check_attention(attn_implementation, False)
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=2048,
        tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        attn_implementation=attn_implementation,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    _make_deterministic(model, tokenizer)
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"tiny-random-llama-{layers}x{hidden}-seed{seed}",
                       source="tiny-random", dtype="float32", device="cpu", attn_implementation=attn_implementation,
                       load_seconds=time.perf_counter() - started, extra={"seed": seed})
