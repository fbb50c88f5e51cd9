"""DRAGIN's table 7 on this project: the same evaluation with BM25 and with the dense retriever, side by side.

    python -m explorer eval --dataset hotpotqa,musique --methods dragin --limit 30 --corpus benchmark \\
        --name dragin-table7-bm25 --retriever bm25
    python -m explorer eval --dataset hotpotqa,musique --methods dragin --limit 30 --corpus benchmark \\
        --name dragin-table7-dense --retriever dense
    python benchmarks/compare_retrievers.py dragin-table7-bm25 dragin-table7-dense [--db FILE] [--out FILE]

Reads the stored runs only (nothing is re-run). Questions are matched across the evaluations, so
each row compares the same questions: those both evaluations have completed or failed. Columns:
EM, F1, retrievals per question, gold-passage recall over the passages given to the model (and
how many) and over everything retrieved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "retrievers_dragin.md"
PAPER = ("DRAGIN paper, table 7 (LLaMA2-13B-Chat, EM / F1): 2WikiMultihopQA BM25 0.304 / 0.393, SGPT 0.273 / "
         "0.356; HotpotQA BM25 0.314 / 0.424, SGPT 0.264 / 0.371; IIRC BM25 0.185 / 0.222.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="+", help="evaluation names, one per retriever")
    parser.add_argument("--db", default=None, help="run database (default: the app's)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    from explorer.eval.report import dataset_title, retriever_text
    from explorer.eval.scores import score_evaluation
    from explorer.paths import default_db_path
    from explorer.store import RunStore

    store = RunStore(args.db or default_db_path())
    evaluations = {name: score_evaluation(store, name) for name in args.names}
    retrievers = {name: retriever_text((store.evaluation(name) or {}).get("settings", {}).get("retriever"))
                  for name in args.names}
    keys = None
    for scores in evaluations.values():
        have = {(r.dataset, r.question_id, r.label) for r in scores.runs}
        keys = have if keys is None else keys & have
    keys = keys or set()
    lines = ["# Retrievers compared on the same questions (DRAGIN's table 7)", "",
             f"`python benchmarks/compare_retrievers.py {' '.join(args.names)}`: the runs stored under each "
             "evaluation, on the questions every evaluation has. " + PAPER, "",
             "| dataset | method | retriever | questions | EM | F1 | retrievals | recall (given) | given | "
             "recall (retrieved) | retrieved |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    datasets = sorted({d for d, _, _ in keys})
    labels = sorted({label for _, _, label in keys})
    for d in datasets:
        for label in labels:
            for name, scores in evaluations.items():
                runs = [r for r in scores.runs if (r.dataset, r.question_id, r.label) in keys and r.dataset == d
                        and r.label == label]
                if not runs:
                    continue

                def mean(key: str, runs=runs) -> str:
                    values = [float(r.scores[key]) for r in runs if r.scores.get(key) is not None]
                    return f"{statistics.fmean(values):.3f}" if values else "–"

                lines.append(f"| {dataset_title(d)} | {label} | {retrievers[name]} | {len(runs)} | {mean('em')} | "
                             f"{mean('f1')} | {mean('retrievals')} | {mean('given_recall')} | "
                             f"{mean('given_passages')} | {mean('passage_recall')} | {mean('retrieved_passages')} |")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
