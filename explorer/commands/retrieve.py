"""``python -m explorer retrieve``: search a corpus with BM25, dense or hybrid retrieval from the command line.

The quickest way to see what a method's query would bring back, and to check that a corpus file
loads and indexes before pointing a run at it.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

#: The most passages one search prints, and the narrowest snippet (a shortened text needs room for " ...").
MAX_K = 10_000
MIN_WIDTH = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    from explorer.retrieval.choice import add_retriever_arguments

    parser = subparsers.add_parser(
        "retrieve", help="search a corpus (BM25, dense or hybrid) and print the best passages",
        description="Search a corpus (demo, benchmark, or a corpus file/folder) and print rank, score, id, "
                    "title and a snippet of each hit.")
    parser.add_argument("query", help="the search text")
    parser.add_argument("--corpus", default="demo", help="'demo' (default), 'benchmark', or a corpus path")
    parser.add_argument("-k", type=int, default=5, help="number of passages (default 5)")
    add_retriever_arguments(parser)
    parser.add_argument("--format", dest="fmt", default=None,
                        help="corpus format when the extension does not tell (dpr, passages, hotpotqa, 2wiki, "
                             "musique, nq, txt)")
    parser.add_argument("--width", type=int, default=160, help="characters of text shown per hit (default 160)")
    parser.add_argument("--json", action="store_true", help="print the hits as JSON lines instead")
    from explorer.cli import add_threads_option

    add_threads_option(parser)
    parser.set_defaults(handler=run, hints={"corpus_format": "--format"})


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def snippet(text: str, width: int) -> str:
    return textwrap.shorten(" ".join(text.split()), width=max(width, MIN_WIDTH), placeholder=" ...")


def run(args: argparse.Namespace) -> int:
    from explorer.errors import ConfigError, check_text, has_visible
    from explorer.retrieval.choice import config_from_args
    from explorer.retrieval.registry import open_retriever

    if not args.query.strip() or not has_visible(args.query):
        raise ConfigError("the search text is empty" + ("" if not args.query.strip() else " (only invisible "
                                                        "characters: NUL, zero-width or control characters)"),
                          where="query", fix='give some words to search for, e.g. retrieve "arena seating capacity"')
    check_text(args.query, "query")  # bytes that are not UTF-8 arrive as lone surrogates
    if args.k < 1:
        raise ConfigError(f"-k must be at least 1, got {args.k}", where="-k", fix="pass -k 5, for example")
    if args.k > MAX_K:
        raise ConfigError(f"-k must be at most {MAX_K:,}, got {args.k:,}", where="-k",
                          fix="ask for the passages you will read, e.g. -k 20")
    if args.width < MIN_WIDTH:
        raise ConfigError(f"--width must be at least {MIN_WIDTH}, got {args.width}", where="--width",
                          fix="pass e.g. --width 160 (characters of text shown per hit)")
    choice = config_from_args(args)
    retriever = open_retriever(args.corpus, progress=_progress, fmt=args.fmt, kind=choice)
    hits = retriever.search(args.query, args.k)
    if args.json:
        for hit in hits:
            print(json.dumps(hit.to_dict(), ensure_ascii=False))
        return 0
    if not hits and choice.kind != "bm25":
        print("no passage found (the query is empty)")
        return 0
    if not hits:
        print(f"no passage of '{retriever.name}' shares a searchable word with the query "
              f"(stopwords, punctuation and unknown words are ignored)")
        return 0
    id_width = max(len(h.passage.id) for h in hits)
    print(f"{'rank':>4}  {'score':>7}  {'id':<{id_width}}  title")
    for hit in hits:
        print(f"{hit.rank:>4}  {hit.score:>7.3f}  {hit.passage.id:<{id_width}}  {hit.passage.title}")
        print(f"{'':>15}{snippet(hit.passage.text, args.width)}")
    return 0
