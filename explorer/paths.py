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
    ``data:hotpotqa/…`` for the shared benchmark data, ``corpora/demo/passages.jsonl`` for the
    project's own files, ``~/models/x.gguf`` for the user's home. A relative path is kept as
    given; an absolute path elsewhere is the user's own choice and is kept too.
    """
    given = Path(path).expanduser()
    if not given.is_absolute():
        return given.as_posix()
    resolved = given.resolve()
    for prefix, root in (("cache:", cache_root()), ("data:", shared_data_dir()), ("", PROJECT_ROOT),
                         ("~/", Path.home())):
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


def check_output_file(path: Path, option: str) -> Path:
    """Refuse, before any work is done, an output file that could not be written later.

    Checked: the path is not a folder, its folder exists (a missing one is not created behind
    the user's back, since a typo there would scatter files), and both can be written.
    """
    from explorer.errors import ExplorerError

    path = Path(path).expanduser()
    if path.is_dir():
        raise ExplorerError("this is a folder, not a file", where=f"{option} {path}",
                            fix=f"name a file inside it, e.g. {option} {path / 'trace.json'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise ExplorerError(f"the folder {parent} does not exist", where=f"{option} {path}",
                            fix=f"create it first (mkdir -p {parent}) or choose another path")
    if not parent.is_dir():
        raise ExplorerError(f"{parent} is a file, not a folder", where=f"{option} {path}",
                            fix="choose a path inside a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise ExplorerError("the file exists and cannot be written", where=f"{option} {path}",
                            fix="choose another path or change its permissions")
    if not path.exists() and not os.access(parent, os.W_OK):
        raise ExplorerError(f"the folder {parent} cannot be written", where=f"{option} {path}",
                            fix="choose a path in a folder you can write to")
    return path


def write_text_file(path: Path, text: str, option: str) -> None:
    """Write ``text`` whole or not at all (a temporary file renamed over the target)."""
    from explorer.errors import ExplorerError

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ExplorerError(f"cannot write the file ({exc.strerror or exc})", where=f"{option} {path}",
                            fix="check the path, free space and permissions") from exc


def check_creatable(path: Path, option: str, *, folder: bool = False) -> Path:
    """Refuse a path that could not be created later: under a file, or in a folder that cannot be written.

    Missing folders are fine (the caller creates them); ``folder=True`` also refuses ``path``
    being an existing file, where a folder is wanted.
    """
    from explorer.errors import ExplorerError

    path = Path(path).expanduser()
    if folder and path.exists() and not path.is_dir():
        raise ExplorerError("this is a file, not a folder", where=f"{option} {path}",
                            fix="name a folder (it is created if missing)")
    if not folder and path.is_dir():
        raise ExplorerError("this is a folder, not a file", where=f"{option} {path}", fix="name a file inside it")
    for candidate in (path.parents if not folder or not path.exists() else [path]):
        if candidate.exists():
            if not candidate.is_dir():
                raise ExplorerError(f"{candidate} is a file, not a folder", where=f"{option} {path}",
                                    fix="choose a path whose folders are folders")
            if not os.access(candidate, os.W_OK):
                raise ExplorerError(f"the folder {candidate} cannot be written", where=f"{option} {path}",
                                    fix="choose a folder you can write to")
            break
    return path
