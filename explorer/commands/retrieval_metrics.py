"""``python -m explorer retrieval-metrics``: recall of BM25, SM (dense), hybrid, QDC, CIS and CFS at k = 3, 4, 6
(DR-RAG's table 4), and BlendFilter's recall, precision and S-Precision before and after its filter, on
HotpotQA and MuSiQue dev or any question files that carry their gold paragraphs (``--dataset``).
``--retriever`` picks the base retriever(s) of DR-RAG's strategies and BlendFilter (the paper's SM, the dense
retriever, by default; ``bm25,dense`` measures both).

Prints markdown and writes it to ``--out`` (``retrieval_metrics.md`` in the current folder by default; the
project's own result file is written only when asked for by path).
BlendFilter runs the model, so ``--blendfilter-limit`` can keep it to the first N questions of each set.
Every finished measurement is kept in the cache as it finishes: a stopped run (Ctrl-C, SIGTERM) writes
the tables of what it measured, and the same command goes on from there (``--restart`` starts over).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from explorer.errors import ConfigError

DEFAULT_OUT = Path("retrieval_metrics.md")  # relative: the current folder, never the package


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("give positive integers, e.g. 3,4,6")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    from explorer.eval.retrieval_metrics import DEFAULT_METHODS, METHODS

    parser = subparsers.add_parser(
        "retrieval-metrics", help="recall of BM25 / DR-RAG strategies and BlendFilter's filtered union",
        description="Pool the paragraphs of the question sets (HotpotQA and MuSiQue dev by default) into one corpus "
                    "and measure how many gold paragraphs each retrieval strategy keeps.")
    parser.add_argument("--dataset", "--datasets", dest="datasets", action="append", default=[],
                        metavar="NAME|PATH|NAME=PATH",
                        help="question sets with gold paragraphs: benchmark names or files in the HotpotQA, 2Wiki, "
                             "MuSiQue or NQ format, comma-separated or repeated (default: hotpotqa,musique)")
    parser.add_argument("--format", dest="dataset_format", default=None,
                        help="format of the question files when it should not be detected: hotpotqa, 2wiki, "
                             "musique, nq")
    parser.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated, from {', '.join(METHODS)} (default: {','.join(DEFAULT_METHODS)})")
    parser.add_argument("--retriever", default="dense", metavar="bm25,dense,hybrid",
                        help="base retriever(s) of QDC/CIS/CFS and BlendFilter, comma-separated (default dense, "
                             "the paper's SM)")
    parser.add_argument("--embedder", default=None, metavar="PATH",
                        help="the dense model: a sentence-transformers folder or cached hub name (default: the "
                             "bundled all-MiniLM-L6-v2)")
    parser.add_argument("--retriever-set", dest="retriever_settings", action="append", default=[],
                        metavar="NAME=VALUE", help="a retriever setting, e.g. rrf_k=60 (repeatable)")
    parser.add_argument("--k", type=_ints, default=[3, 4, 6], help="passage budgets k (default 3,4,6)")
    parser.add_argument("--k2", type=int, default=5, help="DR-RAG: new candidates per question + passage query")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each dataset (default: all)")
    parser.add_argument("--blendfilter-limit", type=int, default=None,
                        help="first N questions of each dataset for BlendFilter (default: --limit)")
    parser.add_argument("--blendfilter-k", type=int, default=5, help="BlendFilter's K per query (paper: 5)")
    parser.add_argument("--model", default="embedded", help="model for BlendFilter (default: embedded)")
    parser.add_argument("--classifier", default="",
                        help="a pair-classifier folder or manifest (default: the one in the cache if trained there, "
                             "else the one shipped with the explorer)")
    parser.add_argument("--restart", action="store_true",
                        help="measure everything again instead of going on from a stopped run's kept measurements")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="markdown file to write (default: retrieval_metrics.md in the current folder; "
                             "'-' for none)")
    from explorer.cli import add_threads_option

    add_threads_option(parser)
    parser.set_defaults(handler=run, hints={"dataset_format": "--format", "dataset": "--dataset", "data_dir": "--data",
                                            "classifier": "--classifier"})


def run(args: argparse.Namespace) -> int:
    from explorer.config import parse_assignments
    from explorer.eval.retrieval_metrics import BASES, METHODS, measure, render_markdown
    from explorer.paths import shared_data_dir
    from explorer.retrieval.choice import retriever_config

    if str(args.out) != "-":
        from explorer.outputs import check_creatable

        args.out = check_creatable(args.out, "--out")  # before the measuring, not after it
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
    bases = list(dict.fromkeys(b.strip() for b in args.retriever.split(",") if b.strip()))
    if not bases or set(bases) - set(BASES):
        raise ConfigError(f"unknown retriever(s) {', '.join(sorted(set(bases) - set(BASES))) or '(none given)'}",
                          where="--retriever", fix=f"choose from {', '.join(BASES)}")
    options = parse_assignments(args.retriever_settings)
    retriever_config("hybrid", args.embedder, options)  # a bad setting fails before anything loads

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from explorer.eval.datasets import resolve_sources
    from explorer.eval.runner import parse_list

    data = args.data or shared_data_dir()
    sources = resolve_sources(parse_list(args.datasets or ["hotpotqa,musique"], "dataset"), fmt=args.dataset_format,
                              data_dir=data)
    from explorer.commands.eval import stop_on_terminate
    from explorer.paths import cache_dir

    kept = cache_dir("retrieval-metrics")
    if args.restart:
        for old in kept.glob("retrieval-metrics-*.jsonl"):
            old.unlink(missing_ok=True)
    with stop_on_terminate():  # SIGTERM stops it like Ctrl-C: the finished measurements stay
        report = measure(data, methods=methods, ks=args.k, k2=args.k2, limit=args.limit,
                         blend_limit=args.blendfilter_limit, blend_k=args.blendfilter_k, model=args.model,
                         classifier_path=args.classifier, progress=progress, sources=sources, bases=bases,
                         embedder=args.embedder, retriever_options=options, checkpoint_dir=kept)
    given = sys.argv[2:] if sys.argv[1:2] == ["retrieval-metrics"] else []
    report.command = " ".join(["python -m explorer retrieval-metrics", *(shlex.quote(a) for a in given)])
    text = render_markdown(report)
    print(text)
    if str(args.out) != "-":
        from explorer.outputs import write_error, write_file

        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, args.out, "--out") from exc
        write_file(args.out, text, "--out")
        print(f"wrote {args.out}" + (" (partial)" if report.stopped else ""), file=sys.stderr)
    return 130 if report.stopped else 0
