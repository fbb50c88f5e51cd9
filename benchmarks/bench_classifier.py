"""DR-RAG's pair classifier: its held-out scores, and its per-pair latency on CPU beside the model as judge.

DR-RAG's point is one LLM call per question, so the classifier must stay in the millisecond range
per pair: inverse selection scores all C(k, 2) pairs, forward selection walks the stage-2
candidates one pair at a time. Cold cost is dominated by embedding the passages (the encoder
caches by text); warm cost is features + model. The model-as-judge fallback (one generation per
pair) is timed on the same pairs, so the ratio shows what the classifier saves.

    python benchmarks/bench_classifier.py [--questions 10] [--model PATH] [--llm-pairs 6] [--out FILE]

Uses the trained model in the cache; without one it trains a small model first (and says so).
Writes the tables as markdown to benchmarks/results/classifier.md unless --out - is given.
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

from benchmarks.common import write_result  # noqa: E402
from explorer.methods.drrag.pair_classifier import PairClassifier, load_hotpotqa, train  # noqa: E402
from explorer.paths import shared_data_dir  # noqa: E402

TARGET_WARM_MS = 5.0  # per pair, warm (passages already embedded)
TARGET_COLD_MS = 50.0  # per pair in a batch whose passages are not embedded yet
OUT = Path(__file__).resolve().parent / "results" / "classifier.md"


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _metrics_table(metadata: dict) -> list[str]:
    metrics = metadata.get("metrics", {})
    counts = metadata.get("counts", {})
    chosen = metrics.get("chosen", {})
    q, p = counts.get("questions", {}), counts.get("pairs", {})
    threshold = chosen.get("threshold", float("nan"))
    lines = [f"Model: {chosen.get('model', '?')}, threshold {threshold:.2f} (model kind and threshold chosen by "
             "grouped cross-validation on the training questions), features over "
             f"{metadata.get('encoder', '?')} embeddings. Split by question (seed {metadata.get('seed', '?')}): "
             f"{q.get('train', '?')} training and {q.get('test', '?')} held-out questions; {p.get('train', '?')} "
             f"training pairs ({p.get('train_positive', '?')} positive), {p.get('test', '?')} held-out pairs "
             f"({p.get('test_positive', '?')} positive; 4 negatives per positive, 3 of them one-gold-one-distractor).",
             "", "| held-out pairs | n | positive | accuracy | precision | recall | F1 |",
             "|---|---|---|---|---|---|---|"]
    rows = [(name, m) for name, m in metrics.get("held_out", {}).items()]
    rows += [(f"baseline: {name.replace('_', ' ')}", per["overall"])
             for name, per in metrics.get("baselines", {}).items()]
    for name, m in rows:
        lines.append(f"| {name} | {m['n']} | {m['positives']} | {m['accuracy']:.3f} | {m['precision']:.3f} | "
                     f"{m['recall']:.3f} | {m['f1']:.3f} |")
    ranking = metrics.get("top_pair_accuracy", {})
    if ranking:
        lines += ["", "Best-scored pair among ALL pairs of a held-out question's paragraphs is a gold pair: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in ranking.items()) + " (chance < 0.05)."]
    cv = metrics.get("selection", [])
    if cv:
        lines += ["", "Cross-validated F1 on the training questions: "
                  + ", ".join(f"{c['model']} {c['cv_f1']:.3f}" for c in cv) + "."]
    return lines


def _llm_judge_times(questions: list, pairs_wanted: int) -> tuple[list[float], str]:
    """Seconds per pair for the model as judge (one 1-token generation on the judge prompt)."""
    from explorer.methods.drrag.method import judge_prompt
    from explorer.runtime import open_engine

    engine = open_engine("embedded")
    times = []
    for q in questions:
        for b in range(1, len(q.passages)):
            if len(times) >= pairs_wanted:
                break
            prompt = judge_prompt(q.question, q.passages[0], q.passages[b])
            t = time.perf_counter()
            engine.generate(prompt, max_new_tokens=1, attention=False)
            times.append(time.perf_counter() - t)
    return times, engine.fingerprint().get("name", "?")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10, help="HotpotQA questions to time (45 pairs each)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a classifier folder (default: the cache's retrained one, else the shipped one)")
    parser.add_argument("--llm-pairs", type=int, default=6, help="pairs to time with the model as judge (0: skip)")
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    args = parser.parse_args()

    data = shared_data_dir()
    if not data.is_dir():
        print(f"benchmark data not found at {data}; set EXPLORER_DATA", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    model = PairClassifier.load(args.model)
    source = str(args.model or PairClassifier.default_source()[0])
    if model is None:
        print(f"no classifier at {source}: training a small one (30 questions per dataset) for timing")
        model, _ = train(data, limit=30, store=False)
        source = str(model.save(Path(tempfile.mkdtemp()) / "pair_classifier")) + " (small, trained for timing)"
    encoder = model.encoder
    print(f"model + encoder ready in {time.perf_counter() - t0:.1f} s ({source})")
    import torch

    questions = load_hotpotqa(data / "hotpotqa/dev_distractor_100.json", args.questions)
    model.predict_many(questions[0].question, [(questions[0].passages[0], questions[0].passages[1])])  # warm-up

    batch_cold, batch_warm, single_cold, single_warm, one_by_one = [], [], [], [], []
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
        # all 45 pairs of 10 passages, cold then warm, in one call (inverse selection's shape)
        encoder.clear_cache()
        t = time.perf_counter()
        model.predict_many(q.question, pairs)
        batch_cold.append((time.perf_counter() - t) / len(pairs))
        t = time.perf_counter()
        model.predict_many(q.question, pairs)
        batch_warm.append((time.perf_counter() - t) / len(pairs))
        # the same pairs one call each, warm (how the DR-RAG method asks, recording each verdict)
        t = time.perf_counter()
        for a, b in pairs:
            model.predict_proba(q.question, a, b)
        one_by_one.append((time.perf_counter() - t) / len(pairs))

    rows = [
        ("single pair, cold (encode q + 2 passages)", single_cold, None),
        ("single pair, warm", single_warm, TARGET_WARM_MS),
        ("per pair in a 45-pair batch, cold", batch_cold, TARGET_COLD_MS),
        ("per pair in a 45-pair batch, warm", batch_warm, TARGET_WARM_MS),
        ("per pair, 45 single calls, warm (the method's way)", one_by_one, TARGET_WARM_MS),
    ]
    llm_times, llm_name = ([], "")
    if args.llm_pairs > 0:
        llm_times, llm_name = _llm_judge_times(questions, args.llm_pairs)
        rows.append((f"{llm_name} as judge, one pair (1-token generation)", llm_times, None))

    table = ["| per-pair latency (median over questions) | ms | target | |", "|---|---|---|---|"]
    for name, values, target in rows:
        med = _ms(statistics.median(values))
        verdict = "" if target is None else ("ok" if med <= target else "OVER")
        table.append(f"| {name} | {med:.2f} | {'' if target is None else f'<= {target:.0f}'} | {verdict} |")
    cold, warm = statistics.median(batch_cold), statistics.median(batch_warm)
    ratios = [f"cold / warm per pair (batch): {cold / warm:.1f}x (the embedding cache makes repeated passages free)"]
    if llm_times:
        ratios.append(f"model as judge / classifier, per pair (single calls, warm): "
                      f"{statistics.median(llm_times) / statistics.median(one_by_one):.0f}x")

    import platform

    header = ["# DR-RAG pair classifier: held-out scores and latency", "",
              f"Made by `python benchmarks/bench_classifier.py` ({time.strftime('%Y-%m-%d')}) with {source}. "
              f"CPU: {os.cpu_count()} cores ({platform.machine()}), torch threads {torch.get_num_threads()}; the "
              "machine was shared with other jobs, so latencies are provisional; the ratios are measured side by "
              f"side in one run. {len(questions)} HotpotQA questions timed (45 pairs each)"
              + (f"; the model as judge on {len(llm_times)} pairs." if llm_times else "."), ""]
    text = "\n".join(header + ["## Held-out scores", ""] + _metrics_table(model.metadata)
                     + ["", "## Latency", ""] + table + [""] + [f"- {r}" for r in ratios] + [""])
    print(text)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
