"""Command-line options of ``python app.py``, each also settable by an environment variable.

The app serves on 127.0.0.1 unless told otherwise; binding to another address without
``--auth`` prints a warning, since anyone who can reach the port can run the model and read and
delete every stored run. Nothing is downloaded at run time: the Hugging Face Hub is switched off
and the embedded model must already be converted (``python -m explorer model fetch``).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from explorer.errors import ExplorerError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise ExplorerError(f"{name}={value!r} is not a port number", where=name, fix="set it to e.g. 7860") from None


def check_host(host: str) -> str:
    """Refuse an empty address (Gradio would quietly bind 127.0.0.1 while the warning named nothing)."""
    if not (host or "").strip():
        raise ExplorerError("the address to serve on is empty", where="--host (or EXPLORER_HOST)",
                            fix="use 127.0.0.1 (this machine only), or 0.0.0.0 with --auth to serve the network")
    return host.strip()


def check_port(host: str, port: int) -> None:
    """Refuse a port out of range, taken or not allowed, before anything is loaded."""
    where = "--port (or EXPLORER_PORT)"
    if not 1 <= port <= 65535:
        raise ExplorerError(f"{port} is not a TCP port", where=where, fix="use a port between 1 and 65535, e.g. 7860")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ExplorerError(f"cannot resolve the address {host!r} ({exc})", where="--host (or EXPLORER_HOST)",
                            fix="use an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server itself does
        try:
            probe.bind(address)
        except OSError as exc:
            raise port_error(host, port, exc) from None


def port_error(host: str, port: int, exc: OSError) -> ExplorerError:
    where = "--port (or EXPLORER_PORT)"
    if exc.errno == errno.EADDRINUSE or "empty port" in str(exc).lower():
        return ExplorerError(f"port {port} on {host} is already in use", where=where,
                             fix=f"choose another port (e.g. --port {port + 1 if port < 65535 else 7860}), or stop "
                                 "the program that uses it")
    if exc.errno == errno.EACCES:
        return ExplorerError(f"port {port} needs administrator rights on this machine", where=where,
                             fix="use a port above 1023, e.g. 7860")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ExplorerError(f"this machine has no address {host}", where="--host (or EXPLORER_HOST)",
                             fix="use 127.0.0.1, 0.0.0.0 or one of this machine's own addresses")
    return ExplorerError(f"cannot serve on {host}:{port} ({exc.strerror or exc})", where=where,
                         fix="choose another --port or --host")


def server_log() -> None:
    """The explorer's messages (full errors with paths, recovered runs, refused requests) go to stderr."""
    logger = logging.getLogger("explorer")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def private_temp_dir() -> Path:
    """A folder only this user can read, for the files Gradio hands to browsers (exports); removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="explorer-gradio-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from explorer.cli import ATTN_HELP
    from explorer.paths import default_db_path
    from explorer.runtime import default_attn

    parser = argparse.ArgumentParser(prog="app.py", description="Serve the Dynamic RAG Explorer web app.")
    parser.add_argument("--host", default=os.environ.get("EXPLORER_HOST", "127.0.0.1"),
                        help="address to bind (env EXPLORER_HOST; default 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=_env_int("EXPLORER_PORT", 7860),
                        help="port (env EXPLORER_PORT; default 7860)")
    parser.add_argument("--db", default=os.environ.get("EXPLORER_DB") or str(default_db_path()),
                        help="SQLite file that stores the runs (env EXPLORER_DB)")
    parser.add_argument("--model", default=os.environ.get("EXPLORER_MODEL", "embedded"),
                        help="embedded (default), gemma3-270m, a model folder, a .gguf file, or a hub id already in "
                             "the Hugging Face cache (env EXPLORER_MODEL); random:tiny is a random-weight model for "
                             "tests")
    parser.add_argument("--attn", default=default_attn(), metavar="BACKEND", help=ATTN_HELP)
    parser.add_argument("--corpus", default=os.environ.get("EXPLORER_CORPUS", "demo"),
                        help="demo (default), benchmark, or a corpus file/folder (env EXPLORER_CORPUS)")
    parser.add_argument("--retriever", default=os.environ.get("EXPLORER_RETRIEVER", "bm25"),
                        choices=("bm25", "dense", "hybrid"),
                        help="retriever the Run tab starts with: bm25 (default), dense or hybrid "
                             "(env EXPLORER_RETRIEVER)")
    parser.add_argument("--embedder", default=os.environ.get("EXPLORER_EMBEDDER", ""),
                        help="dense/hybrid model: a sentence-transformers folder (default: the bundled "
                             "all-MiniLM-L6-v2; env EXPLORER_EMBEDDER)")
    parser.add_argument("--auth", default=os.environ.get("EXPLORER_AUTH") or None, metavar="USER:PASSWORD",
                        help="require this login (env EXPLORER_AUTH; recommended whenever --host is not 127.0.0.1)")
    parser.add_argument("--forwarded-allow-ips", default=os.environ.get("EXPLORER_FORWARDED_ALLOW_IPS", ""),
                        metavar="ADDRESSES",
                        help="reverse proxies (addresses or networks, comma-separated) whose X-Forwarded-For header "
                             "names the client; from any other peer it is ignored (env EXPLORER_FORWARDED_ALLOW_IPS; "
                             "default: none)")
    parser.add_argument("--lazy", action="store_true", help="load the model on the first run instead of at start")
    parser.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                        default=os.environ.get("EXPLORER_PREFIX_CACHE", "1") != "0",
                        help="encode every prompt whole instead of reusing the states of an opening shared with a "
                             "recent prompt (env EXPLORER_PREFIX_CACHE=0)")
    parser.add_argument("--otlp", default=None, metavar="URL",
                        help="stream every finished run as OpenInference spans to this OTLP/HTTP collector, e.g. "
                             "Phoenix at http://localhost:6006 (env EXPLORER_OTLP_ENDPOINT)")
    parser.add_argument("--concurrent-runs", type=int, default=0, metavar="N",
                        help="runs using the model at once, their tokens decoded as one batch; later callers wait "
                             "in line and are told their place (env EXPLORER_CONCURRENT_RUNS; default 4)")
    parser.add_argument("--threads", type=_threads, default=os.environ.get("EXPLORER_THREADS") or None,
                        metavar="N|auto",
                        help="torch threads for the model (env EXPLORER_THREADS; default: torch's own, one per core; "
                             "auto: the cores free when the server starts, as the commands choose)")
    parser.add_argument("--quiet", action="store_true", help="print less at start")
    return parser.parse_args(argv)


def _threads(text: str) -> int | str:
    """``--threads``: a count, or ``auto``; a server runs for hours, so unlike the commands it does not
    choose from the load of the moment it starts unless asked to."""
    from explorer.cli import _thread_count

    return _thread_count(text) or "auto"


def apply_server_threads(value: int | str | None) -> str | None:
    """Set torch's thread count for the server (``None``: leave torch's default); what was chosen, to print."""
    if value is None:
        return None
    from explorer.threads import apply_threads

    return apply_threads(None if value == "auto" else int(value)).describe()


def parse_auth(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ExplorerError("--auth must be USER:PASSWORD", where="--auth", fix="e.g. --auth alice:long-secret")
    return user, password


def parse_proxies(text: str | None) -> tuple:
    """The proxies of ``--forwarded-allow-ips``, refused with the bad entry named."""
    from explorer.ui.serving.forwarding import parse_proxies as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise ExplorerError(f"not an IP address or network ({exc})", where="--forwarded-allow-ips (or "
                            "EXPLORER_FORWARDED_ALLOW_IPS)",
                            fix="name the reverse proxies' addresses, comma-separated, e.g. 127.0.0.1 or "
                                "10.0.0.0/8, or leave it empty when no proxy is in front") from None


def exposure_warning(host: str, auth: tuple[str, str] | None) -> str | None:
    if host in LOOPBACK or auth is not None:
        return None
    return (f"WARNING: serving on {host} without authentication: anyone who can reach this port can run the model "
            "and read, change or delete every stored run. Add --auth USER:PASSWORD, or bind to 127.0.0.1.")


def check_model_offline(spec: str) -> None:
    """Refuse a model that would have to be downloaded now (the app never downloads at run time)."""
    from explorer.engine.embedded import embedded_spec, is_fetched
    from explorer.engine.random_models import is_random_spec, parse_random_spec

    if is_random_spec(spec):  # built from a seed, nothing to fetch (its text is noise: tests and timing only)
        parse_random_spec(spec)
        return
    model = embedded_spec(spec)
    if model is None:
        path = Path(spec).expanduser()
        if path.is_symlink() and not path.exists():
            from explorer.outputs import missing_reason

            raise ExplorerError(f"the model path {missing_reason(path)}", where="--model",
                                fix="correct or remove the link, or give the model folder or .gguf file itself")
        if not path.exists():
            from explorer.engine.hub import cached_snapshot

            if cached_snapshot(spec) is None:
                raise ExplorerError(f"model {spec!r} is not a local path nor in the Hugging Face cache, and the app "
                                    "does not download models", where="--model",
                                    fix="pass a model folder, a .gguf file, 'embedded' or 'gemma3-270m', or run "
                                        f"`python -m explorer model info --model {spec}` once with network")
        return
    if not is_fetched(model):
        flag = "" if model.key == "embedded" else f" --model {model.key}"
        raise ExplorerError(f"the embedded model {model.name} is not installed yet", where="--model",
                            fix=f"run `python -m explorer model fetch{flag}` (or `make model`) once, then start "
                                "the app")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = parse_args(argv)
        args.host = check_host(args.host)
        auth = parse_auth(args.auth)
        proxies = parse_proxies(args.forwarded_allow_ips)
        check_port(args.host, args.port)
        if args.concurrent_runs < 0:
            raise ExplorerError(f"--concurrent-runs must be at least 1, got {args.concurrent_runs}",
                                where="--concurrent-runs", fix="give e.g. --concurrent-runs 4, or leave it out")
        check_model_offline(args.model)
        from explorer.otel_live import configured_endpoint

        otlp = configured_endpoint(args.otlp)
        threads = apply_server_threads(args.threads)
        if threads and not args.quiet:
            print(f"model threads: {threads}", flush=True)
        warning = exposure_warning(args.host, auth)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        server_log()
        os.environ.setdefault("GRADIO_TEMP_DIR", str(private_temp_dir()))  # before any component exists
        from explorer.ui.page.app import AppSettings, build_app, launch

        demo = build_app(AppSettings(db=Path(args.db), model=args.model, corpus=args.corpus, preload=not args.lazy,
                                     prefix_cache=args.prefix_cache, concurrent_runs=args.concurrent_runs,
                                     retriever=args.retriever, embedder=args.embedder, attn=args.attn, otlp=otlp))
        if not args.quiet:
            print(f"runs are stored in {args.db}", flush=True)
            if otlp:
                print(f"finished runs are streamed to {otlp}", flush=True)
        try:
            launch(demo, host=args.host, port=args.port, auth=auth, quiet=args.quiet, proxies=proxies)
        except OSError as exc:  # the port was taken between the check and the start
            raise port_error(args.host, args.port, exc) from None
    except ExplorerError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0
