"""``python -m explorer train-prober``: train Probing-RAG's prober for a model and report held-out accuracy.

The label of a question is whether the model's own answer, written with no passages, is wrong (then
retrieval is needed), as in the authors' training data. The model answers each question once with
the method's prompt; the residual stream after the chosen layer is pooled over the answer's tokens;
a LayerNorm + logistic head is fitted on the first part and scored on the held-out rest. The result
goes to the user cache (Probing-RAG then prefers it over a shipped one) or to ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch

from explorer.errors import ConfigError

DEFAULT_FILES = ("hotpotqa/dev_500_questions.jsonl", "nq/nq_open_dev_3610.jsonl")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train-prober", help="train Probing-RAG's hidden-state prober for a model",
                                   description="Answer benchmark questions without retrieval, label each answer "
                                               "right or wrong, and fit the prober on one layer's hidden states.")
    parser.add_argument("--model", default="embedded", help="model to train for (default: the embedded model; "
                        "tiny: the test suite's random model)")
    parser.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    parser.add_argument("--questions", type=int, default=120,
                        help="questions used, split evenly over HotpotQA dev and NQ-open dev (default 120)")
    parser.add_argument("--layer", type=int, default=None, help="layer to read (default: two thirds up)")
    parser.add_argument("--held-out", type=float, default=0.25, help="share of questions held out for scoring")
    parser.add_argument("--max-tokens", type=int, default=32, help="answer length when labelling (default 32)")
    parser.add_argument("--fewshot", type=int, default=6,
                        help="exemplars in the labelling prompt (the method's default: 6)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and the head's initial weights")
    parser.add_argument("--out", type=Path, default=None, help="folder to write to (default: the user cache)")
    parser.set_defaults(handler=run)


def read_pairs(data: Path, count: int) -> tuple[list[tuple[str, list[str]]], str]:
    """The first questions of each default file, alternating, and the sha256 of the bytes read."""
    digest = hashlib.sha256()
    per_file: list[list[tuple[str, list[str]]]] = []
    share = max(1, count // len(DEFAULT_FILES))
    for name in DEFAULT_FILES:
        path = data / name
        if not path.is_file():
            raise ConfigError(f"training questions not found: {path}", where="--data",
                              fix="point --data at the benchmark data folder (it holds hotpotqa/ and nq/)")
        rows = []
        with path.open("rb") as handle:
            for line in handle:
                if len(rows) >= share:
                    break
                digest.update(line)
                item = json.loads(line)
                answers = item["answer"] if isinstance(item["answer"], list) else [item["answer"]]
                rows.append((str(item["question"]), [str(a) for a in answers]))
        per_file.append(rows)
    mixed = [row for group in zip(*per_file, strict=False) for row in group]
    return mixed, digest.hexdigest()


def collect(engine: Any, pairs: list[tuple[str, list[str]]], layer: int, max_tokens: int,
            progress: Any = None, fewshot: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Pooled states and labels (1 = the no-passage answer is wrong) for each question."""
    from explorer.eval.metrics import exact_match, f1_score
    from explorer.methods import common, prompts
    from explorer.methods.common import BaseConfig
    from explorer.methods.probing_rag.prober import answer_state

    cfg = BaseConfig(fewshot=fewshot)
    states, labels = [], []
    for i, (question, answers) in enumerate(pairs):
        segments = prompts.build_prompt(question, shots=common.shots(cfg, question))
        gen = common.generate(engine, None, segments, max_new_tokens=max_tokens, purpose="answer")
        answer = prompts.extract_answer(gen.text) or gen.text
        right = exact_match(answer, answers) or f1_score(answer, answers) >= 0.5
        states.append(answer_state(engine.model, gen.prompt_ids, gen.ids, layer))
        labels.append(0.0 if right else 1.0)
        if progress:
            progress(f"{i + 1}/{len(pairs)} {'right' if right else 'wrong'}: {question[:60]}")
    return torch.stack(states), torch.tensor(labels)


def split(n: int, held_out: float, seed: int) -> tuple[list[int], list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    cut = max(1, int(round(n * held_out)))
    return order[cut:], order[:cut]


def train(engine: Any, pairs: list[tuple[str, list[str]]], *, layer: int | None, seed: int, held_out: float,
          max_tokens: int, data_hash: str, command: str, progress: Any = None, fewshot: int = 6) -> Any:
    """Collect, split, fit and score; returns the :class:`Prober` with its manifest."""
    from explorer.methods.probing_rag.prober import Prober, default_layer, fit_head, model_key

    config = engine.model.config
    layer = default_layer(config.num_hidden_layers) if layer is None else layer
    if not 0 <= layer < config.num_hidden_layers:
        raise ConfigError(f"layer {layer} does not exist (the model has {config.num_hidden_layers})",
                          where="--layer", fix=f"use a layer in [0, {config.num_hidden_layers - 1}]")
    states, labels = collect(engine, pairs, layer, max_tokens, progress, fewshot)
    train_idx, test_idx = split(len(pairs), held_out, seed)
    head = fit_head(states[train_idx], labels[train_idx], seed=seed)
    with torch.no_grad():
        predicted = (torch.sigmoid(head(states[test_idx])) > 0.5).float()
    accuracy = float((predicted == labels[test_idx]).float().mean())
    majority = float(max(labels[test_idx].mean(), 1 - labels[test_idx].mean()))
    manifest = {"trained_by": command, "data_sha256": data_hash, "questions": len(pairs),
                "train": len(train_idx), "held_out": len(test_idx), "held_out_accuracy": round(accuracy, 4),
                "held_out_majority": round(majority, 4), "needs_retrieval_share": round(float(labels.mean()), 4),
                "seed": seed, "pooling": "mean over answer tokens", "site": "residual after the layer",
                "head": "LayerNorm + logistic", "max_tokens": max_tokens, "fewshot": fewshot}
    return Prober(head=head, layer=layer, key=model_key(config), manifest=manifest)


def run(args: argparse.Namespace) -> int:
    from explorer.engine.generation import Engine
    from explorer.engine.loader import load_model, tiny_random_model
    from explorer.methods.probing_rag.prober import user_folder
    from explorer.paths import shared_data_dir

    data = args.data or shared_data_dir()
    pairs, digest = read_pairs(data, args.questions)
    # "tiny": the 2-layer random model the test suite runs every method on; its prober is shipped so that
    # Probing-RAG runs there with its controls untouched (its numbers mean nothing about any real model).
    lm = tiny_random_model(seed=0) if args.model == "tiny" else load_model(args.model)
    engine = Engine(lm)
    command = (f"python -m explorer train-prober --model {args.model} --questions {args.questions} "
                f"--fewshot {args.fewshot} --max-tokens {args.max_tokens} --seed {args.seed}")
    prober = train(engine, pairs, layer=args.layer, seed=args.seed, held_out=args.held_out,
                   max_tokens=args.max_tokens, data_hash=digest, command=command, fewshot=args.fewshot,
                   progress=lambda m: print(m, file=sys.stderr))
    target = prober.save(args.out or user_folder())
    m = prober.manifest
    print(f"prober {prober.key} layer {prober.layer}: held-out accuracy {m['held_out_accuracy']:.3f} "
          f"(majority class {m['held_out_majority']:.3f}) on {m['held_out']} of {m['questions']} questions; "
          f"written to {target}")
    return 0
