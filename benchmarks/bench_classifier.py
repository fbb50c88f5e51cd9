"""Per-pair latency of DR-RAG's pair classifier on CPU, cold (texts not yet embedded) and warm.

DR-RAG's point is one LLM call per question, so the classifier must stay in the millisecond
range per pair: inverse selection scores all C(k, 2) pairs, forward selection walks the stage-2
candidates. Cold cost is dominated by embedding the passages; warm cost is features + model.

    python benchmarks/bench_classifier.py [--questions 10] [--model PATH]

Uses the trained model in the cache; without one it trains a small model first (say so below).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from explorer.paths import shared_data_dir  # noqa: E402
from explorer.retrieval.pair_classifier import PairClassifier, load_hotpotqa, train  # noqa: E402

TARGET_WARM_MS = 5.0  # per pair, scored in a batch (inverse selection)
TARGET_COLD_MS = 50.0  # per pair in a batch whose passages are not embedded yet


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10, help="HotpotQA questions to time (45 pairs each)")
    parser.add_argument("--model", type=Path, default=None, help="trained classifier (default: the cache)")
    args = parser.parse_args()

    data = shared_data_dir()
    if not data.is_dir():
        print(f"benchmark data not found at {data}; set EXPLORER_DATA", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    model = PairClassifier.load(args.model)
    if model is None:
        print("no trained classifier in the cache: training a small one (30 questions per dataset) for timing")
        model, _ = train(data, limit=30, store=False)
        model.save(Path(tempfile.mkdtemp()) / "pair_classifier.joblib")
    encoder = model.encoder
    chosen = model.metadata.get("metrics", {}).get("chosen")
    print(f"model + encoder ready in {time.perf_counter() - t0:.1f} s ({chosen})")
    import torch

    print(f"torch threads: {torch.get_num_threads()}")

    questions = load_hotpotqa(data / "hotpotqa/dev_distractor_100.json", args.questions)
    model.predict_many(questions[0].question, [(questions[0].passages[0], questions[0].passages[1])])  # warm-up

    batch_cold, batch_warm, single_cold, single_warm = [], [], [], []
    for q in questions:
        ps = q.passages
        pairs = [(ps[a], ps[b]) for a in range(len(ps)) for b in range(a + 1, len(ps))]
        # single pair, cold: question and both passages unseen
        encoder.clear_cache()
        t = time.perf_counter()
        model.predict_proba(q.question, ps[0], ps[1])
        single_cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        model.predict_proba(q.question, ps[0], ps[1])
        single_warm.append(time.perf_counter() - t)
        # all 45 pairs of 10 passages, cold then warm
        encoder.clear_cache()
        t = time.perf_counter()
        model.predict_many(q.question, pairs)
        batch_cold.append((time.perf_counter() - t) / len(pairs))
        t = time.perf_counter()
        model.predict_many(q.question, pairs)
        batch_warm.append((time.perf_counter() - t) / len(pairs))

    rows = [
        ("single pair, cold (encode q + 2 passages)", single_cold, None),
        ("single pair, warm", single_warm, TARGET_WARM_MS),
        ("per pair in a 45-pair batch, cold", batch_cold, TARGET_COLD_MS),
        ("per pair in a 45-pair batch, warm", batch_warm, TARGET_WARM_MS),
    ]
    print(f"\n{len(questions)} questions, median over questions")
    for name, values, target in rows:
        med = _ms(statistics.median(values))
        if target is None:
            print(f"  {name:44s} {med:8.2f} ms   (no target: DR-RAG scores pairs of a question together)")
            continue
        verdict = "ok" if med <= target else "OVER"
        print(f"  {name:44s} {med:8.2f} ms   target <= {target:.0f} ms  [{verdict}]")
    cold, warm = statistics.median(batch_cold), statistics.median(batch_warm)
    print(f"\ncold / warm per pair (batch): {cold / warm:.1f}x (the embedding cache makes repeated passages free)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
