"""How TARG's small-N variance is distributed on a model, and how its decisions compare with the margin's.

Every demo question is run once with the variance gate held shut (τ above any score), so the
draft and its N sampled prefixes are written without retrieval; the check event gives, per
question, the variance of the prefixes' mean log-probability and, from the same draft, the mean
margin. It prints the quartiles of the variance (and of the margin beside it), the share of
questions each τ would retrieve for, and how often a variance τ and the margin's τ agree at the
same budget (the same number of questions retrieving).

    .venv/bin/python -m benchmarks.calibrate_targ_variance [--model embedded] [--limit 10] [--skip 0] [--prefixes 5]
"""

from __future__ import annotations

from benchmarks.common import calibration_parser, open_calibration, quartiles
from explorer.methods.base import run_question
from explorer.runtime import open_runtime


def main() -> None:
    parser = calibration_parser(__doc__, limit=10, max_length=24)
    parser.add_argument("--prefixes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", type=int, default=0, help="leave out the first SKIP of the --limit questions")
    args = parser.parse_args()
    runtime, questions = open_calibration(args, open_runtime)
    questions = questions[args.skip:]
    variances, margins = [], []
    for q in questions:
        trace = run_question("targ", q.question, runtime,
                             config={"gate": "variance", "threshold": 100.0, "max_length": args.max_length,
                                     "prefixes": args.prefixes, "seed": args.seed})
        unit = trace.of_kind("check")[0].payload["units"][0]
        means = [p["value"] for p in unit["prefixes"]]
        print(f"  {q.id}: variance {unit['scores']['variance']} · margin {unit['scores']['margin']} · prefix means "
              f"{[round(m, 3) for m in means]}", flush=True)
        if unit["scores"]["variance"] is not None and unit["scores"]["margin"] is not None:
            variances.append(unit["scores"]["variance"])
            margins.append(unit["scores"]["margin"])
    n = len(variances)
    print(f"\nmodel: {runtime.engine.lm.name} · {n} demo questions · N = {args.prefixes} prefixes, seed {args.seed}\n")
    print("| signal | per question | distribution |")
    print("|---|---|---|")
    print(f"| TARG variance of the prefixes' mean log-probability (nats²) | variance | {quartiles(variances)} |")
    print(f"| TARG mean margin p2/p1 over the draft | mean | {quartiles(margins)} |")
    print("\nshare of questions that would retrieve:")
    for tau in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0):
        print(f"  TARG variance τ = {tau:<5}: {sum(v > tau for v in variances) / n:.0%}")
    print("\nthe same budget (the k questions with the highest score retrieve), both gates:")
    by_variance = sorted(range(n), key=lambda i: -variances[i])
    by_margin = sorted(range(n), key=lambda i: -margins[i])
    for k in sorted({1, 2, 3, n // 2} - {0}):
        shared = len(set(by_variance[:k]) & set(by_margin[:k]))
        print(f"  k = {k}: {shared} of {k} questions chosen by both")


if __name__ == "__main__":
    main()
