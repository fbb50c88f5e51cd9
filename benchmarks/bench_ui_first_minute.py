"""A visitor's first minute, timed in the browser: page load to a complete recorded view, a recorded
run opened from its link, Run to the first token on the page as it opens, and a link to a stored run.

Run: ``.venv/bin/python -m benchmarks.bench_ui_first_minute [--repeats 3] [--setups shipped]
[--screenshot docs/screenshots/first-view.png] [--out benchmarks/results/ui_first_minute.md]``.

The app is started as users start it (``python app.py``, embedded model, demo corpus, a fresh
database) and driven by Debian's chromium through Playwright; every clock is in the page
(``performance.now()``). It is started twice, side by side in one run: as shipped, and with
``--no-prefix-cache`` (every prompt encoded whole, as before the prefix cache), so the first-token
figures compare the two on the same machine and load.

* page load → complete recorded view: from the navigation's start to the DRAGIN case study's
  recorded run in the DOM with every chart drawn (the page opens on it; no model is involved).
* recorded run opened: from a click on another case-study link (SEAKR's case) to its
  complete view.
* Run → first token: pressing Run on the page as it opened (DRAGIN on its case study, nothing
  touched), and on another question typed in (the SEAKR case study's), to the first generated
  token in the DOM; and to the complete view.
* link to a stored run: a fresh page at ``?run=ID`` (the run Run just stored), from the navigation's
  start to that run's complete view (its charts drawn).

Pages are 1280x720, the first screen the layout is made for; ``--screenshot`` saves that screen.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_ui import OBSERVE, machine
from benchmarks.common import write_result
from tests.browser_support import browser_context, start_app, wait_ready

RESULTS = Path(__file__).resolve().parent / "results" / "ui_first_minute.md"
OTHER_QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
SETUPS = {"as shipped (prefix cache)": (), "--no-prefix-cache": ("--no-prefix-cache",)}

FIRST_VIEW = """
() => new Promise((resolve) => {
  const check = () => {
    const run = document.querySelector('#run-view .dre-run[data-view=done]');
    const plots = document.querySelectorAll('#run-view .dre-plot');
    return run && plots.length && !document.querySelector('#run-view .dre-plot:not([data-done])');
  };
  const tick = () => check() ? resolve(performance.now()) : requestAnimationFrame(tick);
  tick();
})
"""

OPEN_RECORDED = """
([key, runId]) => new Promise((resolve) => {
  const t0 = performance.now();
  const check = () => document.querySelector(`#run-view .dre-run[data-run="${runId}"][data-view=done]`) &&
    !document.querySelector('#run-view .dre-plot:not([data-done])');
  const tick = () => check() ? resolve(performance.now() - t0) : requestAnimationFrame(tick);
  document.querySelector(`#gallery a[data-case="${key}"]`).click();
  tick();
})
"""

LINK_VIEW = """
(runId) => new Promise((resolve) => {
  const check = () => document.querySelector(`#run-view .dre-run[data-run="${runId}"][data-view=done]`) &&
    !document.querySelector('#run-view .dre-plot:not([data-done])');
  const tick = () => check() ? resolve(performance.now()) : requestAnimationFrame(tick);
  tick();
})
"""
SCREEN = {"width": 1280, "height": 720}


def measure(setup: tuple[str, ...], repeats: int, work: Path, name: str, screenshot: Path | None = None) -> list[dict]:
    from explorer.ui.runs import gallery

    shelf = gallery.load()
    seakr = next(item for item in shelf.items if item.method == "seakr")
    rows: list[dict] = []
    app = start_app(work, name=name, extra_args=setup)
    try:
        with browser_context() as context:
            for rep in range(repeats):
                page = context.new_page()
                page.set_viewport_size(SCREEN)
                page.goto(app.url, wait_until="commit")
                first_view = page.evaluate(FIRST_VIEW) / 1000
                wait_ready(page)
                if screenshot is not None and rep == 0:
                    page.wait_for_timeout(500)
                    page.screenshot(path=str(screenshot))  # the first screen, as a visitor first sees it
                opened = page.evaluate(OPEN_RECORDED, [seakr.key, seakr.run_id]) / 1000
                page.close()
                page = context.new_page()  # the page exactly as a visitor gets it, untouched
                page.set_viewport_size(SCREEN)
                page.goto(app.url)
                page.wait_for_selector("#run-view .dre-run")
                untouched = page.evaluate(OBSERVE, [1])
                stored = page.locator("#run-view .dre-run").first.get_attribute("data-run")
                page.locator("#question textarea").fill(OTHER_QUESTION)
                page.wait_for_timeout(300)
                other = page.evaluate(OBSERVE, [1])
                page.close()
                page = context.new_page()  # a link to the run just stored, in a fresh page
                page.set_viewport_size(SCREEN)
                page.goto(f"{app.url}?run={stored}", wait_until="commit")
                link = page.evaluate(LINK_VIEW, stored) / 1000
                page.close()
                rows.append({"rep": rep, "first_view": first_view, "opened": opened,
                             "first": untouched["first"] / 1000, "complete": untouched["complete"] / 1000,
                             "other_first": other["first"] / 1000, "other_complete": other["complete"] / 1000,
                             "link": link, "load": os.getloadavg()[0]})
                print(f"  {name} #{rep + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in rows[-1].items()
                                                          if k != "rep"), flush=True)
                time.sleep(1)
    finally:
        app.stop()
    return rows


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def table(results: dict[str, list[dict]]) -> str:
    out = ["| app | repeats | page load → complete recorded view (s) | recorded run opened (s) | "
           "Run → first token, page untouched (s) | Run → first token, another question (s) | "
           "Run → complete view, untouched (s) | link to a stored run → complete view (s) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in results.items():
        out.append(f"| {name} | {len(rows)} | {med(rows, 'first_view'):.2f} | {med(rows, 'opened'):.2f} | "
                   f"{med(rows, 'first'):.2f} | {med(rows, 'other_first'):.2f} | {med(rows, 'complete'):.2f} | "
                   f"{med(rows, 'link'):.2f} |")
    base, new = results.get("--no-prefix-cache"), results.get("as shipped (prefix cache)")
    if base and new:
        out += ["", f"First token, page untouched: {med(new, 'first'):.2f} s against {med(base, 'first'):.2f} s "
                    f"(ratio {med(new, 'first') / med(base, 'first'):.2f}); another question: "
                    f"{med(new, 'other_first'):.2f} s against {med(base, 'other_first'):.2f} s "
                    f"(ratio {med(new, 'other_first') / med(base, 'other_first'):.2f})."]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--screenshot", type=Path, default=None, metavar="PNG",
                        help="also save the first screen (as shipped), e.g. docs/screenshots/first-view.png")
    parser.add_argument("--setups", choices=("both", "shipped"), default="both",
                        help="both apps side by side (default), or the app as shipped only")
    parser.add_argument("--out", default=str(RESULTS), help=f"results file (default {RESULTS}; - for none)")
    args = parser.parse_args()
    print(f"{machine()}\n", flush=True)
    results: dict[str, list[dict]] = {}
    loads = [os.getloadavg()[0]]
    setups = SETUPS if args.setups == "both" else dict(list(SETUPS.items())[:1])
    with tempfile.TemporaryDirectory(prefix="bench-first-") as work:
        for index, (name, setup) in enumerate(setups.items()):
            results[name] = measure(setup, args.repeats, Path(work), f"first-{index}",
                                    args.screenshot if index == 0 else None)
            loads += [r["load"] for r in results[name]]
    load = f"load average {min(loads):.1f}–{max(loads):.1f} during the runs"
    text = "\n".join([
        "# Web app: a visitor's first minute", "",
        f"Machine: {machine()}; {load}.", "",
        "Embedded SmolLM2-135M-Instruct on CPU, demo corpus, fresh database. Clocks in the page. The page opens "
        "on the DRAGIN case study with DRAGIN ticked and its recorded run shown; Run is pressed on that page "
        "untouched (DRAGIN's defaults, max_length 100), then on another question typed in (the SEAKR case "
        "study's), and a fresh page opens the link to the run just stored. Pages are 1280x720. Medians over "
        "the repeats; the apps run one after the other in the same run.", "",
        table(results), "",
        "The recorded views involve no model: the page carries the DRAGIN run's view; a click on another case link "
        "renders that run's shipped trace on the server. The first token after Run is the prompt's encoding "
        "plus one step: with the prefix cache only the part of the prompt after the instruction and exemplars "
        "(or, for the question the app warmed up with, the last token) is encoded.", "",
    ])
    print("\n" + table(results) + f"\n\n({load})")
    write_result(text, args.out)


if __name__ == "__main__":
    main()
