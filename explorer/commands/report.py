"""``python -m explorer report``: the tables and charts of a stored evaluation, written to a folder.

It reads the run database only (no model, no index), so a report can be made on any machine
that has the database file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.outputs import check_creatable


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write the tables and charts of a stored evaluation",
                                   description="Write evaluation.md (answer, cost and recall tables in the DRAGIN "
                                               "paper's layout), summary.csv, questions.csv and self-contained "
                                               "Plotly charts for one evaluation.")
    parser.add_argument("--name", default=None, help="evaluation name (default: list the stored evaluations)")
    parser.add_argument("--out", type=Path, default=None, help="folder to write to (default: reports/NAME)")
    parser.add_argument("--db", default=None, help="run database (default: the app's run database, EXPLORER_DB)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from explorer.eval.report import write_report
    from explorer.paths import default_db_path
    from explorer.store import RunStore

    store = RunStore(args.db or default_db_path(), readonly=True)  # a report only reads: any copy, any medium
    if not args.name:
        evaluations = store.evaluations()
        if not evaluations:
            print(f"no evaluations in {store.path}")
            return 1
        for e in evaluations:
            counts = store.evaluation(e["name"])["runs"]
            print(f"{e['name']}  {e['status']}  started {e['created_at']}  runs: "
                  + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        return 0
    from explorer.eval.report import REPORT_FILES

    out = check_creatable(args.out or Path("reports") / _safe(args.name), "--out", folder=True, files=REPORT_FILES)
    for path in write_report(store, args.name, out):
        print(path)
    return 0



def _safe(name: str) -> str:
    """A folder name from an evaluation name (which may hold characters a file system dislikes)."""
    return "".join(ch if ch.isalnum() or ch in "-_.+" else "_" for ch in name) or "evaluation"
