"""How ETC's indicator and TARG's draft scores are distributed on a model, to choose presets that fire.

Like :mod:`benchmarks.calibrate_thresholds` for DRAGIN: every demo question is run once with
the gate held shut (ETC's θ at its upper bound, TARG's τ above any score), so each draft is
written without retrieval, and the check events give, per question, ETC's largest indicator over
eligible words (attention x smoothed Δ²H) and TARG's mean margin and mean entropy over the draft.
It prints their quartiles and the share of questions each threshold would retrieve for.

    .venv/bin/python -m benchmarks.calibrate_etc_targ [--model embedded] [--limit 10]
"""

from __future__ import annotations

from benchmarks.common import calibration_parser, open_calibration, quartiles
from explorer.methods.base import run_question
from explorer.runtime import open_runtime


def main() -> None:
    parser = calibration_parser(__doc__, limit=10, max_length=40)
    args = parser.parse_args()
    runtime, questions = open_calibration(args, open_runtime)
    etc_max, margin, entropy = [], [], []
    for q in questions:
        trace = run_question("etc", q.question, runtime,
                             config={"threshold": 100.0, "max_rounds": 1, "max_length": args.max_length})
        values = [u["value"] for c in trace.of_kind("check") for u in c.payload["units"] if u["eligible"]]
        if values:
            etc_max.append(max(values))
        trace = run_question("targ", q.question, runtime, config={"threshold": 100.0, "max_length": 24})
        unit = trace.of_kind("check")[0].payload["units"][0]
        if unit["scores"]["margin"] is not None:
            margin.append(unit["scores"]["margin"])
            entropy.append(unit["scores"]["entropy"])
        print(f"  {q.id}: ETC max {max(values) if values else None} · TARG margin {unit['scores']['margin']} "
              f"· entropy {unit['scores']['entropy']}", flush=True)
    print(f"model: {runtime.engine.lm.name} · {len(etc_max)} demo questions drafted without retrieval\n")
    print("| signal | per question | distribution |")
    print("|---|---|---|")
    print(f"| ETC attention x smoothed Δ²H (eligible words) | max | {quartiles(etc_max)} |")
    print(f"| TARG mean margin p2/p1 over the draft | mean | {quartiles(margin)} |")
    print(f"| TARG mean entropy over the draft | mean | {quartiles(entropy)} |")
    print("\nshare of questions that would retrieve:")
    for theta in (0.3, 0.5, 0.8, 1.0, 1.3, 1.6, 2.0, 3.0):
        print(f"  ETC  θ = {theta:<4}: {sum(v > theta for v in etc_max) / len(etc_max):.0%}")
    for tau in (0.2, 0.3, 0.4, 0.5, 0.6):
        print(f"  TARG margin τ = {tau:<4}: {sum(v > tau for v in margin) / len(margin):.0%}")
    for tau in (1.0, 1.5, 2.0, 2.5, 3.0):
        print(f"  TARG entropy τ = {tau:<4}: {sum(v > tau for v in entropy) / len(entropy):.0%}")


if __name__ == "__main__":
    main()
