"""``python -m explorer corpus info|convert|build|build-benchmark``: inspect, convert and build corpora.

``info`` is how a user checks that a downloaded corpus is read as intended (format detected,
passages after cutting to 100 words) before indexing it; ``convert`` writes any supported format
as the JSONL the explorer reads fastest; ``build`` pools the paragraphs of any question files and
corpus files into one corpus with its gold mapping (a user's own benchmark pool);
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

FORMAT_HELP = ("corpus format when the file does not tell: dpr, passages, hotpotqa, 2wiki, musique, nq, txt, "
               "title-sentences, title-text")
CORPUS_HINTS = {"corpus_format": "--format"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("corpus", help="inspect, convert or build corpora",
                                   description="info: load a corpus and report its size and shape. "
                                               "convert: write any supported corpus as JSONL {id, title, text}. "
                                               "build-benchmark: pool the benchmark paragraphs into one corpus.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)

    info = actions.add_parser("info", help="load a corpus and report counts")
    info.add_argument("corpus", help="'demo', 'benchmark' or a corpus file/folder")
    info.add_argument("--format", dest="fmt", default=None, help=FORMAT_HELP)
    info.set_defaults(handler=_info, hints=CORPUS_HINTS)

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
    from explorer.retrieval.corpora import load_corpus

    started = time.perf_counter()
    corpus = load_corpus(args.corpus, args.fmt, show_progress=True)
    seconds = time.perf_counter() - started
    stats = corpus.word_stats()
    split = sum(1 for p in corpus.passages if "#" in p.id)
    rows = [
        ("name", corpus.name),
        ("source", str(corpus.source)),
        ("format", corpus.format + ("" if args.fmt else " (detected)")),
        ("documents", f"{corpus.documents:,}" + (f" ({corpus.skipped:,} without text, skipped)" if corpus.skipped
                                                  else "")),
        ("passages", f"{len(corpus):,} ({split:,} are pieces of longer documents)"),
        ("words/passage", f"min {stats['min']}, mean {stats['mean']:.1f}, median {stats['median']:g}, "
                          f"max {stats['max']}"),
        ("titles", f"{len({p.title for p in corpus.passages}):,} distinct"),
        ("fingerprint", corpus.fingerprint),
        ("read in", f"{seconds:.2f} s"),
    ]
    _print_rows(rows)
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
    corpus = load_corpus(args.source, args.fmt, max_words=args.max_words, show_progress=True)
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
