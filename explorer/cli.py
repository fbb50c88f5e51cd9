"""The command line: ``python -m explorer <command> ...``.

Each sub-command lives in its own module under :mod:`explorer.commands` and registers itself;
this file only discovers them, parses arguments and turns user errors into one clear message.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from pathlib import Path

from explorer import __version__, commands, options
from explorer.errors import ExplorerError

MODEL_HELP = ("embedded (default: SmolLM2-135M-Instruct), gemma3-270m (the second packaged model), a model folder, "
              "a .gguf file (converted once, then cached) or a hub id such as Qwen/Qwen2.5-0.5B-Instruct")
ATTN_HELP = ("attention backend: auto (default; sdpa where the model supports it, eager where not), sdpa, eager, "
             "or flash_attention_2 / flex_attention where installed; DRAGIN's attention signals need auto, sdpa or "
             "eager, every other method runs on any backend (env EXPLORER_ATTN)")


def add_attn_option(parser: argparse.ArgumentParser) -> None:
    """``--attn``, the same on every command that loads a model (its default comes from EXPLORER_ATTN)."""
    from explorer.runtime import default_attn

    parser.add_argument("--attn", default=default_attn(), metavar="BACKEND", help=ATTN_HELP)


def _thread_count(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of threads") from None
    if value < 1:
        raise argparse.ArgumentTypeError("give at least 1 thread, or auto")
    return value


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """``--threads``, on every command that computes with torch (explorer.threads chooses when it is left out)."""
    parser.add_argument("--threads", type=_thread_count, default=None, metavar="N|auto",
                        help="torch threads (default auto: the cores free now, from the CPU affinity and the load "
                             "average; OMP_NUM_THREADS also sets it)")


def add_action_command(subparsers: argparse._SubParsersAction, name: str, *, help: str,
                       description: str) -> argparse._SubParsersAction:
    """A command made of actions (``corpus info``, ``data fetch``): returns the sub-parsers its actions are added to.

    Given no action, the command prints its own help and exits with 2, as a wrong word would."""
    parser = subparsers.add_parser(name, help=help, description=description)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)
    return actions


def _set_threads(args: argparse.Namespace) -> int:
    """Apply ``--threads`` (or the automatic choice) before a computing command starts; say so when the machine is
    busy enough for the choice to matter. Returns the count before, which :func:`main` puts back afterwards (a
    caller that runs commands in-process keeps its own setting)."""
    import torch

    from explorer.threads import apply_threads, torch_default

    before = torch.get_num_threads()
    choice = apply_threads(args.threads)
    if choice.how != "automatic" or choice.threads < torch_default():
        print(choice.describe(), file=sys.stderr, flush=True)
    return before


def build_parser() -> argparse.ArgumentParser:
    # Installed, the command is `explorer`; from a checkout it is `python -m explorer`.
    prog = "explorer" if Path(sys.argv[0]).name == "explorer" else "python -m explorer"
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Dynamic RAG Explorer: run, inspect and evaluate dynamic retrieval.")
    parser.add_argument("--version", action="version", version=f"explorer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def warnings_to_stderr() -> logging.Handler:
    """The library's warnings (a corpus repeating ids, a database opened read-only) as ``warning: ...`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    logging.getLogger("explorer").addHandler(handler)
    return handler


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    handler = warnings_to_stderr()
    try:
        # Library messages name only the options this command has (explorer.options).
        with options.using(getattr(args, "hints", {})):
            threads_before = _set_threads(args) if hasattr(args, "threads") else None
            try:
                return int(args.handler(args) or 0)
            finally:
                if threads_before is not None:
                    import torch

                    torch.set_num_threads(threads_before)
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
    finally:
        logging.getLogger("explorer").removeHandler(handler)


if __name__ == "__main__":
    raise SystemExit(main())
