"""Index folders in the cache, written and pruned the same way by every retriever (BM25, dense).

A folder is written under a temporary name and renamed into place, so a reader never sees half
an index; a full or read-only cache only costs the reuse (the index stays in memory). Folders of
earlier contents of the same corpus file (same name prefix, another passage fingerprint) are
removed after a store; folders of the same passages under other settings stay, being still valid.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def store_folder(final: Path, write: Callable[[Path], None], meta: dict[str, Any], meta_file: str,
                 what: str) -> bool:
    """Build ``final`` through ``write(tmp)`` plus ``meta`` as JSON in ``meta_file``; True when stored."""
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        (tmp / meta_file).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same index first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:  # a full or read-only cache must not stop retrieval
        log.warning("could not store the %s in %s: %s", what, final, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True


def prune_stale(final: Path, key: str, fingerprint: str, meta_file: str) -> None:
    """Remove the folders beside ``final`` of the same corpus file whose passages differ from ``fingerprint``."""
    prefix = final.name[: -len(key)]
    for other in final.parent.glob(f"{prefix}*"):
        if other == final or not other.is_dir():
            continue
        try:
            stale = json.loads((other / meta_file).read_text(encoding="utf-8")).get("fingerprint") != fingerprint
        except (OSError, ValueError):
            stale = True
        if stale:
            shutil.rmtree(other, ignore_errors=True)


def load_stored(path: Path, meta_file: str, what: str, read: Callable[[dict[str, Any]], T]) -> T | None:
    """What ``read(meta)`` makes of the folder at ``path``, or None when there is nothing usable there.

    A folder without its meta file is a leftover and is removed; a folder that ``read`` rejects
    (it raises: other passages, another model, arrays that do not fit) or cannot read is removed
    too, with a warning, so the caller rebuilds it instead of failing the run."""
    if not (path / meta_file).is_file():
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        return None
    try:
        return read(json.loads((path / meta_file).read_text(encoding="utf-8")))
    except Exception as exc:  # damaged in any way: rebuild rather than fail
        log.warning("rebuilding the %s at %s (%s)", what, path, exc)
        shutil.rmtree(path, ignore_errors=True)
        return None
