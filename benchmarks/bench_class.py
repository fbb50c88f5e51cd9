"""A class behind one login: N students' sessions each press Run at once, and each gets its own run.

Run: ``.venv/bin/python -m benchmarks.bench_class [--students 30] [--concurrent-runs 4]
[--model random:tiny] [--out benchmarks/results/class.md]``.

The app is started as users start it (``python app.py``) behind one ``--auth`` login, with each
client allowed a single place at a time (``EXPLORER_RUNS_PER_CLIENT=1``): a server that counted the
login as the client would give the class one run and refuse the rest. Each student is a Gradio
client of its own (its own session, signed in with the shared login), as each student's browser is;
all of them call ``/run`` at the same moment with a question of their own. Reported: how many got a
complete run of their own question, the refusals, and the time from the press to each result
(median, 90th percentile, last), which on one model is mostly each run's place in the line.
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
from explorer.store import RunStore
from tests.browser_support import start_app

RESULTS = Path(__file__).resolve().parent / "results" / "class.md"
USER, PASSWORD = "teacher", "bench-class"


def measure(students: int, concurrent: int, model: str) -> dict:
    from gradio_client import Client

    os.environ["EXPLORER_RUNS_PER_CLIENT"] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-class-") as work:
        app = start_app(Path(work), name="bench-class", timeout=300,
                        extra_args=("--auth", f"{USER}:{PASSWORD}", "--model", model,
                                    "--concurrent-runs", str(concurrent)))
        try:
            clients = [Client(app.url, auth=(USER, PASSWORD), verbose=False, httpx_kwargs={"timeout": 900})
                       for _ in range(students)]
            questions = [f"Student {n + 1}: where did the Lewiston Maineiacs play their home games?"
                         for n in range(students)]
            results: dict[int, dict] = {}
            errors: dict[int, str] = {}
            took: dict[int, float] = {}
            start = threading.Barrier(students + 1)

            def press(n: int) -> None:
                start.wait()
                t0 = time.perf_counter()
                try:
                    results[n] = clients[n].predict(questions[n], "wo", "", '{"max_length": 8}', "",
                                                    api_name="/run")
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    errors[n] = str(exc)[:200]
                took[n] = time.perf_counter() - t0

            threads = [threading.Thread(target=press, args=(n,)) for n in range(students)]
            for t in threads:
                t.start()
            load0 = os.getloadavg()[0]
            start.wait()
            for t in threads:
                t.join()
            store = RunStore(app.db, readonly=True)
            stored = {r["question"] for r in store.list(limit=10_000)}
            own = sum(1 for n, r in results.items()
                      if r.get("status") == "complete" and store.get(r["run_id"]).question == questions[n])
        finally:
            app.stop()
    times = sorted(took.values())
    return {"students": students, "concurrent": concurrent, "model": model, "own": own,
            "stored": sum(1 for q in questions if q in stored), "errors": list(errors.values()),
            "median": statistics.median(times), "p90": times[int(0.9 * (len(times) - 1))], "last": times[-1],
            "load": f"load average {load0:.1f} at the press, {os.getloadavg()[0]:.1f} at the end"}


def table(f: dict) -> str:
    refused = f"; refused or failed: {len(f['errors'])} (first: {f['errors'][0]})" if f["errors"] else ""
    return ("| students (one `--auth` login) | runs at once | got their own run | stored | press → result: median "
            "| p90 | last |\n|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {f['students']} | {f['concurrent']} | {f['own']} of {f['students']} | {f['stored']} | "
            f"{f['median']:.1f} s | {f['p90']:.1f} s | {f['last']:.1f} s |\n\n"
            f"Model {f['model']}, method wo, 8 tokens, each client allowed one place at a time{refused}. "
            f"{machine()}; {f['load']}.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--concurrent-runs", type=int, default=4)
    parser.add_argument("--model", default="random:tiny", help="random:tiny (seconds per run) or embedded")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    figures = measure(args.students, args.concurrent_runs, args.model)
    text = table(figures)
    print(text)
    write_result(text, args.out)
    sys.exit(0 if figures["own"] == figures["students"] else 1)


if __name__ == "__main__":
    main()
