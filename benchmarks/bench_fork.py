"""Time to fork against a full rerun, on the embedded model.

Run: ``.venv/bin/python -m benchmarks.bench_fork [--repeats 3]``.

For each question, DRAGIN (paper, the model's preset θ) runs once as the parent. Fork points are
chosen in its last draft span (late: the most to replay) and in its first (early). For each point,
side by side and alternating:

* fork → first new token: from calling ``fork_run`` (what the UI's menu and ``/fork`` do) with a
  forced retrieval at the point to the first token the fork streams (the first token it generates
  live, after the replayed prefix, the QFS pass, the search and the new prompt's pass);
* full rerun → the same point: from calling ``run_question`` with the same settings to the moment
  the rerun streams that token of that span (where the fork diverges).

The target: the fork's first new token in under half the rerun's time to the same point.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import cpu_name, write_result

QUESTIONS = (
    "Which city is the birthplace of the director of the film Jaws?",
    "Who was born first, Philip Saville or Denis Villeneuve?",
    "What is the capital of the country where Tocopilla is?",
)


class Clock:
    """A listener timing the first streamed token, and the moment token ``token`` of the ``span``-th span streams."""

    def __init__(self, span_ordinal: int | None = None, token: int = 0) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.at_point: float | None = None
        self.span_ordinal, self.token = span_ordinal, token
        self.spans_done, self.tokens_in_span = 0, 0

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        now = time.perf_counter() - self.start
        if kind == "token":
            if self.first is None:
                self.first = now
            if self.spans_done == self.span_ordinal and self.tokens_in_span == self.token and self.at_point is None:
                self.at_point = now
            self.tokens_in_span += 1
        elif kind == "event" and data.get("kind") == "generation":
            self.spans_done += 1
            self.tokens_in_span = 0


def timed(fn: Callable[[Clock], Any], clock: Clock) -> tuple[Any, Clock, float]:
    clock.start = time.perf_counter()
    result = fn(clock)
    return result, clock, time.perf_counter() - clock.start


def main() -> None:
    from explorer.forks import ForkChange, ForkPlan, ForkPoint, fork_run
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--out", default="benchmarks/results/fork.md")
    parser.add_argument("--no-prefix-cache", action="store_true", help="encode every prompt whole (the app "
                                                                       "keeps a prefix cache, as here by default)")
    args = parser.parse_args()
    runtime = open_runtime("embedded", "demo")
    if not args.no_prefix_cache:
        from explorer.engine.prefix_cache import PrefixCache

        runtime.engine.prefix_cache = PrefixCache()
    with open("/proc/loadavg") as f:
        load_start = f.read().split()[0]
    rows = []
    for question in QUESTIONS[:args.questions]:
        parent = run_question("dragin", question, runtime, raise_errors=True)
        drafts = [e for e in parent.events if e.kind == "generation" and e.payload["purpose"] == "draft"]
        gens = [e.id for e in parent.events if e.kind == "generation"]
        checked = {e.payload["span"]: e.payload["fired"] for e in parent.events if e.kind == "check"}
        for label, span in (("late", drafts[-1]), ("early", drafts[0])):
            n = len(span.payload["tokens"])
            fired = checked.get(span.id)
            token = max(1, min(n - 1, (fired if fired is not None else n) // 2))
            if fired == token:
                token = max(1, token - 1)
            plan = ForkPlan(parent.run_id, ForkPoint(span=span.id, token=token), ForkChange("force_retrieval"))
            fork_firsts, rerun_points, fork_totals, rerun_totals, replayed = [], [], [], [], 0
            for _ in range(args.repeats):
                child, clock, total = timed(lambda c: fork_run(parent, plan, runtime, listeners=[c],  # noqa: B023
                                                               raise_errors=True), Clock())
                fork_firsts.append(clock.first)
                fork_totals.append(total)
                replayed = child.costs.replayed_tokens
                rerun, clock, total = timed(lambda c: run_question("dragin", question, runtime,  # noqa: B023
                                                                   listeners=[c], raise_errors=True),
                                            Clock(gens.index(span.id), token))
                assert [e.kind for e in rerun.events] == [e.kind for e in parent.events]
                rerun_points.append(clock.at_point)
                rerun_totals.append(total)
            rows.append({"question": question, "point": f"{label}: span {span.id}, token {token}",
                         "fork_first": statistics.median(fork_firsts), "rerun_point": statistics.median(rerun_points),
                         "fork_total": statistics.median(fork_totals), "rerun_total": statistics.median(rerun_totals),
                         "replayed": replayed})
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]
    lines = [f"Machine: {cpu_name()}; load average {load_start} at start, {load_end} at end; embedded SmolLM2-135M "
             f"(float32, CPU), demo corpus, DRAGIN paper variant at the model's preset θ; prefix cache "
             f"{'off' if args.no_prefix_cache else 'on (as in the app)'}; median of {args.repeats} alternating "
             "repeats.", "",
             "| question | fork point | fork → first new token (s) | rerun → same point (s) | ratio | fork total (s) | "
             "rerun total (s) | tokens replayed |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['question']} | {r['point']} | {r['fork_first']:.3f} | {r['rerun_point']:.3f} | "
                     f"**{r['fork_first'] / r['rerun_point']:.2f}** | {r['fork_total']:.2f} | {r['rerun_total']:.2f} | "
                     f"{r['replayed']} |")
    worst = max(r["fork_first"] / r["rerun_point"] for r in rows)
    lines += ["", f"Worst ratio of the fork's first new token to the rerun's time to the same point: **{worst:.2f}** "
                  "(target below 0.5)."]
    report = "\n".join(lines)
    print(report)
    write_result(report + "\n", args.out)


if __name__ == "__main__":
    main()
