"""``python -m explorer data list|fetch``: the benchmark files the explorer can fetch, and fetching them.

``fetch`` shows each file's licence and source before it downloads, resumes a download that
stopped, refuses a file whose checksum differs from what its host states, and puts the file
where ``--dataset NAME`` and ``--corpus NAME`` find it.
"""

from __future__ import annotations

import argparse
import sys

from explorer.cli import add_action_command


def register(subparsers: argparse._SubParsersAction) -> None:
    actions = add_action_command(subparsers, "data",
                                 help="list and fetch the benchmark question sets and the Wikipedia corpus",
                                 description="list: the files the explorer can fetch, their licences and where each "
                                             "is found now. fetch NAME...: download them (from the Hugging Face "
                                             "hub, or HF_ENDPOINT) into the fetched-data folder.")

    listing = actions.add_parser("list", help="the fetchable files, their licences, and which are present")
    listing.set_defaults(handler=_list)

    fetch = actions.add_parser("fetch", help="download benchmark files (resumable, checksummed)",
                               description="Download each named file, showing its licence and source first. A stopped "
                                           "download resumes when the command runs again; a file whose checksum "
                                           "differs from the one its host states is deleted. Files go to "
                                           "EXPLORER_DOWNLOADS, else the cache's data/ folder.")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="names from `data list` (e.g. hotpotqa musique)")
    fetch.add_argument("--force", action="store_true", help="download again even when the file is already there")
    fetch.set_defaults(handler=_fetch)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _list(args: argparse.Namespace) -> int:
    from explorer.fetching.catalog import CATALOG, find_file
    from explorer.paths import data_dirs

    for item in CATALOG:
        found = find_file(_lookup_names(item.name, item.path))
        print(item.describe())
        print(f"  present: {found}" if found else f"  present: no (python -m explorer data fetch {item.name})")
    print("searched: " + ", ".join(str(d) for d in data_dirs()))
    return 0


def _lookup_names(name: str, fetched: str) -> list[str]:
    """The files a name is found as: the layouts of the shared data folder first, then the fetched file."""
    from explorer.eval.datasets import DEFAULT_FILES

    return [p for p in (DEFAULT_FILES.get(name), fetched) if p]


def _fetch(args: argparse.Namespace) -> int:
    from explorer.errors import ConfigError
    from explorer.fetching.catalog import entry, names
    from explorer.fetching.download import fetch

    items = []
    for name in args.names:
        for part in name.split(","):
            if not part.strip():
                continue
            item = entry(part)
            if item is None:
                raise ConfigError(f"there is no fetchable file named '{part}'", where="data fetch",
                                  fix=f"use one of {', '.join(names())} (`python -m explorer data list` shows them)")
            if item not in items:
                items.append(item)
    for item in items:
        path = fetch(item, force=args.force, say=_say)
        print(path)
    return 0
