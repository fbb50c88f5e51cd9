"""The command line: ``python -m explorer <command> ...``.

Each sub-command lives in its own module under :mod:`explorer.commands` and registers itself;
this file only discovers them, parses arguments and turns user errors into one clear message.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from explorer import __version__, commands, options
from explorer.errors import ExplorerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m explorer",
                                     description="Dynamic RAG Explorer: run, inspect and evaluate dynamic retrieval.")
    parser.add_argument("--version", action="version", version=f"explorer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        # Library messages name only the options this command has (explorer.options).
        with options.using(getattr(args, "hints", {})):
            return int(args.handler(args) or 0)
    except ExplorerError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # a path the commands did not check ahead: still one clear line, no traceback
        where = exc.filename or "a file"
        print(f"error: {where}: {exc.strerror or exc} Fix: check the path, its folders, permissions and free "
              "space", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
