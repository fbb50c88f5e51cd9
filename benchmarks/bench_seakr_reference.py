"""How often SEAKR's reference variant decides what an independent oracle of the authors' reasoner decides.

Each question runs through ``--variant reference`` on the embedded model and the demo corpus while
every call the engine makes is recorded (prompt, stop strings, greedy tokens, samples and their end
states); tests/seakr_oracle.py then runs the authors' ``MultiHopReasoner`` loop on those outputs and
its decisions are compared with the trace's, kind by kind: whether a step retrieves, the query, the
passage kept after re-ranking, how the reasoning ends (a repeated query, no new passage) and the
final choice between the two answers. A decision after the first disagreement counts as a
disagreement (the two would no longer see the same contexts). The questions are demo questions the
tests do not use.

    .venv/bin/python -m benchmarks.bench_seakr_reference [--questions 5] [--deltas=-6,4.8] [--k 8]

Every (question, δ) pair is appended to a JSON-lines log (``--log``) when done; a second run with
the same log skips what is there, so the measurement can be taken a pair at a time; ``--report``
only writes the table from the log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_name, write_result  # noqa: E402
from explorer.methods.base import run_question  # noqa: E402
from explorer.runtime import open_runtime  # noqa: E402
from tests import seakr_oracle as oracle  # noqa: E402
from tests.test_seakr_reference import QUESTIONS as TEST_QUESTIONS  # noqa: E402

KINDS = ("retrieve", "query", "kept", "end", "final")


def demo_questions(n: int) -> list[str]:
    lines = (ROOT / "corpora/demo/questions.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["question"] for line in lines if line.strip()]
    return [q for q in questions if q not in TEST_QUESTIONS][:n]


def compare(runtime, question: str, config: dict) -> dict:
    """One paired run: the method's and the oracle's decisions and their agreement per kind."""
    from explorer.methods.base import make_config
    from explorer.methods.common import shots

    started = time.perf_counter()
    with oracle.recorder(runtime.engine) as calls:
        trace = run_question("seakr", question, runtime, variant="reference", config=config)
    ours = oracle.trace_decisions(trace)
    cfg = make_config("seakr", config)
    reasoner = oracle.Reasoner(question, shots(cfg, question), calls, runtime.retriever.search,
                               runtime.engine.tokenizer, eigen_threshold=cfg.delta,
                               prob_threshold=cfg.query_threshold, alpha=cfg.alpha)
    diverged = None
    try:
        theirs = reasoner.solve(cfg.max_steps, cfg.max_docs)
    except oracle.Diverged as exc:
        theirs, diverged = reasoner.decisions, str(exc)[:400]
    return {"question": question, "delta": config["delta"], "status": trace.status, "calls": len(calls),
            "step_u": [e.payload["units"][0]["value"] for e in trace.of_kind("check")],
            "ours": ours, "theirs": theirs, "agreement": oracle.agreement(ours, theirs), "diverged": diverged,
            "seconds": round(time.perf_counter() - started, 1)}


def table(rows: list[dict], config: dict) -> str:
    out = ["# SEAKR reference variant against an oracle of the authors' reasoner\n",
           f"CPU: {cpu_name()}; config: {json.dumps(config)}\n",
           "| δ | questions | " + " | ".join(KINDS) + " | all | oracle replayed every call | s / pair |",
           "|---:|---:|" + "---|" * (len(KINDS) + 3)]
    groups = [(d, [r for r in rows if r["delta"] == d]) for d in sorted({r["delta"] for r in rows})]
    for delta, sel in [*groups, ("all", rows)] if rows else []:
        cells, agree, total = [], 0, 0
        for kind in KINDS:
            a = sum(r["agreement"].get(kind, [0, 0])[0] for r in sel)
            n = sum(r["agreement"].get(kind, [0, 0])[1] for r in sel)
            agree, total = agree + a, total + n
            cells.append(f"{a} of {n}")
        clean = sum(1 for r in sel if r["diverged"] is None)
        secs = sum(r["seconds"] for r in sel) / len(sel)
        out.append(f"| {delta} | {len(sel)} | " + " | ".join(cells) + f" | {agree} of {total} | {clean} of {len(sel)} "
                   f"| {secs:.0f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--deltas", default="-6,4.8", help="comma-separated thresholds δ")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--step-tokens", type=int, default=32)
    ap.add_argument("--fewshot", type=int, default=2)
    ap.add_argument("--max-pairs", type=int, default=0, help="stop after this many new pairs (0 = all)")
    ap.add_argument("--report", action="store_true", help="only write the table from the log")
    ap.add_argument("--log", default=str(ROOT / "benchmarks/out/seakr_reference.jsonl"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/seakr_reference.md"))
    args = ap.parse_args()
    config = {"k": args.k, "step_tokens": args.step_tokens, "fewshot": args.fewshot, "max_length": 48,
              "answer_tokens": 16}
    log = Path(args.log)
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    seen = {(r["question"], r["delta"]) for r in done}
    runtime = None if args.report else open_runtime(corpus="demo")
    new = 0
    for delta in ([] if args.report else (float(d) for d in args.deltas.split(","))):
        for question in demo_questions(args.questions):
            if (question, delta) in seen or (args.max_pairs and new >= args.max_pairs):
                continue
            row = compare(runtime, question, {**config, "delta": delta})
            print(json.dumps({k: row[k] for k in ("question", "delta", "agreement", "diverged", "seconds")}))
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
            new += 1
    text = table(done, config)
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
