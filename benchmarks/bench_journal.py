"""What storing a run while it runs costs: the same runs without a journal, with the default one
(a checkpoint at most every second) and with a checkpoint at every token and event (the worst case).

Side by side in one process, interleaved question by question, so the machine's load hits every
mode alike; the ratios are what count.

    python -m benchmarks.bench_journal [--repeats 2] [--out benchmarks/results/journal.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result

QUESTIONS = ["Who is the spouse of the Green performer?",
             "What is the seating capacity of the arena where the Lewiston Maineiacs played their home games?",
             "Who lived longer, Alejandro Jodorowsky or Philip Saville?"]
CONFIG = {"max_length": 64, "fewshot": 2, "threshold": 0.3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/journal.md")
    args = parser.parse_args(argv)

    from explorer.journal import RunJournal
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime
    from explorer.store import RunStore

    runtime = open_runtime("embedded", "demo")
    times: dict[str, list[float]] = {"no journal": [], "journal (default, 1 s)": [], "journal (every event)": []}
    checkpoints: dict[str, list[int]] = {k: [] for k in times}
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "bench.sqlite")
        run_question("dragin", QUESTIONS[0], runtime, config=CONFIG)  # warm-up
        for _ in range(args.repeats):
            for question in QUESTIONS:
                for mode in times:
                    journal = None if mode == "no journal" else RunJournal(store, every=0.0 if "every" in mode else 1.0)
                    started = time.perf_counter()
                    trace = run_question("dragin", question, runtime, config=CONFIG, journal=journal)
                    if journal is None:
                        store.save(trace)  # what the app did before: one write at the end
                    times[mode].append(time.perf_counter() - started)
                    checkpoints[mode].append(journal.checkpoints if journal else 0)
        size = (Path(tmp) / "bench.sqlite").stat().st_size
    base = statistics.median(times["no journal"])
    rows = [f"| {mode} | {statistics.median(v):.3f} | {statistics.median(v) / base:.3f} | "
            f"{statistics.mean(checkpoints[mode]):.1f} |" for mode, v in times.items()]
    text = "\n".join([
        "# Runs stored while they run: the journal's cost",
        "",
        f"DRAGIN (paper) on the embedded model, demo corpus, {CONFIG}; {len(QUESTIONS)} questions x "
        f"{args.repeats} repeats per mode, interleaved; each run stored (without a journal: once, at the end).",
        f"CPU: {cpu_name()}; load average at the end: {os.getloadavg()[0]:.2f}; database after all runs: "
        f"{size / 1e6:.1f} MB.",
        "",
        "| mode | median seconds per run | ratio to no journal | checkpoints per run |",
        "|---|---|---|---|",
        *rows,
        "",
    ])
    print(text)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
