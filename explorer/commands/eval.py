"""``python -m explorer eval``: run methods over benchmark questions into one named, resumable evaluation.

Every run is stored as a full trace in the run database under the evaluation's name, so the app
can open any single case; rerunning the same command resumes where it stopped, and adding
methods to a rerun extends the same evaluation. A question source the evaluation does not have is
added only with ``--add-dataset``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from explorer.cli import MODEL_HELP, add_attn_option, add_threads_option

#: ``--batch`` on a GPU when not given: questions whose decode steps share one batch.
GPU_BATCH = 32

DATASET_HELP = ("benchmark names (hotpotqa, musique, 2wiki, nq, strategyqa, triviaqa, popqa, bamboogle, demo; "
                "`data fetch NAME` downloads one) or question files (.json, .jsonl, .csv, .tsv; format detected), "
                "comma-separated or repeated; NAME=PATH files a file under NAME")
# What the options are called on eval and sweep, for messages that suggest one (explorer.options).
RUN_HINTS = {"dataset_format": "--format", "dataset": "--dataset", "add_dataset": "--add-dataset", "data_dir": "--data",
             "name": "--name", "corpus": "--corpus"}


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``eval`` and ``sweep``: where questions, model, corpus and runs come from."""
    parser.add_argument("--add-dataset", "--add-datasets", dest="add_datasets", action="append", default=[],
                        metavar="NAME|PATH|NAME=PATH",
                        help="question sources to add to an evaluation that exists under --name (a source it does "
                             "not have is refused under --dataset: an evaluation's sources are part of what it is); "
                             "comma-separated or repeated")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each dataset (default: all)")
    parser.add_argument("--model", default="embedded", help=MODEL_HELP)
    parser.add_argument("--corpus", default="benchmark",
                        help="benchmark (default), demo, wikipedia or a question set's own paragraphs (hotpotqa) once "
                             "fetched with `data fetch`, or a corpus file/folder")
    from explorer.retrieval.choice import add_retriever_arguments

    add_retriever_arguments(parser)
    parser.add_argument("--device", default=None, help="cpu (default; cuda with --worker-gpus), cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    add_attn_option(parser)
    add_threads_option(parser)
    parser.add_argument("--name", default=None, help="evaluation name (default: from datasets, limit, model, corpus)")
    parser.add_argument("--db", default=None, help="run database (default: the app's run database, EXPLORER_DB)")
    parser.add_argument("--data", default=None, help="benchmark data folder for benchmark names (default: "
                                                     "EXPLORER_DATA or ../shared/data, then the fetched files)")
    parser.add_argument("--format", dest="dataset_format", default=None,
                        help="format of the question files, when it should not be detected from the first record: "
                             "hotpotqa, 2wiki, musique, nq, strategyqa, questions (question-only), flashrag")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="[METHOD.]NAME=VALUE",
                        help="a config value, e.g. --set dragin.threshold=0.5, or --set max_length=32 for every "
                             "method that has it (repeatable)")
    parser.add_argument("--variant", dest="variants", action="append", default=[], metavar="METHOD=VARIANT",
                        help="run a method's other variant, e.g. --variant dragin=reference (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0): same seed, same runs")
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="questions decoded at once, their tokens in one batch on the model (default: "
                             f"{GPU_BATCH} on a GPU, 1 elsewhere; same runs as one at a time)")
    parser.add_argument("--write-batch", type=int, default=8, metavar="N",
                        help="runs written per database transaction (default 8)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_cluster_options(parser)


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """Running on Ray workers (explorer.eval.cluster); without --workers/--ray-address nothing of Ray is loaded."""
    group = parser.add_argument_group("Ray workers", "run the questions on Ray workers, one model per worker; this "
                                                     "process keeps writing the run database")
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="start a local Ray instance with N workers (with --ray-address: N workers on the cluster)")
    group.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="run on an existing Ray cluster, e.g. 10.0.0.5:6379 or auto (default workers: as many as "
                            "its CPUs/GPUs hold)")
    group.add_argument("--worker-gpus", type=float, default=None, metavar="G",
                       help="GPUs per worker (default 1 with --device cuda, else 0; 0.5 puts two workers on a GPU)")
    group.add_argument("--worker-cpus", type=float, default=None, metavar="C",
                       help="CPUs per worker, also its torch threads (default 1)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="run methods over benchmark questions into a named evaluation",
                                   description="Run every method on every question, store each trace under one "
                                               "named evaluation, and print EM/F1 and costs per method. Rerun the "
                                               "same command to resume.")
    parser.add_argument("--dataset", "--datasets", dest="datasets", action="append", default=[],
                        metavar="NAME|PATH|NAME=PATH", help=DATASET_HELP)
    parser.add_argument("--methods", required=True,
                        help="comma-separated methods, e.g. wo,sr,fl,fs,flare,dragin; METHOD:VARIANT for a variant")
    add_run_options(parser)
    parser.set_defaults(handler=run, hints=RUN_HINTS)


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

    store = RunStore(db or default_db_path())
    if store.readonly:  # refused before any model or dataset is loaded: the runs could not be stored
        from explorer.errors import ExplorerError

        raise ExplorerError("the run database is read-only, so the runs could not be stored", where=str(store.path),
                            fix="choose another --db, or make the file and its folder writable")
    return store


def resolve(args: argparse.Namespace) -> tuple[list, list]:
    """The question sources of ``--dataset`` and of ``--add-dataset`` (names, files, NAME=PATH), read far enough to
    know their formats (a file that is not a question file fails here, before any model loads)."""
    from explorer.errors import ConfigError
    from explorer.eval.datasets import resolve_sources
    from explorer.eval.runner import parse_list

    if not args.datasets and not args.add_datasets:
        raise ConfigError("no questions given", where="--dataset",
                          fix="name the questions: --dataset hotpotqa (a benchmark) or --dataset my_questions.jsonl; "
                              "--add-dataset adds a source to an existing evaluation")
    given = (resolve_sources(parse_list(args.datasets, "dataset"), fmt=args.dataset_format, data_dir=args.data)
             if args.datasets else [])
    added = (resolve_sources(parse_list(args.add_datasets, "dataset"), fmt=args.dataset_format, data_dir=args.data)
             if args.add_datasets else [])
    return given, added


def cluster_options(args: argparse.Namespace):
    """The Ray options given (None without --workers/--ray-address), with ``args.device`` settled.

    --worker-gpus alone means the runs are on GPUs, so the device becomes cuda unless given.
    """
    from explorer.errors import ConfigError

    ray = args.workers is not None or args.ray_address is not None
    if args.device is None:
        args.device = "cuda" if ray and (args.worker_gpus or 0) > 0 else "cpu"
    if not ray:
        for flag, value in (("--worker-gpus", args.worker_gpus), ("--worker-cpus", args.worker_cpus)):
            if value is not None:
                raise ConfigError(f"{flag} is a per-worker resource, but no Ray workers were asked for", where=flag,
                                  fix="add --workers N (a local Ray instance) or --ray-address ADDR, or drop " + flag)
        return None
    from explorer.eval.cluster import ClusterOptions

    options = ClusterOptions(workers=args.workers, address=args.ray_address, gpus=args.worker_gpus,
                             cpus=args.worker_cpus if args.worker_cpus is not None else 1.0)
    options.check(args.device)  # contradictions are refused before any question is read
    return options


def check_common(args: argparse.Namespace) -> None:
    from explorer.errors import ConfigError

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {args.limit}", where="--limit",
                          fix="give a number of questions, e.g. --limit 20, or leave --limit out for all")
    if args.batch is not None and args.batch < 1:
        raise ConfigError(f"--batch must be at least 1, got {args.batch}", where="--batch",
                          fix="write e.g. --batch 8 (questions decoded at once), or leave it out")
    if args.write_batch < 1:
        raise ConfigError(f"--write-batch must be at least 1, got {args.write_batch}", where="--write-batch",
                          fix="write e.g. --write-batch 8 (runs per database transaction)")
    if (args.batch or 1) > 1 and (args.workers is not None or args.ray_address is not None):
        raise ConfigError("--batch decodes questions together in this process, but Ray workers run one question "
                          "at a time each", where="--batch", fix="drop --batch, or drop --workers/--ray-address")


def concurrency(args: argparse.Namespace) -> int:
    """``--batch``, else the default of the device the runs use (a GPU batches, a CPU runs one at a time)."""
    if args.batch is not None:
        return args.batch
    return GPU_BATCH if str(args.device or "cpu").startswith("cuda") else 1


def run(args: argparse.Namespace) -> int:
    from explorer.eval.report import summary_markdown
    from explorer.eval.runner import EvalSettings, build_arms, default_name, parse_list, run_evaluation

    check_common(args)
    cluster = cluster_options(args)
    sources, added = resolve(args)
    arms = build_arms(parse_list(args.methods, "methods"), settings=args.settings, variants=args.variants,
                      seed=args.seed)
    from explorer.retrieval.choice import config_from_args

    retriever = config_from_args(args)
    # The default name comes from --dataset: adding a source with --add-dataset keeps the evaluation's name.
    name = args.name or default_name([s.label for s in sources or added], args.limit, args.model, args.corpus,
                                     retriever=retriever)
    settings = EvalSettings(name=name, datasets=[s.spec for s in sources], add_datasets=[s.spec for s in added],
                            arms=arms, limit=args.limit,
                            model=args.model, corpus=args.corpus, dtype=args.dtype, device=args.device, seed=args.seed,
                            data_dir=args.data, batch_size=args.write_batch, dataset_format=args.dataset_format,
                            retriever=retriever.recorded(), attn=args.attn,
                            concurrency=1 if cluster is not None else concurrency(args))
    store = open_store(args.db)
    print(f"evaluation {name!r} in {store.path}", file=sys.stderr)
    with stop_on_terminate():
        result = run_evaluation(settings, store, show_progress=not args.quiet, cluster=cluster)
    print(f"{result.ran} runs made, {result.skipped} already stored, {result.errors} failed", file=sys.stderr)
    print(summary_markdown(store, name))
    return 0
