"""``python -m explorer sweep``: rerun one method at several values of a parameter (its threshold).

Thresholds do not transfer across models (methods.md), so this is how a user finds the working
range for theirs. Every run is stored, one evaluation per sweep, each run's config in its trace;
the threshold chart is written at the end, and a rerun resumes like ``eval``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.commands.eval import (
    DATASET_HELP,
    RUN_HINTS,
    add_run_options,
    check_common,
    cluster_options,
    concurrency,
    open_store,
    resolve,
    stop_on_terminate,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="rerun a method at several parameter values and chart them",
                                   description="Run METHOD with PARAM set to each of VALUES on the questions, store "
                                               "the runs as one evaluation, and write the threshold chart.")
    parser.add_argument("--method", required=True, help="the method, e.g. dragin (METHOD:VARIANT for a variant)")
    parser.add_argument("--param", required=True, help="the parameter to vary, e.g. threshold")
    parser.add_argument("--values", required=True, help="comma-separated values, e.g. 0.1,0.2,0.4,0.8")
    parser.add_argument("--dataset", "--datasets", dest="datasets", action="append", default=[],
                        metavar="NAME|PATH|NAME=PATH", help=DATASET_HELP)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the report (default: reports/NAME under the current folder)")
    add_run_options(parser)
    parser.set_defaults(handler=run, hints=RUN_HINTS)


def run(args: argparse.Namespace) -> int:
    from explorer.commands.report import _safe
    from explorer.errors import ConfigError
    from explorer.eval.report import write_report
    from explorer.eval.runner import EvalSettings, build_arms, parse_list, run_evaluation

    check_common(args)
    cluster = cluster_options(args)
    method = args.method.strip()
    values = parse_list(args.values, "values")
    if len(values) < 2:
        raise ConfigError("a sweep needs at least two values", where="--values", fix="e.g. --values 0.1,0.2,0.4")
    base = [s for s in args.settings]
    if any(s.partition("=")[0].strip().rpartition(".")[2] == args.param for s in base):
        raise ConfigError(f"--set also gives {args.param}, which the sweep varies", where="--set",
                          fix=f"drop --set {args.param}=...")
    arms = []
    for value in values:
        for arm in build_arms([method], settings=[*base, f"{method.partition(':')[0]}.{args.param}={value}"],
                              variants=args.variants, seed=args.seed):
            if arm not in arms:
                arms.append(arm)
    sources, added = resolve(args)
    datasets = [s.label for s in sources or added]
    from explorer.retrieval.choice import config_from_args

    retriever = config_from_args(args)
    name = args.name or (f"sweep-{method.replace(':', '-')}-{args.param}-{'+'.join(datasets)}-"
                         f"{'all' if args.limit is None else args.limit}-{args.model.rstrip('/').rsplit('/', 1)[-1]}"
                         f"-{args.corpus}" + ("" if retriever.kind == "bm25" else f"-{retriever.label}"))
    settings = EvalSettings(name=name, datasets=[s.spec for s in sources], add_datasets=[s.spec for s in added],
                            arms=arms, limit=args.limit,
                            model=args.model, corpus=args.corpus, dtype=args.dtype, device=args.device, seed=args.seed,
                            data_dir=args.data, batch_size=args.write_batch, dataset_format=args.dataset_format,
                            retriever=retriever.recorded(), attn=args.attn,
                            concurrency=1 if cluster is not None else concurrency(args),
                            sweep={"method": arms[0].method, "variant": arms[0].variant, "param": args.param,
                                   "values": [a.given[args.param] for a in arms]})
    from explorer.eval.report import REPORT_FILES
    from explorer.outputs import check_creatable

    out = check_creatable(args.out or Path("reports") / _safe(name), "--out", folder=True,
                          files=REPORT_FILES)  # before any run
    store = open_store(args.db)
    print(f"sweep {name!r} in {store.path}", file=sys.stderr)
    with stop_on_terminate():
        result = run_evaluation(settings, store, show_progress=not args.quiet, cluster=cluster)
    print(f"{result.ran} runs made, {result.skipped} already stored, {result.errors} failed", file=sys.stderr)
    for path in write_report(store, name, out):
        print(path)
    return 0
