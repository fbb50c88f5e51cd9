"""``python -m explorer eval``: run methods over benchmark questions into one named, resumable evaluation.

Every run is stored as a full trace in the run database under the evaluation's name, so the app
can open any single case; rerunning the same command resumes where it stopped, and adding
methods or datasets to a rerun extends the same evaluation.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from explorer.cli import MODEL_HELP, add_attn_option


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``eval`` and ``sweep``: where questions, model, corpus and runs come from."""
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each dataset (default: all)")
    parser.add_argument("--model", default="embedded", help=MODEL_HELP)
    parser.add_argument("--corpus", default="benchmark", help="benchmark (default), demo, or a corpus file/folder")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    add_attn_option(parser)
    parser.add_argument("--name", default=None, help="evaluation name (default: from datasets, limit, model, corpus)")
    parser.add_argument("--db", default=None, help="run database (default: the app's run database, EXPLORER_DB)")
    parser.add_argument("--data", default=None, help="benchmark data folder (default: ../shared/data)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="[METHOD.]NAME=VALUE",
                        help="a config value, e.g. --set dragin.threshold=0.5, or --set max_length=32 for every "
                             "method that has it (repeatable)")
    parser.add_argument("--variant", dest="variants", action="append", default=[], metavar="METHOD=VARIANT",
                        help="run a method's other variant, e.g. --variant dragin=reference (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0): same seed, same runs")
    parser.add_argument("--batch", type=int, default=8, help="runs written per database transaction (default 8)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="run methods over benchmark questions into a named evaluation",
                                   description="Run every method on every question, store each trace under one "
                                               "named evaluation, and print EM/F1 and costs per method. Rerun the "
                                               "same command to resume.")
    parser.add_argument("--dataset", "--datasets", dest="datasets", required=True,
                        help="comma-separated: hotpotqa, musique, 2wiki, nq, strategyqa, demo")
    parser.add_argument("--methods", required=True,
                        help="comma-separated methods, e.g. wo,sr,fl,fs,flare,dragin; METHOD:VARIANT for a variant")
    add_run_options(parser)
    parser.set_defaults(handler=run)


@contextmanager
def stop_on_terminate() -> Iterator[None]:
    """Treat SIGTERM (``kill``, a job scheduler) like Ctrl-C, so finished runs are written before the process ends."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def open_store(db: str | None):
    from explorer.paths import default_db_path
    from explorer.store import RunStore

    return RunStore(db or default_db_path())


def check_common(args: argparse.Namespace) -> None:
    from explorer.errors import ConfigError

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {args.limit}", where="--limit")
    if args.batch < 1:
        raise ConfigError(f"--batch must be at least 1, got {args.batch}", where="--batch")


def run(args: argparse.Namespace) -> int:
    from explorer.eval.datasets import canonical_name
    from explorer.eval.report import summary_markdown
    from explorer.eval.runner import EvalSettings, build_arms, default_name, parse_list, run_evaluation

    check_common(args)
    datasets = [canonical_name(d) for d in parse_list(args.datasets, "dataset")]
    arms = build_arms(parse_list(args.methods, "methods"), settings=args.settings, variants=args.variants,
                      seed=args.seed)
    name = args.name or default_name(datasets, args.limit, args.model, args.corpus)
    settings = EvalSettings(name=name, datasets=datasets, arms=arms, limit=args.limit, model=args.model,
                            corpus=args.corpus, dtype=args.dtype, device=args.device, seed=args.seed,
                            data_dir=args.data, batch_size=args.batch, attn=args.attn)
    store = open_store(args.db)
    print(f"evaluation {name!r} in {store.path}", file=sys.stderr)
    with stop_on_terminate():
        result = run_evaluation(settings, store, show_progress=not args.quiet)
    print(f"{result.ran} runs made, {result.skipped} already stored, {result.errors} failed", file=sys.stderr)
    print(summary_markdown(store, name))
    return 0
