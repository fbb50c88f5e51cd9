"""A class following the projector: how long each of N follower pages takes to show the presenter's step.

Run: ``.venv/bin/python -m benchmarks.bench_follow [--followers 30] [--steps 4] [--auth]
[--streams M] [--out benchmarks/results/follow.md]``.

The app is started as users start it (``python app.py``, the tiny random-weight model: no run is
made, the presenter steps through the DRAGIN case study's recorded run; ``--auth`` puts it behind one
login that every page signs in with). One Debian chromium holds the presenter's page (1280x720) and
N follower contexts (each its own cookies, as N students' own browsers; 390x844 phones), each opened
at the presenter's follow link. Then the presenter steps forward and back through the decisions by
key presses. Every clock is the machine's wall clock read inside the pages (``Date.now()``, the same
clock for every page of one browser): a step's latency for a follower is the time from the
presenter's key press (its keydown) to the moment the follower's bar shows that decision (a mutation
observer on its ``data-index``). Joining: every follower opens the link at once (and signs in), as a class
does; each is timed from the first navigation to its page showing the presenter's decision (read one
page after another, so an upper bound).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.bench_ui import machine
from benchmarks.common import write_result
from tests.browser_support import chromium_browser, sign_in, start_app

RESULTS = Path(__file__).resolve().parent / "results" / "follow.md"
USER, PASSWORD = "teacher", "bench-lesson"
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}

#: In a follower: every decision its bar shows, with the wall clock.
WATCH = """() => {
  window.__shown = [];
  const bar = document.getElementById('dre-presenter');
  new MutationObserver(() => window.__shown.push([bar.getAttribute('data-index'), Date.now()]))
    .observe(bar, {attributes: true, attributeFilter: ['data-index']});
}"""
#: In the presenter: every key press, with the wall clock, before the page acts on it.
KEYS = """() => { window.__keys = [];
  document.addEventListener('keydown', () => window.__keys.push(Date.now()), true); }"""


def stream_follower(url: str, cookie: str, seen: list[tuple[int, float]]) -> None:
    """A follower without a page: the lesson's event stream read over HTTP, each position's arrival timed."""
    import json

    import httpx

    try:
        with httpx.stream("GET", url, headers={"Cookie": cookie}, timeout=None) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    seen.append((int(json.loads(line[6:]).get("step", -1)), time.time()))
    except httpx.HTTPError:  # the app stopped at the end of the measurement
        return


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(followers: int, steps: int, auth: bool, streams: int = 0) -> tuple[dict, str]:
    loads = [os.getloadavg()[0]]
    # loaded at start (a page's model-status line polls until the model is ready)
    extra = ("--model", "random:tiny") + (("--auth", f"{USER}:{PASSWORD}") if auth else ())
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as work:
        app = start_app(Path(work), name="bench-follow", extra_args=extra, timeout=240)
        try:
            with chromium_browser() as browser:
                def open_page(path: str, **options):
                    page = browser.new_context(**options).new_page()
                    if auth:
                        sign_in(page, app.url + path, USER, PASSWORD)
                    else:
                        page.goto(app.url + path, timeout=180_000)
                        page.wait_for_selector("#question", timeout=180_000)
                    return page

                presenter = open_page("?case=dragin", viewport={"width": 1280, "height": 720})
                presenter.wait_for_function("() => !document.querySelector('#run-view .dre-plot:not([data-done])')"
                                            " && document.querySelector('#run-view .dre-run')", timeout=120_000)
                presenter.locator("#present-toggle").click()
                presenter.wait_for_selector("#dre-lesson .dre-ls-code", timeout=60_000)
                code = presenter.locator("#dre-lesson .dre-ls-code").inner_text()
                total = presenter.locator("#run-view li.dre-decision").count()
                # every follower starts at once, as a class opening the link together
                started = time.monotonic()
                pages = []
                for _ in range(followers):
                    page = browser.new_context(**PHONE).new_page()
                    page.goto(app.url + f"?follow={code}", wait_until="commit", timeout=180_000)
                    pages.append(page)
                if auth:
                    for page in pages:
                        page.wait_for_selector("input[type=password]", timeout=180_000)
                        page.locator("input[type=text]").first.fill(USER)
                        page.locator("input[type=password]").fill(PASSWORD)
                        page.keyboard.press("Enter")
                print(f"{followers} followers opened the link", file=sys.stderr, flush=True)
                joins: list[float] = []
                for page in pages:
                    page.wait_for_function("() => document.querySelector('#dre-presenter')?.dataset.index === '0'",
                                           timeout=300_000)
                    joins.append(time.monotonic() - started)
                    print(f"follower {len(joins)} shows the step after {joins[-1]:.1f} s", file=sys.stderr, flush=True)
                    page.evaluate(WATCH)
                    loads.append(os.getloadavg()[0])
                cookie = "; ".join(f"{c['name']}={c['value']}" for c in presenter.context.cookies())
                streamed: list[list[tuple[int, float]]] = [[] for _ in range(streams)]
                for seen in streamed:
                    threading.Thread(target=stream_follower, args=(f"{app.url}lesson/{code}/events", cookie, seen),
                                     daemon=True).start()
                while sum(1 for seen in streamed if seen) < streams:
                    time.sleep(0.1)
                presenter.evaluate(KEYS)
                latencies: list[float] = []
                stream_latencies: list[float] = []
                worst_per_step: list[float] = []
                index = 0
                for n in range(steps):
                    key = "ArrowRight" if (n // max(1, total - 1)) % 2 == 0 else "ArrowLeft"
                    index += 1 if key == "ArrowRight" else -1
                    presenter.keyboard.press(key)
                    pressed = presenter.evaluate("() => window.__keys[window.__keys.length - 1]")
                    step = []
                    for page in pages:
                        page.wait_for_function("(i) => window.__shown.some(s => s[0] === String(i))", arg=index,
                                               timeout=30_000)
                        shown = page.evaluate("(i) => window.__shown.filter(s => s[0] === String(i)).pop()[1]",
                                              index)
                        step.append((shown - pressed) / 1000)
                        page.evaluate("() => { window.__shown = []; }")
                    latencies += step
                    for seen in streamed:
                        deadline = time.monotonic() + 30
                        while not any(i == index for i, _ in seen) and time.monotonic() < deadline:
                            time.sleep(0.01)
                        stream_latencies.append(min(t for i, t in seen if i == index) - pressed / 1000)
                        seen.clear()
                    print(f"step {n + 1}: slowest follower {max(step):.3f} s", file=sys.stderr, flush=True)
                    worst_per_step.append(max(step))
                    loads.append(os.getloadavg()[0])
                    time.sleep(0.5)
                followed = presenter.locator("#dre-lesson .dre-ls-count").inner_text()
        finally:
            app.stop()
    figures = {"followers": followers, "steps": steps, "auth": auth, "following": followed,
               "join_median": statistics.median(joins), "join_max": max(joins),
               "median": statistics.median(latencies), "p90": pct(latencies, 0.9), "max": max(latencies),
               "under_1s": sum(1 for v in latencies if v < 1.0), "count": len(latencies),
               "worst_per_step": worst_per_step, "streams": streams,
               "stream_median": statistics.median(stream_latencies) if stream_latencies else None,
               "stream_max": max(stream_latencies) if stream_latencies else None}
    load = f"load average {min(loads):.1f} to {max(loads):.1f}"
    return figures, load


def table(f: dict, load: str) -> str:
    steps = ", ".join(f"{v:.2f}" for v in f["worst_per_step"])
    return (f"| followers | login | key press → follower shows the step: median | p90 | max | under 1 s | "
            f"all join at once (navigation → presenter's step): median | last |\n"
            f"|---:|---|---:|---:|---:|---:|---:|---:|\n"
            f"| {f['followers']} | {'one shared `--auth` login' if f['auth'] else 'none'} | {f['median']:.3f} s | "
            f"{f['p90']:.3f} s | {f['max']:.3f} s | {f['under_1s']} of {f['count']} | {f['join_median']:.1f} s | "
            f"{f['join_max']:.1f} s |\n\n"
            f"{f['steps']} steps; the slowest follower per step: {steps} s. The presenter's panel said "
            f"\"{f['following']}\"."
            + (f" Besides the pages, {f['streams']} followers reading the event stream over HTTP (no page) got each "
               f"step {f['stream_median']:.3f} s after the key press (median; slowest {f['stream_max']:.3f} s)."
               if f["streams"] else "") + f" {machine()}; {load}.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--followers", type=int, default=30)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--streams", type=int, default=0,
                        help="followers that read the event stream over HTTP, without a page, besides the pages")
    parser.add_argument("--auth", action="store_true", help="every page signs in with one shared login")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    figures, load = measure(args.followers, args.steps, args.auth, args.streams)
    text = table(figures, load)
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
