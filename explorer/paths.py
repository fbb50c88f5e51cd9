"""Where the explorer keeps its caches and finds the project's files.

Caches (the converted embedded model, BM25 indexes, the trained DR-RAG classifier) live in a
user cache directory, never in the repository, so a clone stays small and a second start is
fast. ``EXPLORER_CACHE`` overrides the location (tests point it at a temporary folder).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPORA_DIR = PROJECT_ROOT / "corpora"
DEMO_CORPUS_DIR = CORPORA_DIR / "demo"
ASSETS_DIR = PROJECT_ROOT / "assets"


def shared_data_dir() -> Path:
    """The benchmark data folder beside the project (``../shared/data``), or ``EXPLORER_DATA``."""
    env = os.environ.get("EXPLORER_DATA")
    return Path(env) if env else PROJECT_ROOT.parent / "shared" / "data"


def fetched_data_dir() -> Path:
    """Where ``explorer data fetch`` puts benchmark files: ``EXPLORER_DOWNLOADS``, else the cache's ``data/``.

    It is searched after :func:`shared_data_dir`, so a folder a user keeps (or a lab shares) wins
    over a download, and a fresh clone without either finds what it fetched. Not created here."""
    env = os.environ.get("EXPLORER_DOWNLOADS")
    return Path(env) if env else cache_root() / "data"


def data_dirs() -> list[Path]:
    """The folders benchmark files are looked up in, in order: the shared data folder, then the fetched one."""
    return [shared_data_dir(), fetched_data_dir()]


def cache_root() -> Path:
    """The user cache directory (``EXPLORER_CACHE``, else the XDG cache), not created here."""
    base = os.environ.get("EXPLORER_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dynamic-rag-explorer"


def cache_dir(*parts: str) -> Path:
    """A folder under the user cache directory, created on demand."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def portable_path(path: str | Path) -> str:
    """How a trace names a file or folder, without the absolute path of the machine that ran it.

    Traces travel (the app ships recorded ones, runs are exported and shared), so a path inside
    a known place is named relative to it: ``cache:indexes/demo-…`` for the explorer's cache,
    ``data:hotpotqa/…`` for the shared benchmark data, ``fetched:hotpotqa/dev.jsonl`` for what
    ``explorer data fetch`` downloaded, ``corpora/demo/passages.jsonl`` for the
    project's own files, ``~/models/x.gguf`` for the user's home. A relative path is kept as
    given; an absolute path elsewhere is the user's own choice and is kept too.
    """
    given = Path(path).expanduser()
    if not given.is_absolute():
        return given.as_posix()
    resolved = given.resolve()
    for prefix, root in (("fetched:", fetched_data_dir()), ("cache:", cache_root()), ("data:", shared_data_dir()),
                         ("", PROJECT_ROOT), ("~/", Path.home())):
        try:
            inside = resolved.relative_to(root.expanduser().resolve())
        except (ValueError, OSError):
            continue
        return prefix + inside.as_posix() if inside.parts else (prefix.rstrip("/:") or ".")
    return str(path)


def default_db_path() -> Path:
    """The SQLite file that stores runs unless ``--db`` or ``EXPLORER_DB`` says otherwise."""
    env = os.environ.get("EXPLORER_DB")
    return Path(env) if env else cache_dir() / "runs.sqlite"


# The output checks and the atomic writer live in explorer.outputs; these names stay importable from here.
from explorer.outputs import check_creatable, check_output_file, write_text_file  # noqa: E402,F401
