"""``python -m explorer retrieval-metrics``: recall of BM25, QDC, CIS and CFS at k = 3, 4, 6, and BlendFilter's
recall, precision and S-Precision before and after its filter, on HotpotQA and MuSiQue dev.

Prints markdown and writes it to ``--out`` (reports/retrieval_metrics.md under the current folder by default).
BlendFilter runs the model, so ``--blendfilter-limit`` can keep it to the first N questions of each set.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from explorer.errors import ConfigError

DEFAULT_OUT = Path("reports") / "retrieval_metrics.md"


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("give positive integers, e.g. 3,4,6")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    from explorer.eval.retrieval_metrics import METHODS

    parser = subparsers.add_parser(
        "retrieval-metrics", help="recall of BM25 / DR-RAG strategies and BlendFilter's filtered union",
        description="Pool the HotpotQA and MuSiQue dev paragraphs into one corpus and measure how many gold "
                    "paragraphs each retrieval strategy keeps.")
    parser.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated, from {', '.join(METHODS)} (default: all)")
    parser.add_argument("--k", type=_ints, default=[3, 4, 6], help="passage budgets k (default 3,4,6)")
    parser.add_argument("--k2", type=int, default=5, help="DR-RAG: new candidates per question + passage query")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each dataset (default: all)")
    parser.add_argument("--blendfilter-limit", type=int, default=None,
                        help="first N questions of each dataset for BlendFilter (default: --limit)")
    parser.add_argument("--blendfilter-k", type=int, default=5, help="BlendFilter's K per query (paper: 5)")
    parser.add_argument("--model", default="embedded", help="model for BlendFilter (default: embedded)")
    parser.add_argument("--classifier", default="", help="trained pair classifier (default: the cache)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown file to write ('-' for none)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from explorer.eval.retrieval_metrics import METHODS, measure, render_markdown
    from explorer.paths import shared_data_dir

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        raise ConfigError(f"unknown method(s) {', '.join(unknown) or '(none given)'}", where="--methods",
                          fix=f"choose from {', '.join(METHODS)}")
    for name in ("limit", "blendfilter_limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.k2 < 1 or args.blendfilter_k < 1:
        raise ConfigError("--k2 and --blendfilter-k must be at least 1")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report = measure(args.data or shared_data_dir(), methods=methods, ks=args.k, k2=args.k2, limit=args.limit,
                     blend_limit=args.blendfilter_limit, blend_k=args.blendfilter_k, model=args.model,
                     classifier_path=args.classifier, progress=progress)
    given = sys.argv[2:] if sys.argv[1:2] == ["retrieval-metrics"] else []
    report.command = " ".join(["python -m explorer retrieval-metrics", *(shlex.quote(a) for a in given)])
    text = render_markdown(report)
    print(text)
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
