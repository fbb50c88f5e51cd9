"""``python -m explorer corpus info|convert|build-benchmark``: inspect, convert and build corpora.

``info`` is how a user checks that a downloaded corpus is read as intended (format detected,
passages after cutting to 100 words) before indexing it; ``convert`` writes any supported format
as the JSONL the explorer reads fastest; ``build-benchmark`` pools the benchmark paragraphs into
the corpus the evaluation runs against and indexes it once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

FORMAT_HELP = "corpus format when the extension does not tell: dpr, passages, hotpotqa, 2wiki, musique, nq, txt"


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
    info.set_defaults(handler=_info)

    convert = actions.add_parser("convert", help="write a corpus as JSONL {id, title, text}")
    convert.add_argument("source", help="'demo', 'benchmark' or a corpus file/folder")
    convert.add_argument("output", type=Path, help="the .jsonl file to write")
    convert.add_argument("--format", dest="fmt", default=None, help=FORMAT_HELP)
    convert.add_argument("--max-words", type=int, default=100, help="cut passages to this many words (default 100)")
    convert.add_argument("--force", action="store_true", help="overwrite the output file")
    convert.set_defaults(handler=_convert)

    build = actions.add_parser("build-benchmark", help="pool the benchmark paragraphs into one indexed corpus")
    build.add_argument("--data", type=Path, default=None, help="benchmark data folder (default: ../shared/data)")
    build.set_defaults(handler=_build_benchmark)


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
    from explorer.paths import check_creatable
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
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as stream:
            for p in corpus.passages:
                stream.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the file ({exc.strerror or exc})", where=str(out),
                          fix="check the folder, its permissions and the free space") from exc
    print(f"wrote {len(corpus):,} passages from {corpus.documents:,} documents ({corpus.format}) to {out}")
    return 0


def _build_benchmark(args: argparse.Namespace) -> int:
    from explorer.retrieval.benchmark import build_benchmark_corpus
    from explorer.retrieval.registry import clear_cache, open_retriever

    started = time.perf_counter()
    files = build_benchmark_corpus(args.data, progress=_progress)
    clear_cache()
    retriever = open_retriever("benchmark", progress=_progress)
    manifest = files.manifest() or {}
    rows = [
        ("paragraphs", f"{manifest.get('documents', 0):,} distinct (title, text)"),
        ("passages", f"{len(retriever):,} of at most 100 words"),
        ("gold questions", ", ".join(f"{k} {v:,}" for k, v in manifest.get("gold_questions", {}).items())),
        ("corpus", str(files.corpus_path)),
        ("gold ids", str(files.gold_path)),
        ("index", f"{retriever.describe()['index']} ({'built' if retriever.index_built else 'reused'})"),
        ("took", f"{time.perf_counter() - started:.1f} s"),
    ]
    _print_rows(rows)
    return 0
