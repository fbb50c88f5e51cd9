"""What BlendFilter and DR-RAG cost per question: LLM calls, retrievals, pair judgements, tokens, time.

The papers' efficiency claims in one table: DR-RAG answers with ONE LLM call (its pair classifier
replaces the model's judgement), BlendFilter spends six (two augmentations, three filter verdicts,
the answer). DR-RAG with the model as judge (no trained classifier) is run beside them to show
what the classifier saves. Every number is read from the runs' traces.

    python benchmarks/bench_blendfilter_drrag.py [--questions dq-03,dq-04,...] [--out FILE]

Runs on the demo corpus with the embedded model; writes benchmarks/results/blendfilter_drrag.md
unless --out - is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import write_result  # noqa: E402
from explorer.eval.datasets import load_dataset  # noqa: E402
from explorer.eval.metrics import answer_scores  # noqa: E402
from explorer.methods import run_question  # noqa: E402
from explorer.runtime import open_runtime  # noqa: E402
from explorer.trace import Trace  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "blendfilter_drrag.md"
# The two case studies first (BlendFilter's SuperMansion question, DR-RAG's Green performer), then
# four more multi-hop questions of the demo set.
DEFAULT_QUESTIONS = "dq-03,dq-04,dq-05,dq-06,dq-07,dq-08"
RUNS = (
    ("BlendFilter (K = 5)", "blendfilter", {}),
    ("DR-RAG CFS, classifier", "drrag", {"selection": "cfs", "judge": "classifier"}),
    ("DR-RAG CIS, classifier", "drrag", {"selection": "cis", "judge": "classifier"}),
    ("DR-RAG QDC", "drrag", {"selection": "qdc"}),
    ("DR-RAG CFS, model as judge", "drrag", {"selection": "cfs", "judge": "llm"}),
)


def facts(trace: Trace) -> dict[str, float]:
    c = trace.costs
    by_purpose: dict[str, int] = {}
    for g in trace.of_kind("generation"):
        by_purpose[g.payload["purpose"]] = by_purpose.get(g.payload["purpose"], 0) + 1
    return {"llm_calls": c.llm_calls, "retrievals": c.retrievals, "pairs": len(trace.of_kind("classifier")),
            "judge_calls": by_purpose.get("judge", 0), "tokens": c.generated_tokens, "prompt_tokens": c.prompt_tokens,
            "seconds": c.total_time, "passages": len(trace.of_kind("selection")[-1].payload["passage_ids"])
            if trace.of_kind("selection") else 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", default=DEFAULT_QUESTIONS, help="demo question ids, comma-separated")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()

    wanted = [q.strip() for q in args.questions.split(",") if q.strip()]
    questions = {q.id: q for q in load_dataset("demo")}
    missing = [q for q in wanted if q not in questions]
    if missing:
        print(f"unknown demo question(s): {', '.join(missing)}", file=sys.stderr)
        return 2
    runtime = open_runtime("embedded", "demo")
    results: dict[str, list[tuple[str, dict[str, float], str, float]]] = {}
    started = time.perf_counter()
    for title, method, config in RUNS:
        for qid in wanted:
            q = questions[qid]
            trace = run_question(method, q.question, runtime, config=config)
            if trace.status != "complete":
                print(f"{title} on {qid}: {trace.status}: {trace.error}", file=sys.stderr)
                return 1
            row = facts(trace)
            em = answer_scores(trace.answer or "", q.answers)["em"]
            results.setdefault(title, []).append((qid, row, trace.answer or "", em))
            print(f"{title} {qid}: {row['llm_calls']} LLM calls, {row['retrievals']} retrievals, "
                  f"{row['pairs']} pairs, {row['seconds']:.1f} s, answer {trace.answer!r}", file=sys.stderr)

    model = runtime.engine.fingerprint().get("name", "?")
    cases = [f"{qid} is the {questions[qid].extra.get('case_study')} case study" for qid in wanted
             if questions[qid].extra.get("case_study") in ("blendfilter", "drrag")]
    lines = ["# BlendFilter and DR-RAG: cost per question", "",
             f"Made by `python benchmarks/bench_blendfilter_drrag.py` ({time.strftime('%Y-%m-%d')}): {model} "
             f"(embedded) on the demo corpus, questions {', '.join(wanted)}"
             + (f" ({'; '.join(cases)})" if cases else "")
             + ". Default configs (BlendFilter K = 5; DR-RAG k = 4, k1 = 2, k2 = 5). Every count "
             "comes from the traces. *LLM calls* include the completion of a missing \"So the answer is\" (one more "
             "call when the model did not write it). Seconds are wall time on a shared 2-core machine (provisional).",
             "", "## Means per question", "",
             "| run | LLM calls | retrievals | pairs judged | of which by the model | passages read | generated tokens "
             "| prompt tokens | seconds | EM |", "|---|---|---|---|---|---|---|---|---|---|"]
    for title, rows in results.items():
        def mean(key: str, rows: list = rows) -> float:
            return statistics.fmean(r[1][key] for r in rows)

        em = statistics.fmean(r[3] for r in rows)
        lines.append(f"| {title} | {mean('llm_calls'):.2f} | {mean('retrievals'):.2f} | {mean('pairs'):.1f} | "
                     f"{mean('judge_calls'):.1f} | {mean('passages'):.1f} | {mean('tokens'):.0f} | "
                     f"{mean('prompt_tokens'):.0f} | {mean('seconds'):.1f} | {em:.2f} |")
    lines += ["", "## Per question", "", "| run | question | LLM calls | retrievals | pairs | seconds | answer |",
              "|---|---|---|---|---|---|---|"]
    for title, rows in results.items():
        for qid, row, answer, em in rows:
            mark = " ✓" if em else ""
            lines.append(f"| {title} | {qid} | {row['llm_calls']} | {row['retrievals']} | {row['pairs']} | "
                         f"{row['seconds']:.1f} | {answer.replace('|', '/')}{mark} |")
    lines += ["", f"Total wall time {time.perf_counter() - started:.0f} s.", ""]
    text = "\n".join(lines)
    print(text)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
