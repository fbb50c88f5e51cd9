"""The explorer on a DPR-sized corpus: build, open, search and a DRAGIN run, measured as a user meets them.

    python -m benchmarks.bench_corpus_scale --passages 1000000 --workdir /data/scale
    nice python -m benchmarks.bench_corpus_scale --passages 21015324 --workdir /data/scale --memory-budget 4GB \\
        --out benchmarks/results/corpus_scale_21m.md

Steps, each in a fresh process so that memory and times are the process's own:

1. **generate** ``<workdir>/psgs_w100.tsv`` (or ``psgs_<N>.tsv``) with :mod:`benchmarks.synthetic_dpr`
   (kept between runs: same N and seed, same file);
2. **build**: ``python -m explorer corpus index`` with ``EXPLORER_CACHE=<workdir>/cache``: wall time,
   and the peak resident memory of the whole process tree (sampled from /proc twice a second),
   with the store's and the index's own times and the build's memory ledger from their manifests;
3. **open**: a new process opens the retriever as every command does (``open_retriever(path)``):
   seconds, and resident memory after opening above the process's memory before it;
4. **queries**: the benchmark questions (HotpotQA, MuSiQue, NQ, 2Wiki), k = 10, first pass (cold
   page cache for the posting lists) and second pass: p50 and p95 per query;
5. **DRAGIN**: DRAGIN on the embedded model over the corpus for a few HotpotQA questions; the share
   of the run's wall time spent in retrieval (from the traces' own timers).

Targets (DPR scale, 21M passages, this 2-core 24 GB machine): build under 90 minutes and 12 GB,
open under 5 s and 3 GB, query p50 under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_name, write_result  # noqa: E402

GIB = 1 << 30


def tree_rss(pid: int, field: str = "VmRSS") -> int:
    """Resident bytes of a process and all its descendants (from /proc): ``VmRSS`` (everything mapped and
    resident, file pages included) or ``RssAnon`` (the memory the processes allocated themselves)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        ppid = int(fields.get("PPid", "0").strip() or 0)
        children.setdefault(ppid, []).append(int(entry.name))
        rss[int(entry.name)] = int(fields[field].split()[0]) * 1024 if field in fields else 0
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo.extend(children.get(current, []))
    return total


def run_measured(cmd: list[str], env: dict[str, str], log: Path) -> dict:
    """Run a command, sampling its process tree's resident memory; wall seconds and peak bytes."""
    started = time.perf_counter()
    with open(log, "ab") as out:
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak = [0, 0]

        def sample() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], tree_rss(process.pid))
                peak[1] = max(peak[1], tree_rss(process.pid, "RssAnon"))
                time.sleep(0.5)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        process.wait()
        thread.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({process.returncode}); see {log}")
    return {"seconds": time.perf_counter() - started, "peak_rss": peak[0], "peak_anon": peak[1]}


def child_json(code: str, env: dict[str, str], log: Path) -> dict:
    """Run Python code in a fresh process; it prints one JSON object as its last line."""
    with open(log, "ab") as err:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err,
                             check=False)
    if out.returncode != 0:
        raise SystemExit(f"a measuring process failed; see {log}")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


OPEN_AND_QUERY = r'''
import json, time, statistics
from pathlib import Path
def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
import numpy, explorer.retrieval.registry as registry, explorer.retrieval.bm25, explorer.retrieval.corpora
from explorer.eval.datasets import resolve_sources
questions = [q.question for s in resolve_sources(["hotpotqa", "musique", "nq", "2wiki"]) for q in s.load(QUERIES)]
before = rss()
t = time.perf_counter()
retriever = registry.open_retriever(CORPUS)
open_s = time.perf_counter() - t
after = rss()
passes = []
for _ in range(2):
    times = []
    for q in questions:
        t = time.perf_counter(); retriever.search(q, 10); times.append(time.perf_counter() - t)
    times.sort()
    passes.append({"p50": times[len(times) // 2], "p95": times[int(len(times) * 0.95)],
                   "mean": sum(times) / len(times)})
from explorer.retrieval.health import corpus_health
health = corpus_health(retriever)
print(json.dumps({"open_s": open_s, "rss_before": before, "rss_after_open": after, "queries": len(questions),
                  "cold": passes[0], "warm": passes[1], "rss_after_queries": rss(), "health": health,
                  "index": retriever.index.manifest}))
'''

DRAGIN = r'''
import json, time
from explorer.runtime import open_runtime
from explorer.methods.base import run_question
from explorer.eval.datasets import resolve_sources
questions = [q.question for q in resolve_sources(["hotpotqa"])[0].load(RUNS)]
runtime = open_runtime("embedded", CORPUS)
rows = []
for q in questions:
    t = time.perf_counter()
    trace = run_question("dragin", q, runtime)
    wall = time.perf_counter() - t
    rows.append({"wall": wall, "retrieval": trace.costs.wall_time.get("retrieval", 0.0),
                 "retrievals": trace.costs.retrievals, "status": trace.status})
print(json.dumps(rows))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, required=True, help="where the corpus, cache and logs go")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-budget", default="4GB")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--queries", type=int, default=100, help="questions per dataset (4 datasets)")
    parser.add_argument("--dragin", type=int, default=3, help="DRAGIN runs (0: skip)")
    parser.add_argument("--skip-build", action="store_true", help="measure an index built earlier")
    parser.add_argument("--keep-store", action="store_true",
                        help="rebuild the BM25 index but keep a passage store built earlier (its time is in its "
                             "manifest)")
    parser.add_argument("--clean", action="store_true", help="delete the corpus and the cache afterwards")
    parser.add_argument("--out", default="benchmarks/results/corpus_scale.md")
    args = parser.parse_args()

    from benchmarks.synthetic_dpr import DPR_PASSAGES, WordSource, write_dpr_tsv
    from explorer.retrieval.benchmark import ensure_benchmark_corpus

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    name = "psgs_w100.tsv" if args.passages == DPR_PASSAGES else f"psgs_{args.passages}.tsv"
    corpus = work / name
    stamp = work / f"{name}.json"
    log = work / "bench.log"
    env = {**os.environ, "EXPLORER_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    facts: dict = {"passages": args.passages, "cpu": cpu_name(), "load_at_start": os.getloadavg()[0]}
    wanted = {"passages": args.passages, "seed": args.seed}
    if not corpus.is_file() or not stamp.is_file() or json.loads(stamp.read_text()) != wanted:
        started = time.perf_counter()
        source = WordSource.from_jsonl(ensure_benchmark_corpus().corpus_path)
        write_dpr_tsv(corpus, source, args.passages, args.seed, progress=True)
        stamp.write_text(json.dumps(wanted))
        facts["generate_s"] = time.perf_counter() - started
    facts["tsv_bytes"] = corpus.stat().st_size

    if not args.skip_build:
        shutil.rmtree(work / "cache" / "indexes" if args.keep_store else work / "cache", ignore_errors=True)
        cmd = [sys.executable, "-m", "explorer", "corpus", "index", str(corpus), "--memory-budget", args.memory_budget]
        if args.workers is not None:
            cmd += ["--workers", str(args.workers)]
        print(f"building: {' '.join(cmd)}", file=sys.stderr)
        facts["build"] = run_measured(cmd, env, log)
    stores = list((work / "cache" / "passages").glob("*/manifest.json"))
    indexes = list((work / "cache" / "indexes").glob("*/manifest.json"))
    facts["store"] = json.loads(stores[0].read_text()) if stores else {}
    index_manifest = json.loads(indexes[0].read_text()) if indexes else {}
    facts["store_bytes"] = sum(f.stat().st_size for f in stores[0].parent.iterdir()) if stores else 0

    print("opening and querying", file=sys.stderr)
    code = OPEN_AND_QUERY.replace("QUERIES", str(args.queries)).replace("CORPUS", repr(str(corpus)))
    facts["open"] = child_json(code, env, log)
    if args.dragin:
        print("DRAGIN", file=sys.stderr)
        code = DRAGIN.replace("RUNS", str(args.dragin)).replace("CORPUS", repr(str(corpus)))
        facts["dragin"] = child_json(code, env, log)
    facts["load_at_end"] = os.getloadavg()[0]
    facts["index_manifest"] = index_manifest
    (work / "facts.json").write_text(json.dumps(facts, indent=1))
    write_result(report(facts), args.out)
    print(report(facts))
    if args.clean:
        shutil.rmtree(work / "cache", ignore_errors=True)
        corpus.unlink(missing_ok=True)
    return 0


def report(f: dict) -> str:
    o, store, index = f["open"], f.get("store", {}), f.get("index_manifest", {})
    build = index.get("build", {})
    lines = [
        f"# Corpus at scale: {f['passages']:,} synthetic DPR passages",
        "",
        f"`python -m benchmarks.bench_corpus_scale --passages {f['passages']}` on {f['cpu']} (2 cores, 24 GB); "
        f"load average {f['load_at_start']:.1f} at start, {f['load_at_end']:.1f} at the end (the cores were shared "
        "with other work throughout).",
        "",
        "| step | measured | target (21M) |",
        "|---|---:|---:|",
        f"| corpus file | {f['tsv_bytes'] / GIB:.2f} GiB | |",
    ]
    if "build" in f:
        lines += [
            f"| build (store + BM25), wall | {f['build']['seconds'] / 60:.1f} min | < 90 min |",
            f"| build, peak resident memory of the process tree | {f['build']['peak_rss'] / GIB:.2f} GiB "
            f"(of which allocated by the processes: {f['build'].get('peak_anon', 0) / GIB:.2f} GiB; the rest is "
            "mapped file pages) | < 12 GB |",
        ]
    lines += [
        f"| of which passage store | {store.get('seconds', 0) / 60:.1f} min (its process's peak resident memory "
        f"{store.get('peak_rss_bytes', 0) / GIB:.2f} GiB) | |",
        f"| of which BM25 index | {build.get('seconds', 0) / 60:.1f} min "
        f"({build.get('chunks')} chunks, {build.get('ranges')} posting ranges, workers as configured) | |",
        f"| BM25 build's own memory ledger, peak | {build.get('ledger_peak_bytes', 0) / GIB:.2f} GiB "
        f"(budget {build.get('memory_budget', 0) / GIB:.1f} GiB) | |",
        f"| passage store on disk | {f['store_bytes'] / GIB:.2f} GiB | |",
        f"| BM25 index on disk | {index.get('bytes', 0) / GIB:.2f} GiB ({index.get('vocabulary', 0):,} terms, "
        f"{index.get('postings', 0):,} postings) | |",
        f"| open (`open_retriever`) | {o['open_s']:.2f} s | < 5 s |",
        f"| resident memory added by opening | {(o['rss_after_open'] - o['rss_before']) / GIB:.3f} GiB "
        f"(process total {o['rss_after_open'] / GIB:.2f} GiB) | < 3 GB |",
        f"| query p50 / p95, first pass ({o['queries']} questions, k = 10) | {o['cold']['p50'] * 1000:.1f} / "
        f"{o['cold']['p95'] * 1000:.1f} ms | p50 < 50 ms |",
        f"| query p50 / p95, second pass | {o['warm']['p50'] * 1000:.1f} / {o['warm']['p95'] * 1000:.1f} ms | |",
        f"| resident memory after the queries (process) | {o['rss_after_queries'] / GIB:.2f} GiB | |",
    ]
    if f.get("dragin"):
        runs = f["dragin"]
        wall = sum(r["wall"] for r in runs)
        retrieval = sum(r["retrieval"] for r in runs)
        lines.append(f"| DRAGIN ({len(runs)} HotpotQA questions, embedded model): retrieval share of wall time | "
                     f"{100 * retrieval / wall:.1f}% ({retrieval:.2f} s of {wall:.1f} s, "
                     f"{sum(r['retrievals'] for r in runs)} retrievals) | |")
    health = o.get("health", {})
    if health:
        lines += ["", f"Health: {health.get('passages', 0):,} passages (expected "
                      f"{health.get('expected_passages')}), count ok: {health.get('count_ok')}, distinct queries: "
                      f"{health.get('distinct_queries')}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
