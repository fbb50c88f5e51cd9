"""``python -m explorer export``: stored runs as OpenInference traces, sent over OTLP/HTTP or written as OTLP/JSON.

Arize Phoenix and OpenTelemetry collectors read them: each run a trace of spans (the run, each
generated span, each retrieval) with every decision as a span event (:mod:`explorer.otel`). It
reads the run database only, so it runs on any machine that has the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="send stored runs to Phoenix / an OTLP collector as OpenInference "
                                                  "traces, or write them as OTLP/JSON",
                                   description="Export one run, an evaluation or the whole run database as "
                                               "OpenInference spans: over OTLP/HTTP (--otlp URL, e.g. Phoenix at "
                                               "http://localhost:6006/v1/traces) and/or to an OTLP/JSON file.")
    parser.add_argument("--run", dest="runs", action="append", default=[], metavar="RUN_ID",
                        help="a run id (or the start of one); repeatable")
    parser.add_argument("--evaluation", default=None, metavar="NAME", help="every run of a stored evaluation")
    parser.add_argument("--all", action="store_true", help="every run in the database")
    parser.add_argument("--otlp", default=None, metavar="URL",
                        help="an OTLP/HTTP traces address (a base URL gets /v1/traces)")
    parser.add_argument("--otlp-json", type=Path, default=None, metavar="FILE", help="write OTLP/JSON to FILE")
    parser.add_argument("--project", default=None,
                        help="the project the spans are filed under in Phoenix (default: the evaluation's name, "
                             "else dynamic-rag-explorer)")
    parser.add_argument("--db", default=None, help="run database (default: the app's run database, EXPLORER_DB)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from explorer.errors import ConfigError
    from explorer.otel import SERVICE, build_spans, otlp_endpoint, otlp_json, send
    from explorer.outputs import check_output_file, write_text_file
    from explorer.paths import default_db_path
    from explorer.store import RunStore

    chosen = sum(bool(x) for x in (args.runs, args.evaluation, args.all))
    if chosen != 1:
        raise ConfigError("say which runs to export" if chosen == 0 else "give only one of --run, --evaluation, --all",
                          where="export", fix="--run RUN_ID (repeatable), --evaluation NAME or --all")
    if not args.otlp and not args.otlp_json:
        raise ConfigError("say where the spans go", where="export",
                          fix="--otlp http://localhost:6006/v1/traces (Phoenix), --otlp-json runs.json, or both")
    if args.otlp:
        otlp_endpoint(args.otlp)  # a malformed address fails before anything is read
    if args.otlp_json:
        check_output_file(args.otlp_json, "--otlp-json")
    store = RunStore(args.db or default_db_path(), readonly=True)
    if args.evaluation:
        if store.evaluation(args.evaluation) is None:
            raise ConfigError(f"no evaluation named {args.evaluation!r} in {store.path}", where="--evaluation",
                              fix="`python -m explorer report` lists the stored evaluations")
        traces = [t for _, t in store.traces(evaluation=args.evaluation)]
    else:
        ids = [row["run_id"] for row in store.list(limit=10_000_000)] if args.all else \
            [store.resolve_id(text) for text in args.runs]
        traces = [store.get(run_id) for run_id in ids]
    if not traces:
        print(f"no runs to export in {store.path}", file=sys.stderr)
        return 1
    spans = build_spans(traces, project=args.project or args.evaluation or SERVICE, evaluation=args.evaluation)
    if args.otlp_json:
        write_text_file(args.otlp_json, otlp_json(spans) + "\n", "--otlp-json")
        print(f"{len(traces)} runs, {len(spans)} spans -> {args.otlp_json}", file=sys.stderr)
    if args.otlp:
        send(spans, args.otlp)
        print(f"{len(traces)} runs, {len(spans)} spans -> {otlp_endpoint(args.otlp)}", file=sys.stderr)
    return 0
