"""``python -m explorer run``: answer one question with one method and print how it got there.

The trace it prints from is the same one the web app shows and the store keeps; ``--json``
writes it for later loading, comparison or the explorer's "what if" view.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.cli import MODEL_HELP, add_attn_option
from explorer.config import parse_assignments


def register(subparsers: argparse._SubParsersAction) -> None:
    from explorer.methods import METHODS

    parser = subparsers.add_parser("run", help="run one method on one question and print its trace",
                                   description="Run a dynamic-RAG method and print the text with its triggers, "
                                               "queries and passages.")
    parser.add_argument("--method", required=True, choices=sorted(METHODS), help="method to run")
    parser.add_argument("--variant", default=None, help="paper or reference (methods that have both)")
    parser.add_argument("--question", required=True, help="the question to answer")
    parser.add_argument("--corpus", default="demo", help="demo (default), benchmark, or a corpus file/folder")
    parser.add_argument("--model", default="embedded", help=MODEL_HELP)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    add_attn_option(parser)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                        help="a config value, e.g. --set threshold=0.3 (repeatable); "
                             "`python -m explorer methods NAME` lists them")
    parser.add_argument("--json", type=Path, default=None, help="write the trace as JSON here")
    parser.add_argument("--db", default=None, help="also store the run in this SQLite file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from explorer.methods.base import make_config, run_question
    from explorer.runtime import open_runtime
    from explorer.summary import render_text

    config = make_config(args.method, parse_assignments(args.settings))  # validate before loading anything
    runtime = open_runtime(args.model, args.corpus, dtype=args.dtype, device=args.device, attn=args.attn,
                           progress=lambda m: print(m, file=sys.stderr, flush=True))
    trace = run_question(args.method, args.question, runtime, variant=args.variant, config=config)
    print(render_text(trace))
    if args.json:
        args.json.write_text(trace.to_json(indent=1), encoding="utf-8")
        print(f"trace written to {args.json}")
    if args.db:
        from explorer.store import RunStore

        run_id = RunStore(args.db).save(trace)
        print(f"stored as run {run_id} in {args.db}")
    return 0 if trace.status == "complete" else 1
