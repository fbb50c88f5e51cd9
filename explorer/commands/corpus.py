"""``python -m explorer corpus info|index|convert|build|build-benchmark``: inspect, index, convert and build corpora.

``info`` is how a user checks that a downloaded corpus is read as intended (format detected,
passages after cutting to 100 words, the passage count of a known corpus, and once indexed the
index's size and a distinct-queries check); ``index`` builds the passage store and the indexes
of a large corpus ahead of time, with progress bars, resuming after an interruption; ``convert``
writes any supported format as the JSONL the explorer reads fastest; ``build`` pools the
paragraphs of any question files and corpus files into one corpus with its gold mapping (a
user's own benchmark pool);
``build-benchmark`` pools the shared benchmark paragraphs into the corpus the evaluation runs
against by default and indexes it once.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from explorer.cli import add_action_command

FORMAT_HELP = ("corpus format when the file does not tell: dpr, passages, hotpotqa, 2wiki, musique, nq, txt, "
               "title-sentences, title-text")
CORPUS_HINTS = {"corpus_format": "--format"}


def register(subparsers: argparse._SubParsersAction) -> None:
    actions = add_action_command(subparsers, "corpus", help="inspect, convert or build corpora",
                                 description="info: load a corpus and report its size and shape. "
                                             "convert: write any supported corpus as JSONL {id, title, text}. "
                                             "build-benchmark: pool the benchmark paragraphs into one corpus.")

    info = actions.add_parser("info", help="load a corpus and report counts and health checks")
    info.add_argument("corpus", help="'demo', 'benchmark' or a corpus file/folder")
    info.add_argument("--format", dest="fmt", default=None, help=FORMAT_HELP)
    info.add_argument("--verify", action="store_true",
                      help="re-hash every file of the BM25 index against its fingerprint (reads the whole index)")
    info.set_defaults(handler=_info, hints=CORPUS_HINTS)

    from explorer.retrieval.choice import add_retriever_arguments

    index = actions.add_parser("index", help="build a corpus's passage store and indexes (resumable, with progress)",
                               description="Read a corpus into its passage store and build its BM25 index (and, with "
                                           "--retriever dense or hybrid, its embeddings and dense index) with "
                                           "progress bars. Interrupted, it resumes where it stopped when run again; "
                                           "it refuses to start when the disk lacks the space it will need.")
    index.add_argument("corpus", help="'demo', 'benchmark' or a corpus file/folder (e.g. psgs_w100.tsv)")
    index.add_argument("--format", dest="fmt", default=None, help=FORMAT_HELP)
    index.add_argument("--memory-budget", default="2GB",
                       help="memory the BM25 build may hold, e.g. 512MB or 4GB (default 2GB); a larger budget means "
                            "fewer, larger pieces of work, not a different index")
    index.add_argument("--workers", type=int, default=None,
                       help="processes analysing text in parallel (default: none below 200,000 passages, else one "
                            "per spare core, at most 4)")
    add_retriever_arguments(index)
    index.add_argument("--embed-workers", type=int, default=None, metavar="N",
                       help="dense: embed the passages' shards on N Ray workers (a local Ray instance, or the "
                            "cluster at --ray-address); resumes with the shards already written")
    index.add_argument("--embed-gpus", type=float, default=0.0, metavar="G",
                       help="dense: GPUs per embedding worker (e.g. 1; 0: CPU workers)")
    index.add_argument("--ray-address", default=None, help="dense: an existing Ray cluster for the embedding workers")
    index.set_defaults(handler=_index, hints=CORPUS_HINTS)

    convert = actions.add_parser("convert", help="write a corpus as JSONL {id, title, text}")
    convert.add_argument("source", help="'demo', 'benchmark' or a corpus file/folder")
    convert.add_argument("output", type=Path, help="the .jsonl file to write")
    convert.add_argument("--format", dest="fmt", default=None, help=FORMAT_HELP)
    convert.add_argument("--max-words", type=int, default=100, help="cut passages to this many words (default 100)")
    convert.add_argument("--force", action="store_true", help="overwrite the output file")
    convert.set_defaults(handler=_convert, hints=CORPUS_HINTS)

    from explorer.eval.question_formats import QUESTION_FORMATS

    build = actions.add_parser("build", help="pool question files and corpus files into one corpus with gold ids",
                               description="Pool the paragraphs inside question files (HotpotQA, 2Wiki, MuSiQue, NQ "
                                           "formats) and every document of the corpus files; remove duplicates by "
                                           "(title, text); cut into passages of at most 100 words; write corpus.jsonl, "
                                           "gold.json and manifest.json. Evaluate against it with --corpus "
                                           "OUT/corpus.jsonl.")
    build.add_argument("--dataset", "--datasets", dest="datasets", action="append", default=[],
                       metavar="NAME|PATH|NAME=PATH",
                       help="question files or benchmark names, comma-separated or repeated")
    build.add_argument("--format", dest="fmt", default=None,
                       help="format of the question files when it should not be detected: "
                            + ", ".join(QUESTION_FORMATS))
    build.add_argument("--corpus", dest="corpora", action="append", default=[], metavar="PATH",
                       help="a corpus file or folder to pool (repeatable)")
    build.add_argument("--corpus-format", dest="corpus_fmt", default=None, help=FORMAT_HELP)
    build.add_argument("--data", type=Path, default=None, help="benchmark data folder for benchmark names "
                                                               "(default: ../shared/data)")
    build.add_argument("--out", type=Path, default=Path("."), help="folder to write to (default: the current folder)")
    build.add_argument("--force", action="store_true", help="overwrite corpus.jsonl / gold.json already there")
    from explorer.cli import add_threads_option

    add_threads_option(build)
    build.set_defaults(handler=_build, hints={"dataset_format": "--format", "dataset": "--dataset",
                                              "corpus_format": "--corpus-format", "data_dir": "--data",
                                              "corpus": "--corpus"})

    bench = actions.add_parser("build-benchmark", help="pool the benchmark paragraphs into one indexed corpus")
    bench.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    add_threads_option(bench)
    bench.set_defaults(handler=_build_benchmark, hints={"benchmark_data": "--data"})


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _print_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def _info(args: argparse.Namespace) -> int:
    from explorer.retrieval.building import human_bytes
    from explorer.retrieval.corpora import load_corpus

    started = time.perf_counter()
    corpus = load_corpus(args.corpus, args.fmt, progress=_progress, follows=())
    seconds = time.perf_counter() - started
    stats = corpus.word_stats()
    manifest = corpus.store.manifest
    rows = [
        ("name", corpus.name),
        ("source", str(corpus.source)),
        ("format", corpus.format + ("" if args.fmt else " (detected)")),
        ("documents", f"{corpus.documents:,}" + (f" ({corpus.skipped:,} without text, skipped)" if corpus.skipped
                                                  else "")),
        ("passages", f"{len(corpus):,} ({int(manifest.get('pieces', 0)):,} are pieces of longer documents)"),
        ("words/passage", f"min {stats['min']}, mean {stats['mean']:.1f}, median {stats['median']:g}, "
                          f"max {stats['max']}"),
        ("titles", f"{int(manifest.get('titles', 0)):,} distinct"),
        *_read_rows(manifest.get("read")),
        ("fingerprint", corpus.fingerprint),
        ("passage store", f"{corpus.store.folder} ({human_bytes(corpus.store.size_bytes())})"),
        ("read in", f"{seconds:.2f} s"),
    ]
    rows += _index_rows(corpus, verify=args.verify)
    _print_rows(rows)
    return 0


def _read_rows(read: dict | None) -> list[tuple[str, str]]:
    """What reading a DPR file found: its records against its lines, and the rows named as suspect."""
    from explorer.retrieval.formats import named_rows

    if not read or "records" not in read:
        return []
    rows = [("lines", f"{read['records']:,} records read from {read['data_lines']:,} lines after the header"
                      + (f" ({read['blank_lines']:,} blank)" if read.get("blank_lines") else ""))]
    for key, count, label, what in (("spanning", "spanning_count", "joined lines", "span lines or hold a tab"),
                                    ("long_rows", "long_count", "overlong rows", "are far longer than a passage")):
        if read.get(count):
            rows.append((label, f"WARNING: {read[count]:,} record(s) {what}: "
                                + named_rows(read.get(key) or [], read[count])))
    return rows


def _index_rows(corpus, *, verify: bool) -> list[tuple[str, str]]:
    """The BM25 index's state and the health checks when it is built; how to build it when not."""
    from explorer.retrieval.bm25 import BM25Retriever, index_dir_for, index_key
    from explorer.retrieval.bm25_index import MANIFEST_FILE
    from explorer.retrieval.health import corpus_health, health_rows
    from explorer.retrieval.tokenizer import TokenizerSettings

    folder = index_dir_for(corpus, index_key(corpus, TokenizerSettings(), _default_params()))
    if not (folder / MANIFEST_FILE).is_file():
        expected = corpus.expected_passages
        command = f"python -m explorer corpus index {shlex.quote(str(corpus.source))}"
        rows = [("BM25 index", f"not built yet ({command} builds it, with a progress bar; a search builds it too)")]
        if expected is not None and expected != len(corpus):
            rows.append(("passage count", f"{len(corpus):,} but expected {expected:,} (truncated or another file?)"))
        return rows
    retriever = BM25Retriever(corpus)
    rows = [("BM25 index", f"{folder} (built {retriever.index.manifest.get('build', {}).get('seconds', '?')} s, "
                           f"{retriever.index.vocabulary:,} terms)")]
    if verify:
        started = time.perf_counter()
        retriever.index.verify()
        rows.append(("verified", f"every index file matches its fingerprint ({time.perf_counter() - started:.1f} s)"))
    return rows + health_rows(corpus_health(retriever))


def _embed_on_ray(corpus, choice, args: argparse.Namespace) -> str:
    """Embed the corpus's shards on Ray workers ahead of opening the dense retriever, which then finds
    them written and only builds its IVF-PQ index."""
    from explorer.errors import ConfigError
    from explorer.retrieval import dense_shards
    from explorer.retrieval.dense import SHARDED_FROM, dense_key, sharded_dir_for
    from explorer.retrieval.embeddings import get_encoder

    if choice.kind == "bm25":
        raise ConfigError("--embed-workers embeds passages for dense retrieval", where="--embed-workers",
                          fix="add --retriever dense (or hybrid)")
    if args.embed_workers < 1 or args.embed_gpus < 0:
        raise ConfigError("--embed-workers must be at least 1 and --embed-gpus 0 or more", where="--embed-workers",
                          fix="e.g. --embed-workers 4 --embed-gpus 1")
    if not (choice.index == "ivfpq" or (choice.index == "auto" and len(corpus) > SHARDED_FROM)):
        raise ConfigError(f"workers embed in shards for the on-disk IVF-PQ index, which '{corpus.name}' "
                          f"({len(corpus):,} passages) only gets with index=ivfpq", where="--embed-workers",
                          fix="add --retriever-set index=ivfpq (automatic above 2,000,000 passages)")
    encoder = get_encoder(choice.embedder)
    key = dense_key(corpus, encoder)
    plan = dense_shards.ShardPlan(len(corpus))
    embed = dense_shards.embed_on_ray(corpus.store, plan, embedder=choice.embedder, batch_size=choice.batch_size,
                                      workers=args.embed_workers, gpus=args.embed_gpus, address=args.ray_address)
    manifest = dense_shards.build_shards(sharded_dir_for(corpus, key), corpus.store, encoder.dim, key, embed,
                                         plan=plan, progress=_progress)
    rate = manifest.get("passages_per_second")
    return (f"{plan.count} shards on {args.embed_workers} Ray worker(s)"
            + (f", {rate:,.1f} passages/s" if rate else ", all written before"))


def _default_params():
    from explorer.retrieval.bm25 import BM25Params

    return BM25Params()


def parse_size(text: str, where: str) -> int:
    """``512MB``, ``2GB``, ``1.5G`` or a number of bytes."""
    import re

    from explorer.errors import ConfigError

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not match:
        raise ConfigError(f"cannot read the size {text!r}", where=where, fix="write it like 512MB or 2GB")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _index(args: argparse.Namespace) -> int:
    from explorer.retrieval.bm25 import BM25Retriever
    from explorer.retrieval.building import human_bytes
    from explorer.retrieval.choice import config_from_args
    from explorer.retrieval.corpora import load_corpus
    from explorer.retrieval.health import corpus_health, health_rows
    from explorer.retrieval.registry import open_retriever

    choice = config_from_args(args)  # a bad choice fails before any work
    budget = parse_size(args.memory_budget, "--memory-budget")
    if args.workers is not None and args.workers < 0:
        from explorer.errors import ConfigError

        raise ConfigError(f"--workers must be 0 or more, got {args.workers}", where="--workers",
                          fix="e.g. --workers 2, or 0 to analyse in this process")
    started = time.perf_counter()
    corpus = load_corpus(args.corpus, args.fmt, progress=_progress,
                         follows=("bm25",) if choice.kind == "bm25" else ("bm25", "dense"))
    bm25 = BM25Retriever(corpus, progress=_progress, memory_budget=budget, workers=args.workers)
    build = bm25.index.manifest.get("build", {})
    rows = [("passages", f"{len(corpus):,}"),
            ("passage store", f"{corpus.store.folder} ({human_bytes(corpus.store.size_bytes())})"),
            ("BM25 index", f"{bm25.index_path} ({'built' if bm25.index_built else 'reused'}"
                           + (f", {build.get('seconds')} s, memory held at most "
                              f"{human_bytes(build.get('ledger_peak_bytes', 0))}" if bm25.index_built else "") + ")")]
    retriever = bm25
    if args.embed_workers is not None:
        rows.append(("embedding", _embed_on_ray(corpus, choice, args)))
    if choice.kind != "bm25":
        retriever = open_retriever(args.corpus, progress=_progress, fmt=args.fmt, kind=choice)
        rows.append((f"{choice.kind} index", str(retriever.describe().get("index"))))
    rows.append(("took", f"{time.perf_counter() - started:.1f} s"))
    _print_rows(rows + health_rows(corpus_health(retriever)))
    return 0


def _convert(args: argparse.Namespace) -> int:
    from explorer.errors import ConfigError
    from explorer.outputs import check_creatable, open_output, write_error
    from explorer.retrieval.corpora import load_corpus

    if args.max_words < 1:
        raise ConfigError(f"--max-words must be at least 1, got {args.max_words}", where="--max-words",
                          fix="pass e.g. --max-words 100")
    out: Path = check_creatable(args.output, "output")
    if out.exists() and not args.force:
        raise ConfigError("the file already exists", where=str(out), fix="choose another name or pass --force")
    if out.suffix.lower() != ".jsonl":
        raise ConfigError(f"the output should be a .jsonl file, got '{out.name}'", where=str(out),
                          fix="name it something.jsonl")
    corpus = load_corpus(args.source, args.fmt, max_words=args.max_words, show_progress=True, follows=())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(exc, out, "output") from exc
    with open_output(out, "output") as stream:
        for p in corpus.passages:
            stream.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
    print(f"wrote {len(corpus):,} passages from {corpus.documents:,} documents ({corpus.format}) to {out}")
    return 0


def _build_benchmark(args: argparse.Namespace) -> int:
    from explorer.eval.benchmark_gold import write_benchmark_gold
    from explorer.retrieval.benchmark import build_benchmark_corpus
    from explorer.retrieval.registry import clear_cache, open_retriever

    started = time.perf_counter()
    files = build_benchmark_corpus(args.data, progress=_progress)
    gold = write_benchmark_gold(files, args.data)
    clear_cache()
    retriever = open_retriever("benchmark", progress=_progress)
    manifest = files.manifest() or {}
    rows = [
        ("paragraphs", f"{manifest.get('documents', 0):,} distinct (title, text)"),
        ("passages", f"{len(retriever):,} of at most 100 words"),
        ("gold questions", ", ".join(f"{k} {len(v['questions']):,}" for k, v in gold.items())),
        ("corpus", str(files.corpus_path)),
        ("gold ids", str(files.gold_path)),
        ("index", f"{retriever.describe()['index']} ({'built' if retriever.index_built else 'reused'})"),
        ("took", f"{time.perf_counter() - started:.1f} s"),
    ]
    _print_rows(rows)
    return 0


def _build(args: argparse.Namespace) -> int:
    from explorer.errors import ConfigError
    from explorer.eval.datasets import resolve_sources
    from explorer.eval.runner import parse_list
    from explorer.retrieval.pool import CorpusSource, build_pool

    specs = parse_list(args.datasets, "dataset") if args.datasets else []
    if not specs and not args.corpora:
        raise ConfigError("nothing to pool", where="corpus build",
                          fix="give question files with --dataset and/or corpus files with --corpus")
    from explorer.outputs import check_creatable
    from explorer.retrieval.pool import POOL_FILES

    out: Path = check_creatable(args.out, "--out", folder=True, files=POOL_FILES)  # before anything is read
    existing = [n for n in POOL_FILES if (out / n).exists()]
    if existing and not args.force:
        raise ConfigError(f"{out / existing[0]} already exists", where="--out",
                          fix="choose another --out folder, or pass --force to overwrite")
    sources = resolve_sources(specs, fmt=args.fmt, data_dir=args.data) if specs else []
    corpora = [CorpusSource(Path(c).expanduser(), args.corpus_fmt) for c in args.corpora]
    started = time.perf_counter()
    pool = build_pool(sources, corpora, out, progress=_progress)
    rows = [(f"from {name}", f"{n:,} paragraphs") for name, n in pool.paragraphs_from.items()]
    rows += [
        ("paragraphs", f"{pool.documents:,} distinct (title, text)"),
        ("passages", f"{pool.passages:,} of at most 100 words"),
        ("gold questions", ", ".join(f"{k} {v:,}" for k, v in pool.gold_questions.items()) or "none"),
        ("corpus", str(pool.corpus_path)),
        ("gold ids", str(pool.gold_path)),
        ("took", f"{time.perf_counter() - started:.1f} s"),
    ]
    _print_rows(rows)
    datasets = ",".join(s.spec for s in sources) or "FILE"
    print(f"\nevaluate on it: python -m explorer eval --dataset {shlex.quote(datasets)} "
          f"--corpus {shlex.quote(str(pool.corpus_path))} --methods wo,sr,dragin")
    return 0
