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


def cache_dir(*parts: str) -> Path:
    """A folder under the user cache directory, created on demand."""
    base = os.environ.get("EXPLORER_CACHE")
    if base:
        root = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "dynamic-rag-explorer"
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_db_path() -> Path:
    """The SQLite file that stores runs unless ``--db`` or ``EXPLORER_DB`` says otherwise."""
    env = os.environ.get("EXPLORER_DB")
    return Path(env) if env else cache_dir() / "runs.sqlite"


# The output checks and the atomic writer live in explorer.outputs; these names stay importable from here.
from explorer.outputs import check_creatable, check_output_file, write_text_file  # noqa: E402,F401
