"""How fast SEAKR could be on this CPU with its trace unchanged: the time its forward passes alone take, against DRAGIN.

SEAKR's trace fixes its model work: k = 20 sampled continuations plus the greedy row per context,
each to its own stop, with the end state of every sample. This script runs DRAGIN, SEAKR, DRAGIN
on the demo question with default settings in one process, the prefix cache on as in the app, and
times every call of the model's forward (module hooks: the pass itself, whatever its rows). It
reports for each run its wall and CPU seconds, its passes, the seconds inside the model's forward
and the seconds outside it (sampling, signals, U, spaCy, retrieval, tokenisation, Python).

The floor: if everything outside SEAKR's forward passes cost nothing, SEAKR would still take its
forward seconds, so ``SEAKR forward seconds / DRAGIN wall seconds`` is a lower bound on the ratio
any change that keeps the trace can reach (DRAGIN keeps its own overhead, which favours SEAKR).
It also counts the sampled row-steps whose whole token history another row of the same pass had
already fed (rows that would need no pass of their own if identical histories were computed
once), and gives the floor with that share of the forward seconds removed too (an overestimate
of that saving: a pass's cost grows less than its rows).

A second floor holds whatever the batching: the model's best rate on this CPU, tokens per second
through one pass over a long prompt (hundreds of tokens at once, the most efficient shape there
is), read once per round beside the runs. SEAKR's sampled tokens cannot go through the model
faster than that, so ``generated tokens / best rate / DRAGIN wall`` bounds the ratio too, however
the rows of its contexts were batched or merged.

    python -m benchmarks.bench_seakr_floor [--threads 2] [--out benchmarks/results/seakr_floor.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_demo_speed import QUESTION, TARGET  # noqa: E402  (it sets the offline environment)
from benchmarks.common import cpu_name, publish  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "seakr_floor.md"
NINE_TARGET = 120.0


class ForwardClock:
    """Seconds inside the model's forward and the rows of each pass, from module hooks on the model."""

    def __init__(self, model: Any) -> None:
        self.seconds = 0.0
        self.rows: list[int] = []
        self._start = 0.0
        self._handles = [model.register_forward_pre_hook(self._before, with_kwargs=True),
                         model.register_forward_hook(self._after, with_kwargs=True)]

    def _before(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.rows.append(int(ids.shape[0]) if ids is not None else 0)
        self._start = time.perf_counter()

    def _after(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        self.seconds += time.perf_counter() - self._start

    def reset(self) -> None:
        self.seconds, self.rows = 0.0, []


class RepeatedHistories:
    """Counts, over every sampling loop, the row-steps fed and those whose whole fed history another row had."""

    def __init__(self) -> None:
        from explorer.engine import sampling

        self.fed = 0
        self.unique = 0
        #: (purpose, forward passes) of every sampling call, in order.
        self.calls: list[tuple[str, int]] = []
        original = sampling._Loop.result
        counter = self

        def result(loop: Any, *args: Any, **kwargs: Any) -> Any:
            seen: set[tuple[int, ...]] = set()
            for r in loop.rows:
                # What the row fed: its sampled tokens, then (once stopped) its kept ones and the end token.
                fed = ([*r.ids[:r.kept], loop.end_token] if r.pending is not None else r.ids)[:r.fed]
                counter.fed += r.fed
                seen.update(tuple(fed[:n]) for n in range(1, len(fed) + 1))
            counter.unique += len(seen)
            counter.calls.append((loop.purpose, loop.forward_passes))
            return original(loop, *args, **kwargs)

        sampling._Loop.result = result  # type: ignore[method-assign]

    def merged_passes(self) -> int:
        """Passes if the calls that do not wait for each other (a retrieval's re-rank contexts, the two answer
        contexts) each ran as one loop: the longest call of each such group."""
        groups: list[list[int]] = []
        previous = ""
        for purpose, passes in self.calls:
            kind = "answer" if purpose.startswith("answer") else purpose
            if kind in ("rerank", "answer") and kind == previous:
                groups[-1].append(passes)
            else:
                groups.append([passes])
            previous = kind
        return sum(max(g) for g in groups)

    @property
    def repeated_share(self) -> float:
        return 1.0 - self.unique / self.fed if self.fed else 0.0


def best_rate(engine: Any, tokens: int = 512, repeats: int = 3) -> float:
    """Tokens per second of one forward pass over a ``tokens``-long prompt (the best of ``repeats``)."""
    import torch

    ids = torch.randint(100, min(20_000, engine.model.config.vocab_size), (1, tokens))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            engine.model(input_ids=ids, use_cache=False, logits_to_keep=1)
            best = min(best, time.perf_counter() - start)
    return tokens / best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from explorer.engine.prefix_cache import PrefixCache
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime

    runtime = open_runtime("embedded", "demo")
    engine = runtime.engine
    engine.prefix_cache = PrefixCache()
    run_question("wo", QUESTION, runtime, config={"max_length": 8})  # warm-up: first passes, spaCy, the index
    clock = ForwardClock(engine.model)
    histories = RepeatedHistories()

    found: list[tuple[str, float, float, float, list[int], Any]] = []
    load0 = os.getloadavg()[0]
    rates = [best_rate(engine)]
    seakr_calls_seen: list[tuple[str, int]] = []
    merged_seen = 0
    for label, method in (("DRAGIN (first)", "dragin"), ("SEAKR", "seakr"), ("DRAGIN (second)", "dragin")):
        clock.reset()
        histories.calls = []
        wall, cpu = time.perf_counter(), time.process_time()
        trace = run_question(method, QUESTION, runtime)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        found.append((label, wall, cpu, clock.seconds, list(clock.rows), trace))
        if method == "seakr":
            seakr_calls_seen, merged_seen = list(histories.calls), histories.merged_passes()
        print(f"{label}: wall {wall:.1f} s, cpu {cpu:.1f} s, forward {clock.seconds:.1f} s, "
              f"{len(clock.rows)} passes", flush=True)
        rates.append(best_rate(engine))

    dragin_wall = statistics.mean(w for label, w, *_ in found if label.startswith("DRAGIN"))
    seakr = next(f for f in found if f[0] == "SEAKR")
    floor = seakr[3] / dragin_wall
    floor_once = seakr[3] * (1.0 - histories.repeated_share) / dragin_wall
    rate = max(rates)
    floor_rate = seakr[5].costs.generated_tokens / rate / dragin_wall
    lines = ["# SEAKR's floor on this CPU: its forward passes alone against DRAGIN", "",
             f"`python -m benchmarks.bench_seakr_floor --threads {args.threads}` on {cpu_name()}, "
             f"{torch.get_num_threads()} torch thread(s); load average {load0:.1f} at start, "
             f"{os.getloadavg()[0]:.1f} at the end. Question: {QUESTION}", "",
             "| run | wall s | CPU s | forward passes | rows per pass (mean / max) | s inside the forward | "
             "s outside it | generated tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, wall, cpu, forward, rows, trace in found:
        lines.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {len(rows)} | "
                     f"{statistics.mean(rows) if rows else 0:.1f} / {max(rows, default=0)} | {forward:.1f} | "
                     f"{wall - forward:.1f} | {trace.costs.generated_tokens:,} |")
    lines += ["",
              f"SEAKR's wall time is {seakr[1] / dragin_wall:.2f}x DRAGIN's (mean of the two DRAGIN runs, "
              f"{dragin_wall:.1f} s); its forward passes alone take {floor:.2f}x DRAGIN's whole run.",
              f"Sampled row-steps whose whole history another row had already fed: {histories.repeated_share:.1%} "
              f"of {histories.fed:,}; with that share of the forward seconds removed as well, "
              f"{floor_once:.2f}x.",
              f"The model's best rate here (one pass over 512 prompt tokens, best of {3 * len(rates)}): "
              f"{rate:,.0f} tokens/s; SEAKR's {seakr[5].costs.generated_tokens:,} generated tokens at that rate take "
              f"{seakr[5].costs.generated_tokens / rate:.1f} s, {floor_rate:.2f}x DRAGIN's whole run, however "
              f"they were batched.",
              f"Target SEAKR at most {TARGET:.0f}x DRAGIN: {'met' if seakr[1] / dragin_wall <= TARGET else 'not met'} "
              f"({seakr[1] / dragin_wall:.2f}x). Keeping the trace, its forward passes as they are batched now leave "
              f"at least {floor_once:.2f}x; only passes carrying many more rows at once (towards the best rate's "
              f"{floor_rate:.2f}x) could go below {TARGET:.0f}x.",
              f"The nine methods in at most {NINE_TARGET:.0f} s: SEAKR's forward passes alone take {seakr[3]:.1f} s "
              f"({seakr[3] * (1.0 - histories.repeated_share):.1f} s with repeated histories computed once)."]
    lines += ["", "SEAKR's sampling calls (context, forward passes): "
              + ", ".join(f"{purpose} {passes}" for purpose, passes in seakr_calls_seen) + ".",
              f"Passes if each retrieval's re-rank contexts and the two answer contexts ran as one loop: "
              f"{merged_seen} (now {sum(p for _, p in seakr_calls_seen)})."]
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
