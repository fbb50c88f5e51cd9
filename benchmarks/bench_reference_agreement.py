"""How often the reference variants decide exactly what an independent oracle of the authors' code decides.

For each question and threshold the method runs through the explorer (its trace) and the oracle
(tests/reference_oracle.py: the authors' loop step by step, on ``model.generate`` and plain forward
passes) runs beside it, over the same retriever. Their rounds are compared: whether a chunk fires,
which sentence, the kept text, the query and the kept continuation, for the first decision (before
any retrieval) and for every decision after the first retrieval. Questions: demo questions over
the demo corpus and HotpotQA questions over the benchmark corpus when ../shared/data is there.

    .venv/bin/python -m benchmarks.bench_reference_agreement [--questions 15] [--dragin-thresholds 3,12]

Every compared question is appended to a JSON-lines log (``--log``) as soon as it is done; a second
run with the same log skips what is there, so a long measurement can be stopped and resumed. An
empty threshold list (``--flare-thresholds ""``) leaves that method out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_name, write_result  # noqa: E402
from explorer.engine.loader import load_model  # noqa: E402
from explorer.eval.datasets import load_dataset  # noqa: E402
from explorer.methods import prompts  # noqa: E402
from explorer.methods.base import run_question  # noqa: E402
from explorer.paths import shared_data_dir  # noqa: E402
from explorer.runtime import open_runtime  # noqa: E402
from explorer.trace import Trace  # noqa: E402
from tests import reference_oracle as oracle  # noqa: E402

FIELDS = ("fired", "sentence", "kept", "query", "continuation")


def rounds_of(trace: Trace) -> list[oracle.Round]:
    """The rounds a trace records, in the oracle's terms."""
    events = trace.events
    out = []
    for draft in (e for e in events if e.kind == "generation" and e.payload["purpose"] == "draft"):
        trigger = next((e for e in events if e.kind == "trigger" and e.payload["span"] == draft.id), None)
        if trigger is None:
            out.append(oracle.Round(False))
            continue
        cut = next(e for e in events if e.kind == "truncation" and e.payload["span"] == draft.id)
        query = next(e for e in events if e.kind == "query" and e.id > draft.id)
        cont = next(e for e in events if e.kind == "generation" and e.payload["purpose"] == "continuation"
                    and e.id > draft.id)
        kept = cont.payload["text"]
        if trace.method == "dragin":  # what the method kept of the continuation: its first sentence
            cont_cut = next((e for e in events if e.kind == "truncation" and e.payload["span"] == cont.id), None)
            kept = cont_cut.payload.get("kept_as", "") if cont_cut is not None else kept.strip()
        out.append(oracle.Round(True, trigger.payload.get("sentence"), cut.payload.get("kept_as", ""),
                                query.payload["text"], kept))
    return out


@dataclass
class Agreement:
    first: dict[str, int]
    later: dict[str, int]
    questions: int = 0
    later_compared: int = 0
    fired_first: int = 0
    disagreements: list[str] | None = None


def compare(ours: list[oracle.Round], theirs: list[oracle.Round]) -> tuple[dict, dict | None]:
    """Field by field, the first round and every round after the oracle's first retrieval.

    Both sides hold what their loop kept (DRAGIN: the continuation's first sentence, as the method
    recorded it and as the oracle split it); nothing is split again here, since splitting an
    already-split sentence can split it once more."""
    def key(r: oracle.Round, field: str):
        return getattr(r, field)

    first = {f: key(ours[0], f) == key(theirs[0], f) for f in FIELDS} if ours and theirs else None
    later = None
    fired_at = next((i for i, r in enumerate(theirs) if r.fired), None)
    if fired_at is not None:
        a, b = ours[fired_at + 1:], theirs[fired_at + 1:]
        later = {f: len(a) == len(b) and all(key(x, f) == key(y, f) for x, y in zip(a, b, strict=False))
                 for f in FIELDS}
    return first or {}, later


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=15, help="demo questions, and as many HotpotQA ones")
    parser.add_argument("--dragin-thresholds", default="3,12", help="DRAGIN θ: one firing often, one rarely")
    parser.add_argument("--flare-thresholds", default="0.2,0.5", help="FLARE θ: one firing often, one rarely")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--fewshot", type=int, default=6, help="exemplars in the prompt (fewer: shorter prompts)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/reference_agreement.md"))
    parser.add_argument("--shard", default="0/1", metavar="I/N",
                        help="measure only questions i, i+N, i+2N, ... (several processes share the work through the "
                             "log; a last run without --shard writes the whole table)")
    parser.add_argument("--log", default=str(ROOT / ".cache/reference_agreement.jsonl"),
                        help="per-question outcomes, appended as they come; a rerun resumes from it")
    args = parser.parse_args()
    shard, shards = (int(v) for v in args.shard.split("/"))
    log_path = Path(args.log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # "compare" versions the comparison itself: outcomes logged under another one are measured again.
    settings = {"max_length": args.max_length, "fewshot": args.fewshot, "compare": 2}
    done: dict[tuple, dict] = {}
    if log_path.is_file():
        for line in log_path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("settings") == settings:
                done[(row["method"], row["threshold"], row["set"], row["id"])] = row
    model = load_model("embedded", attn_implementation="eager").model
    sets = [("demo", "demo", load_dataset("demo", limit=args.questions))]
    if shared_data_dir().is_dir():
        sets.append(("hotpotqa", "benchmark", load_dataset("hotpotqa", limit=args.questions)))
    runtimes = {corpus: open_runtime("embedded", corpus) for _, corpus, _ in sets}
    started = time.perf_counter()
    reused = 0
    table = []
    for method, thresholds in (("dragin", args.dragin_thresholds), ("flare", args.flare_thresholds)):
        for threshold in (float(t) for t in thresholds.split(",") if t.strip()):
            agg = Agreement(first={f: 0 for f in FIELDS}, later={f: 0 for f in FIELDS}, disagreements=[])
            for name, corpus, questions in sets:
                runtime = runtimes[corpus]
                tokenizer = runtime.engine.tokenizer

                def search(query: str, k: int, runtime=runtime) -> list[str]:
                    return [h.passage.as_context() for h in runtime.retriever.search(query, k)] if query.strip() else []

                for position, q in enumerate(questions):
                    row = done.get((method, threshold, name, q.id))
                    if row is None and position % shards != shard:
                        continue
                    if row is None:
                        config = {"threshold": threshold, "max_length": args.max_length, "fewshot": args.fewshot}
                        trace = run_question(method, q.question, runtime, variant="reference", config=config)
                        demo = prompts.exemplars(q.question, "auto", args.fewshot, separator="\n")
                        loop = oracle.dragin_loop if method == "dragin" else oracle.flare_loop
                        theirs = loop(model, tokenizer, search, q.question, demo, threshold=threshold,
                                      max_length=args.max_length)
                        first, later = compare(rounds_of(trace), theirs)
                        row = {"method": method, "threshold": threshold, "set": name, "id": q.id,
                               "settings": settings, "oracle_fired_first": bool(theirs and theirs[0].fired),
                               "first": first, "later": later,
                               "ours": [asdict(r) for r in rounds_of(trace)], "theirs": [asdict(r) for r in theirs]}
                        with log_path.open("a", encoding="utf-8") as fh:
                            fh.write(json.dumps(row) + "\n")
                    else:
                        reused += 1
                    first, later = row["first"], row["later"]
                    agg.questions += 1
                    agg.fired_first += row["oracle_fired_first"]
                    for f in FIELDS:
                        agg.first[f] += first.get(f, False)
                    if later is not None:
                        agg.later_compared += 1
                        for f in FIELDS:
                            agg.later[f] += later[f]
                    if not all(first.values()) or (later and not all(later.values())):
                        agg.disagreements.append(f"{name} {q.id}")
                    print(f"{method} θ={threshold} {name} {q.id}: first {first} later {later}", flush=True)
            table.append((method, threshold, agg))
    minutes = (time.perf_counter() - started) / 60
    lines = [
        "# Reference variants against an independent oracle of the authors' code",
        "",
        f"Embedded model, max_length {args.max_length}, {args.fewshot} exemplars, {cpu_name()}; "
        f"{reused} outcomes read from the log (measured earlier), the rest measured in {minutes:.0f} min. "
        f"Questions: {', '.join(f'{len(qs)} {n}' for n, _, qs in sets)}. Generated by "
        "`python -m benchmarks.bench_reference_agreement`.",
        "",
        "First decision = the first chunk's check, before any retrieval; later = every round after the first "
        "retrieval (compared only where the oracle retrieved), counted as agreeing when all of them agree.",
        "",
        "| method | θ | questions | first fires (oracle) | first: fire | sentence | cut | query | continuation "
        "| later compared | later: fire | sentence | cut | query | continuation |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, threshold, a in table:
        first = " | ".join(f"{a.first[f]}/{a.questions}" for f in FIELDS)
        later = " | ".join(f"{a.later[f]}/{a.later_compared}" for f in FIELDS)
        lines.append(f"| {method} reference | {threshold:g} | {a.questions} | {a.fired_first} | {first} | "
                     f"{a.later_compared} | {later} |")
    lines.append("")
    for method, threshold, a in table:
        if a.disagreements:
            lines.append(f"- {method} θ = {threshold:g}: disagreements on {', '.join(a.disagreements)}")
    text = "\n".join(lines) + "\n"
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
