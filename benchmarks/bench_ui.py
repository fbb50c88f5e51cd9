"""How fast the web app shows a run: from pressing Run to the first token, and to the complete view.

Run: ``.venv/bin/python -m benchmarks.bench_ui [--repeats 2] [--max-length N]``.

The app is started as users start it (``python app.py``, embedded model, demo corpus, a fresh
database) and driven by Debian's chromium through Playwright. Timing happens in the page: a
MutationObserver notes when the first generated token is in the DOM and when the finished view
(every run done, every chart drawn) is; the clock starts when Run is pressed. Two scenarios
alternate so background load hits both alike: DRAGIN alone on the DRAGIN case study, and a
4-method comparison (wo, SR, FLARE, DRAGIN) on the same question, with each method's default
settings (DRAGIN's threshold from the model's preset). The model's own time (the traces'
``costs.total_time``) is reported beside, so the share the page adds is visible. The app runs
with OMP_NUM_THREADS=1 unless the environment says otherwise (see tests/browser_support.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import cpu_name, write_result
from explorer.store import RunStore
from tests.browser_support import browser_context, open_settings, pick_question, set_methods, start_app, wait_ready

RESULTS = Path(__file__).resolve().parent / "results" / "ui.md"
QUESTION = "seating capacity"  # the DRAGIN case study among the demo questions
SCENARIOS = {"DRAGIN": ["dragin"], "4 methods (wo, SR, FLARE, DRAGIN)": ["wo", "sr", "flare", "dragin"]}

OBSERVE = """
([count]) => new Promise((resolve) => {
  const view = document.querySelector('#run-view');
  view.querySelector('.dre-root')?.setAttribute('data-stale', '1');
  const marks = {};
  const t0 = performance.now();
  const check = () => {
    const root = view.querySelector('.dre-root');
    if (!root || root.dataset.stale) return false;
    if (marks.first === undefined && root.querySelector('.dre-tokens .tok')) marks.first = performance.now() - t0;
    const done = root.dataset.busy === '0' && root.querySelectorAll('.dre-run[data-view=done]').length >= count;
    const drawn = !root.querySelector('.dre-plot:not([data-done])') && root.querySelector('.dre-plot .main-svg');
    if (done && drawn) { marks.complete = performance.now() - t0; return true; }
    return false;
  };
  const observer = new MutationObserver(() => { if (check()) { observer.disconnect(); resolve(marks); } });
  observer.observe(view, {subtree: true, childList: true, attributes: true});
  document.querySelector('#run').click();
})
"""


def machine() -> str:
    cpu = cpu_name()
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, OMP_NUM_THREADS={threads} for the "
            "app, chromium (Debian) headless")


def measure(repeats: int, max_length: int | None) -> tuple[list[dict], str]:
    rows: list[dict] = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as work:
        app = start_app(Path(work), name="bench")
        try:
            with browser_context() as context:
                page = context.new_page()
                page.goto(app.url)
                page.wait_for_selector("#question-pick")
                wait_ready(page)
                pick_question(page, QUESTION)
                if max_length:
                    for method in ("wo", "sr", "flare", "dragin"):
                        open_settings(page, method)
                        page.locator(f"#param-{method}-max_length input").fill(str(max_length))
                for rep in range(repeats):
                    for name, methods in SCENARIOS.items():
                        set_methods(page, methods)
                        before = {r["run_id"] for r in RunStore(app.db).list(limit=10_000)}
                        marks = page.evaluate(OBSERVE, [len(methods)])
                        new = [r for r in RunStore(app.db).list(limit=10_000) if r["run_id"] not in before]
                        model = sum(r["wall_time"] or 0.0 for r in new)
                        rows.append({"scenario": name, "repeat": rep, "first": marks["first"] / 1000,
                                     "complete": marks["complete"] / 1000, "model": model,
                                     "tokens": sum(r["generated_tokens"] or 0 for r in new), "runs": len(new)})
                        loads.append(os.getloadavg()[0])
                        print(f"  {name} #{rep + 1}: first token {rows[-1]['first']:.2f} s, complete "
                              f"{rows[-1]['complete']:.2f} s, model {model:.2f} s", flush=True)
                        time.sleep(1)
        finally:
            app.stop()
    return rows, f"load average {min(loads):.1f}–{max(loads):.1f} during the runs"


def table(rows: list[dict]) -> str:
    out = ["| scenario | repeats | first token visible (s) | complete view (s) | model time (s) | "
           "view overhead (s) | overhead share | tokens generated |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == name]
        first = statistics.median(r["first"] for r in mine)
        complete = statistics.median(r["complete"] for r in mine)
        model = statistics.median(r["model"] for r in mine)
        over = complete - model
        out.append(f"| {name} | {len(mine)} | {first:.2f} | {complete:.2f} | {model:.2f} | {over:.2f} | "
                   f"{over / complete:.0%} | {int(statistics.median(r['tokens'] for r in mine))} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=None, help="override every method's max_length")
    args = parser.parse_args()
    print(f"{machine()}\n", flush=True)
    rows, load = measure(args.repeats, args.max_length)
    settings = f"max_length={args.max_length}" if args.max_length else "each method's defaults (max_length 100)"
    text = "\n".join([
        "# Web app: time to first token and to the complete view", "",
        f"Machine: {machine()}; {load}.", "",
        f"Embedded SmolLM2-135M-Instruct on CPU, demo corpus, the DRAGIN case-study question, {settings}. "
        "Clock in the page: from pressing Run to the first generated token in the DOM, and to the finished view "
        "(all runs done, every chart drawn). Medians over the repeats, scenarios alternating.", "",
        table(rows), "",
        "Model time is the traces' own `costs.total_time` (generation, retrieval and the rest of the run); the "
        "view overhead is what remains: queueing, streaming updates, storing, rendering and drawing the charts. "
        "A 4-method comparison runs the methods one after another, so its first token is the first method's.", "",
        "Absolute times move with the machine and its load (given above); the overhead share is the figure to "
        "compare across machines.", "",
    ])
    print("\n" + table(rows) + f"\n\n({load})")
    write_result(text, RESULTS)


if __name__ == "__main__":
    main()
