"""Every method ticked at once on the demo question, from the page: in turn, against all at once through the batch.

Each press goes through the page's own controller (:class:`explorer.ui.runs.controller.RunController`:
the worker thread, the recorder's listeners, the live views a few times a second, the store), as the
Run button does, with every control untouched. With the engine's batch on (the app's default when it
admits more than one run at a time) the methods of one press decode together, sharing each forward
pass, each keeping the trace it would have alone; with it off they run one after another. This
script presses both ways in one process, alternating per round so that load from other work hits
them alike, reports the wall and CPU seconds of the whole press, and checks that every method's
generated tokens and answer are the same both ways. Target: the nine methods at most 120 s on 2
quiet cores.

    python -m benchmarks.bench_nine_methods [--methods wo,sr,...] [--threads 2] [--rounds 1]
        [--out benchmarks/results/nine_methods.md]
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import cpu_name, write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "nine_methods.md"
QUESTION = "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?"
NINE = ("wo", "sr", "fl", "fs", "flare", "dragin", "seakr", "blendfilter", "drrag")
TARGET_S = 120.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(NINE), help="comma-separated methods (default: all nine)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the target is for 2 cores)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--samples-in-batch", action="store_true",
                        help="sampled rows join the shared batch on a CPU too (by default they keep their own)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]

    import torch

    torch.set_num_threads(args.threads)
    from explorer.engine import batching
    from explorer.engine.prefix_cache import PrefixCache
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime
    from explorer.store import RunStore
    from explorer.ui.page import controls
    from explorer.ui.runs.controller import RunController, RuntimeHolder

    runtime = open_runtime("embedded", "demo")
    engine = runtime.engine
    run_question("wo", QUESTION, runtime, config={"max_length": 8})  # warm-up: first passes, spaCy, the index

    store = RunStore(Path(tempfile.mkdtemp(prefix="bench-nine-")) / "runs.db")
    controller = RunController(store, RuntimeHolder(lambda: runtime, describe="embedded"))
    specs = controls.build_specs(methods, {}, {}, model="")  # untouched: each run applies its model's preset

    def press(batched: bool) -> dict[str, object]:
        if batched:
            batching.enable(engine, samples=args.samples_in_batch or None)
        try:
            updates = list(controller.stream(QUESTION, specs, gold=None, session="bench"))
        finally:
            if batched:
                batching.disable(engine)
        final = updates[-1]
        if len(final.run_ids) != len(methods):
            raise SystemExit(f"the press stored {len(final.run_ids)} of {len(methods)} runs: {final.status}")
        traces = [store.get(run_id) for run_id in final.run_ids]
        return {t.method: t for t in traces}

    def in_turn() -> dict[str, object]:
        return press(False)

    def together() -> dict[str, object]:
        return press(True)

    cases = (("one after another (the batch off)", in_turn),
             ("all at once through the batch (the app's default)", together))
    load0 = os.getloadavg()[0]
    found: dict[str, list[tuple[float, float, dict[str, object]]]] = {label: [] for label, _ in cases}
    for _ in range(args.rounds):
        for label, fn in cases:
            engine.prefix_cache = PrefixCache()  # as the app: on, and fresh for each set
            wall, cpu = time.perf_counter(), time.process_time()
            traces = fn()
            found[label].append((time.perf_counter() - wall, time.process_time() - cpu, traces))
            print(f"{label}: wall {found[label][-1][0]:.1f} s, cpu {found[label][-1][1]:.1f} s", flush=True)

    def tokens(t) -> list[list[int]]:
        return [[tok["id"] for tok in e.payload["tokens"]] for e in t.of_kind("generation")]

    a, b = found[cases[0][0]][-1][2], found[cases[1][0]][-1][2]
    differing = [m for m in methods if tokens(a[m]) != tokens(b[m]) or a[m].answer != b[m].answer]
    lines = ["# Every method ticked at once on the demo question, through the page's controller: "
             "in turn and through the batch", "",
             f"`python -m benchmarks.bench_nine_methods --threads {args.threads} --rounds {args.rounds}"
             f"{' --samples-in-batch' if args.samples_in_batch else ''}` on "
             f"{cpu_name()}, {torch.get_num_threads()} torch thread(s); load average {load0:.1f} at start, "
             f"{os.getloadavg()[0]:.1f} at the end. Methods: {', '.join(methods)}. Question: {QUESTION}", "",
             "| how | wall s | CPU s | x in turn (wall) |", "|---|---:|---:|---:|"]
    base = statistics.median(w for w, _, _ in found[cases[0][0]])
    for label, _ in cases:
        wall = statistics.median(w for w, _, _ in found[label])
        cpu = statistics.median(c for _, c, _ in found[label])
        lines.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {wall / base:.2f} |")
    best = min(statistics.median(w for w, _, _ in found[label]) for label, _ in cases)
    lines += ["", "Per method, generated tokens and answer the same both ways: "
              + ("yes, every method" if not differing else "NO for " + ", ".join(differing)) + ".",
              f"Target at most {TARGET_S:.0f} s for the nine on 2 quiet cores: "
              f"{'met' if best <= TARGET_S and len(methods) == len(NINE) else 'not met (or not all nine)'} "
              f"here ({best:.1f} s at the load above)."]
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    print(text)
    return 0 if not differing else 1


if __name__ == "__main__":
    raise SystemExit(main())
