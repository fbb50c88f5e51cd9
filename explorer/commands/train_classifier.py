"""``python -m explorer train-classifier``: train DR-RAG's pair classifier and report held-out scores.

The explorer ships a trained classifier (``explorer/data/pair_classifier/``); this retrains it,
on the benchmark's HotpotQA and MuSiQue dev files or on any question files that label their
paragraphs, and writes it (as safetensors + JSON, never a pickle) to the user cache, where DR-RAG
then prefers it over the shipped one, or to ``--out``. The printout is the evidence of how well
the classifier separates gold pairs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train-classifier", help="train DR-RAG's pair relevance classifier",
                                   description="Train C(q, d_a, d_b) on supporting-paragraph labels (HotpotQA and "
                                               "MuSiQue dev by default); evaluate on held-out questions.")
    parser.add_argument("--dataset", "--datasets", dest="datasets", action="append", default=[],
                        metavar="NAME|PATH|NAME=PATH",
                        help="training questions: benchmark names or files in the HotpotQA, 2Wiki or MuSiQue format "
                             "(paragraphs with supporting labels), comma-separated or repeated "
                             "(default: hotpotqa,musique)")
    parser.add_argument("--format", dest="dataset_format", default=None,
                        help="format of the question files when it should not be detected: hotpotqa, 2wiki, musique")
    parser.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder to write the classifier to (default: the user cache, which DR-RAG then uses)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question split and pair sampling")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N questions of each dataset")
    parser.add_argument("--neg-ratio", type=int, default=4, help="negative pairs sampled per positive pair")
    from explorer.cli import add_threads_option

    add_threads_option(parser)
    parser.set_defaults(handler=run, hints={"dataset_format": "--format", "dataset": "--dataset",
                                            "data_dir": "--data", "limit": "--limit"})


def _row(name: str, m: dict) -> str:
    return (f"  {name:10s} n={m['n']:5d} pos={m['positives']:4d}  acc {m['accuracy']:.3f}  "
            f"P {m['precision']:.3f}  R {m['recall']:.3f}  F1 {m['f1']:.3f}")


def run(args: argparse.Namespace) -> int:
    from explorer.methods.drrag.pair_classifier import PairClassifier, train
    from explorer.paths import shared_data_dir

    if args.limit is not None and args.limit < 2:
        raise ConfigError(f"--limit must be at least 2, got {args.limit}", fix="pass --limit 2 or more, or omit it")
    if args.neg_ratio < 1:
        raise ConfigError(f"--neg-ratio must be at least 1, got {args.neg_ratio}", where="--neg-ratio",
                          fix="pass e.g. --neg-ratio 4")
    if args.out is not None:
        from explorer.methods.drrag.pair_classifier import CLASSIFIER_FILES
        from explorer.outputs import check_creatable

        args.out = check_creatable(args.out, "--out", folder=True, files=CLASSIFIER_FILES)  # before the training

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    sources = None
    datasets = getattr(args, "datasets", None)
    if datasets:
        from explorer.eval.datasets import resolve_sources
        from explorer.eval.runner import parse_list

        sources = resolve_sources(parse_list(datasets, "dataset"), fmt=args.dataset_format,
                                  data_dir=args.data or shared_data_dir())
    model, metrics = train(args.data, seed=args.seed, limit=args.limit, neg_ratio=args.neg_ratio, progress=progress,
                           sources=sources)
    path = model.save(args.out or PairClassifier.default_path())
    chosen = metrics["chosen"]
    print(f"model: {chosen['model']}, threshold {chosen['threshold']:.2f} (chosen by cross-validation on train)")
    print("held-out pairs (questions never seen in training):")
    for name, m in metrics["held_out"].items():
        print(_row(name, m))
    print("baselines on the same pairs (overall):")
    for name, per in metrics["baselines"].items():
        print(_row(name[:10], per["overall"]))
    ranking = ", ".join(f"{k} {v:.2f}" for k, v in metrics["top_pair_accuracy"].items())
    print(f"best-scored pair among all pairs is gold: {ranking}")
    print(f"trained in {metrics['train_seconds']:.1f} s (encoding {metrics['encode_seconds']:.1f} s)")
    print(f"wrote {path}")
    if args.out is None:
        print("DR-RAG now uses this classifier instead of the shipped one (delete the folder to go back)")
    return 0
