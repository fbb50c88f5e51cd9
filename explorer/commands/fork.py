"""``python -m explorer fork RUN_ID``: a stored run replayed up to a point, then continued with one change.

The fork opens the parent's model and corpus (as its trace records them), replays the parent up
to ``--at SPAN:TOKEN`` or ``--retrieval ID`` and goes on live with the change; it is stored beside
its parent, and the diff of the two is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from explorer.cli import add_attn_option, add_threads_option
from explorer.config import parse_assignments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fork", help="fork a stored run at a token or a retrieval, with one change",
        description="Replay a stored run exactly up to a point, then continue live with one change: force or "
                    "suppress a retrieval, edit a query or the passages, or change a parameter from there on. "
                    "Points are event ids as `explorer show`, the exports and the web app's hover titles give them.")
    parser.add_argument("run_id", help="the run to fork (an id or a unique prefix of one)")
    at = parser.add_mutually_exclusive_group()
    at.add_argument("--at", metavar="SPAN:TOKEN", help="a generated token: the generation event id and the token index")
    at.add_argument("--retrieval", type=int, metavar="ID", help="a retrieval: its retrieval event id")
    change = parser.add_mutually_exclusive_group()
    change.add_argument("--force-retrieval", action="store_true", help="retrieve at --at (the method's query rule, or "
                                                                       "--query)")
    change.add_argument("--suppress-retrieval", action="store_true", help="skip the retrieval at --retrieval")
    change.add_argument("--edit-query", metavar="TEXT", help="search with this query at --retrieval instead")
    change.add_argument("--passages", metavar="ID,ID,...",
                        help="give the model exactly these passages, in this order, at --retrieval (ids from the "
                             "retrieval, or any passage id of the corpus)")
    change.add_argument("--remove", metavar="ID,ID,...", help="drop these passages from the retrieval at --retrieval")
    change.add_argument("--add", metavar="ID,ID,...", help="add these corpus passages after the retrieval's own")
    parser.add_argument("--query", default=None, help="with --force-retrieval: search with this text")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                        help="change a parameter from the span of --at on (repeatable), e.g. --set threshold=0.8")
    parser.add_argument("--db", default=None, help="run database (default: the app's, EXPLORER_DB)")
    parser.add_argument("--device", default=None, help="device for the model (default: the parent's)")
    add_attn_option(parser)
    add_threads_option(parser)
    parser.add_argument("--json", type=Path, default=None, help="also write the fork's trace as JSON here")
    parser.set_defaults(handler=run)


def _ids(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def build_plan(args: argparse.Namespace, parent: Any) -> Any:
    """The fork plan the arguments describe, checked against the parent (before any model is loaded)."""
    from explorer.errors import ConfigError, check_text
    from explorer.forks import ForkChange, ForkPlan, ForkPoint, parse_at, resolve

    params = parse_assignments(args.settings)
    for flag, text in (("--query", args.query), ("--edit-query", args.edit_query)):
        if text is not None:
            check_text(text, flag)
    if args.at is None and args.retrieval is None:
        raise ConfigError("say where to fork", where="fork", fix="give --at SPAN:TOKEN or --retrieval ID")
    point = parse_at(args.at) if args.at is not None else ForkPoint(retrieval=args.retrieval)
    hits = []
    if point.retrieval is not None and 0 <= point.retrieval < len(parent.events):
        hits = [str(h.get("id")) for h in parent.events[point.retrieval].payload.get("hits") or []]
    if args.force_retrieval:
        change = ForkChange("force_retrieval", query=args.query)
    elif args.suppress_retrieval:
        change = ForkChange("suppress_retrieval")
    elif args.edit_query is not None:
        change = ForkChange("edit_query", query=args.edit_query)
    elif args.passages is not None:
        change = ForkChange("edit_passages", passages=tuple(_ids(args.passages)))
    elif args.remove is not None:
        dropped = set(_ids(args.remove))
        unknown = sorted(dropped - set(hits))
        if unknown:
            raise ConfigError(f"passage(s) {', '.join(unknown)} are not in that retrieval", where="--remove",
                              fix=f"choose among {', '.join(hits) or 'none: it returned no passages'}")
        change = ForkChange("edit_passages", passages=tuple(h for h in hits if h not in dropped))
    elif args.add is not None:
        change = ForkChange("edit_passages", passages=tuple(hits + [p for p in _ids(args.add) if p not in hits]))
    elif params:
        change = ForkChange("set_params", params=params)
    else:
        change = ForkChange("none")
    if params and change.kind != "set_params":
        raise ConfigError("--set changes parameters on its own", where="--set", fix="fork once per change")
    if args.query is not None and change.kind != "force_retrieval":
        raise ConfigError("--query goes with --force-retrieval", where="--query",
                          fix="use --edit-query TEXT to change a retrieval's query")
    plan = ForkPlan(parent.run_id, point, change)
    resolve(parent, plan)
    return plan


def run(args: argparse.Namespace) -> int:
    from explorer.forks import fork_run
    from explorer.forks.diff import diff_runs
    from explorer.journal import RunJournal
    from explorer.outputs import check_output_file, write_text_file
    from explorer.paths import default_db_path
    from explorer.retrieval.choice import retriever_config
    from explorer.runtime import open_runtime
    from explorer.store import RunStore
    from explorer.summary import render_text

    if args.json:
        args.json = check_output_file(args.json, "--json")
    store = RunStore(args.db or default_db_path())
    parent = store.get(store.resolve_id(args.run_id))
    plan = build_plan(args, parent)
    model, corpus = parent.model or {}, parent.corpus or {}
    recorded = dict(corpus.get("retriever_config") or {"kind": corpus.get("retriever", "bm25")})
    kind = recorded.pop("kind", "bm25")
    choice = retriever_config(kind, recorded.pop("embedder", None), recorded)
    runtime = open_runtime(str(model.get("source") or "embedded"), str(corpus.get("spec") or "demo"),
                           dtype=str(model.get("dtype") or "float32"), device=args.device or "cpu",
                           attn=args.attn if args.attn != "auto" else str(model.get("attn_requested") or "auto"),
                           progress=lambda m: print(m, file=sys.stderr, flush=True), retriever=choice)
    child = fork_run(parent, plan, runtime, journal=RunJournal(store))
    print(render_text(child))
    diff = diff_runs(parent, child)
    print(f"fork of {parent.run_id}: {plan.describe()}")
    print(f"replayed {child.costs.replayed_spans} spans ({child.costs.replayed_tokens} tokens) and "
          f"{child.costs.reused_retrievals} retrievals from the parent")
    first = diff.first_difference
    print("written text: " + ("the same as the parent's" if first is None else
                              f"differs from the parent's after {first} shared tokens"))
    print(f"answer: {child.answer!r} (parent: {parent.answer!r})" + (" — unchanged" if diff.same_answer else ""))
    print(f"stored as run {child.run_id}")
    if args.json:
        write_text_file(args.json, child.to_json(indent=1), "--json")
    return 0 if child.status == "complete" else 1
