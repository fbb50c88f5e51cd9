"""How DRAGIN's and FLARE's signals are distributed on a model, to choose thresholds that fire.

Thresholds do not transfer across models (the DRAGIN paper's 0.6-1.5 are for Llama-2/Vicuna),
so the explorer ships per-model presets (explorer/methods/presets.py). This script produces the
evidence for them: it drafts an answer to every demo question without retrieval, with the same
prompts the methods use, and prints for each signal the distribution of the per-question maximum
(RIND: entropy x amax over content tokens, paper variant; the reference's per-sentence word
score; FLARE's minimum token probability), and the fraction of questions a threshold would fire on.

    .venv/bin/python -m benchmarks.calibrate_thresholds [--model embedded] [--limit 41]
"""

from __future__ import annotations

import statistics

from benchmarks.common import calibration_parser, open_calibration, quartiles
from explorer.eval.datasets import load_dataset
from explorer.methods import prompts
from explorer.runtime import open_engine


def main() -> None:
    parser = calibration_parser(__doc__, limit=41, max_length=100)
    parser.add_argument("--seakr-questions", type=int, default=12,
                        help="questions for SEAKR's U (each costs two batches of k=20 samples)")
    args = parser.parse_args()
    engine, questions = open_calibration(args, open_engine)
    rind_max, prob_min = [], []
    for q in questions:
        segments = prompts.build_prompt(q.question, shots=prompts.exemplars(q.question, "auto", 6))
        gen = engine.generate(segments, max_new_tokens=args.max_length, stop_strings=prompts.STOP_STRINGS,
                              attention=True)
        rinds = [t.rind for t in gen.tokens if t.rind is not None and t.content]
        if rinds:
            rind_max.append(max(rinds))
        probs = [t.prob for t in gen.tokens if t.text.strip()]
        if probs:
            prob_min.append(min(probs))
    print(f"model: {engine.lm.name} · {len(rind_max)} demo questions drafted without retrieval\n")
    print("| signal | per-question extreme | distribution |")
    print("|---|---|---|")
    print(f"| DRAGIN paper RIND (entropy x amax, content tokens) | max | {quartiles(rind_max)} |")
    print(f"| FLARE token probability | min | {quartiles(prob_min)} |")
    print("\nshare of questions on which retrieval would fire at least once:")
    for theta in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2):
        share = sum(v > theta for v in rind_max) / len(rind_max)
        print(f"  DRAGIN θ = {theta:<4}: {share:.0%}")
    for theta in (0.05, 0.1, 0.2, 0.3, 0.4):
        share = sum(v < theta for v in prob_min) / len(prob_min)
        print(f"  FLARE  θ = {theta:<4}: {share:.0%}")
    if args.seakr_questions:
        seakr_u(engine, args.seakr_questions)


def seakr_u(engine, limit: int) -> None:
    """SEAKR's Gram U of the first reasoning step, without passages and with the gold passages as evidence.

    SEAKR's premise is that evidence calms the hidden states (lower U); δ should sit between the two.
    """
    from explorer.engine.generation import Sampling
    from explorer.engine.hidden import HiddenSpec
    from explorer.engine.uncertainty import measure
    from explorer.retrieval.base import Hit
    from explorer.retrieval.registry import open_retriever

    retriever = open_retriever("demo")
    bare, informed = [], []
    for q in load_dataset("demo", limit=limit):
        shots = prompts.exemplars(q.question, "auto", 6)
        gold = [Hit(retriever.passage(pid), 0.0, i + 1) for i, pid in enumerate(q.gold_passages)
                if retriever.passage(pid) is not None]
        for hits, out in (([], bare), (gold, informed)):
            m = measure(engine, prompts.build_prompt(q.question, shots=shots, hits=hits), k=20, max_new_tokens=48,
                        sampling=Sampling(seed=0), hidden=HiddenSpec(None, "mlp"), estimators=(),
                        stop_strings=("\n", *prompts.STOP_STRINGS), sentence_end=True)
            if m.value is not None:
                out.append(m.value)
    print(f"\nSEAKR Gram U of the first step (k=20, middle layer, MLP output), {len(bare)} demo questions:")
    print(f"  without passages:             {quartiles(bare)}")
    print(f"  with the gold passages:       {quartiles(informed)}")
    lower = sum(b > i for b, i in zip(bare, informed, strict=False))
    print(f"  gold evidence lowers U on {lower} of {min(len(bare), len(informed))} questions")
    for delta in sorted({round(statistics.median(bare), 1), round(statistics.median(informed), 1), -6.0}):
        print(f"  δ = {delta:<5}: fires on {sum(v > delta for v in bare) / len(bare):.0%} without passages, "
              f"{sum(v > delta for v in informed) / len(informed):.0%} with gold passages")


if __name__ == "__main__":
    main()
