"""``python -m explorer run``: answer one question with one method and print how it got there.

The trace it prints from is the same one the web app shows and the store keeps; ``--json``
writes it for later loading, comparison or the explorer's "what if" view.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.cli import MODEL_HELP, add_attn_option, add_threads_option
from explorer.config import parse_assignments
from explorer.outputs import check_output_file, write_text_file


def register(subparsers: argparse._SubParsersAction) -> None:
    from explorer.methods import METHODS
    from explorer.retrieval.choice import add_retriever_arguments

    parser = subparsers.add_parser("run", help="run one method on one question and print its trace",
                                   description="Run a dynamic-RAG method and print the text with its triggers, "
                                               "queries and passages.")
    parser.add_argument("--method", required=True, choices=sorted(METHODS), help="method to run")
    parser.add_argument("--variant", default=None, help="paper or reference (methods that have both)")
    parser.add_argument("--question", required=True, help="the question to answer")
    parser.add_argument("--corpus", default="demo", help="demo (default), benchmark, or a corpus file/folder")
    add_retriever_arguments(parser)
    parser.add_argument("--model", default="embedded", help=MODEL_HELP)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    add_attn_option(parser)
    add_threads_option(parser)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                        help="a config value, e.g. --set threshold=0.3 (repeatable); "
                             "`python -m explorer methods NAME` lists them")
    parser.add_argument("--json", type=Path, default=None, help="write the trace as JSON here")
    parser.add_argument("--db", default=None, help="also store the run in this SQLite file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from explorer.journal import RunJournal
    from explorer.methods.base import run_question
    from explorer.methods.resolve import resolve_config
    from explorer.retrieval.choice import config_from_args
    from explorer.runtime import open_runtime
    from explorer.summary import render_text

    given = parse_assignments(args.settings)
    store = check_before_loading(args)
    resolve_config(args.method, args.variant, None, given)  # validate before loading anything
    retriever = config_from_args(args)
    runtime = open_runtime(args.model, args.corpus, dtype=args.dtype, device=args.device, attn=args.attn,
                           progress=lambda m: print(m, file=sys.stderr, flush=True), retriever=retriever)
    journal = RunJournal(store) if store is not None else None
    # The values as given: the run resolves them with the model's preset, as the app and the evaluation do.
    trace = run_question(args.method, args.question, runtime, variant=args.variant, config=given, journal=journal)
    print(render_text(trace))
    if store is not None:
        print(f"stored as run {trace.run_id} in {args.db}")
    if args.json:
        write_text_file(args.json, trace.to_json(indent=1), "--json")
        print(f"trace written to {args.json}")
    return 0 if trace.status == "complete" else 1


def check_before_loading(args: argparse.Namespace):
    """Everything that can be checked without the model, so a mistake never costs a generation.

    Returns the opened run store for ``--db`` (None without it): the run is written there from
    its first token on.
    """
    from explorer.errors import ConfigError, ExplorerError, check_question
    from explorer.methods.base import get_method

    variants = get_method(args.method).variants
    if args.variant is not None and args.variant not in variants:
        raise ConfigError(f"method {args.method} has no variant {args.variant!r}", where="--variant",
                          fix=f"choose one of {', '.join(variants)}")
    # bytes that are not UTF-8 arrive as lone surrogates
    check_question(args.question, "--question", 'give the question, e.g. --question "Who wrote Hamlet?"')
    from explorer.methods.fit import check_before_loading as check_model

    check_model([(args.method, args.variant)], args.model, args.attn)  # --attn flash..., a Mamba folder
    from explorer.retrieval.corpora import NAMED_CORPORA, resolve_corpus_path

    if args.corpus not in NAMED_CORPORA:
        resolve_corpus_path(args.corpus)  # a missing corpus file, before the model (its content is read later)
    if args.json:
        args.json = check_output_file(args.json, "--json")
    if not args.db:
        return None
    from explorer.store import RunStore

    store = RunStore(args.db)
    if store.readonly:
        raise ExplorerError("the run database is read-only, so the run could not be stored", where=f"--db {args.db}",
                            fix="choose another --db, or make the file and its folder writable")
    return store
