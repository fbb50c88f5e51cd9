"""What every long on-disk build shares: a lock, checkpoints, a disk-space check, a memory ledger.

The passage store, the BM25 index and the dense embedding shards of a corpus are each written by
a streaming build that may take an hour on the DPR Wikipedia dump. They follow one protocol:

- the build works in a folder beside its final place (``.building-<name>``), holding an
  exclusive lock on it (``fcntl.flock``), so a second process asking for the same index waits
  for the first instead of writing the same files;
- progress is recorded in ``checkpoint.json`` (rewritten atomically) after each finished piece
  of work, so a build killed at any moment resumes from its last checkpoint;
- before any work the free space of the folder's disk is compared with an estimate made from
  the input's size, and a build that would fill the disk is refused with the numbers;
- the manifest (which carries the content fingerprint) is the last file written, and the folder
  is renamed into place after it: a folder without a manifest is never opened as an index.

:class:`MemoryLedger` is the build's own account of the memory it holds (the arrays it
allocates, and an estimate of its Python dictionaries); builds size their chunks from a budget
and record the peak, so a test can check the ceiling without timing anything.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError

CHECKPOINT_FILE = "checkpoint.json"
LOCK_FILE = ".lock"
GIB = 1 << 30
MIB = 1 << 20


def slug(text: str) -> str:
    """A file-name-safe short form of a corpus name (cache folders are named after it)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:40] or "corpus"


def human_bytes(n: float) -> str:
    """``1.5 GB``-style sizes for messages (powers of 1024, as disk tools show them)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 when it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for entry in path.rglob("*") if path.is_dir() else ():
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            continue
    return total


def check_disk(folder: Path, needed: int, what: str, *, already: int = 0) -> None:
    """Refuse before starting when the disk holding ``folder`` has less free space than ``needed``
    bytes (less what an interrupted build already wrote there)."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    missing = max(0, needed - already)
    if missing > free:
        raise CorpusError(f"not enough free disk space to build the {what}: it needs about {human_bytes(missing)} "
                          f"more, and the disk has {human_bytes(free)} free", where=str(folder),
                          fix="free some space on that disk, or point the cache elsewhere with EXPLORER_CACHE=DIR "
                              "(a disk with room for the corpus about three times over)")


#: Files up to this size are hashed whole when an index or store is opened; larger ones at CHECK_BLOCKS
#: evenly spread blocks (the first and last included) of CHECK_BLOCK bytes: a few milliseconds either way.
WHOLE_FILE_CHECK = 32 * MIB
CHECK_BLOCKS = 16
CHECK_BLOCK = 64 << 10


def _check_spans(size: int) -> list[tuple[int, int]]:
    if size <= WHOLE_FILE_CHECK:
        return [(0, size)]
    last = size - CHECK_BLOCK
    return sorted({(last * i // (CHECK_BLOCKS - 1), CHECK_BLOCK) for i in range(CHECK_BLOCKS)})


def _span_hash(fd: int, start: int, length: int) -> str:
    digest = hashlib.sha256()
    at, end = start, start + length
    while at < end:
        block = os.pread(fd, min(1 << 24, end - at), at)
        if not block:
            break
        digest.update(block)
        at += len(block)
    return digest.hexdigest()[:16]


def file_checks(folder: Path, names: Iterable[str]) -> dict[str, Any]:
    """Per file: its size and the hashes of its check spans (the whole file when small), for the manifest."""
    out: dict[str, Any] = {}
    for name in sorted(names):
        path = folder / name
        size = path.stat().st_size
        fd = os.open(path, os.O_RDONLY)
        try:
            out[name] = {"bytes": size, "spans": [[a, n, _span_hash(fd, a, n)] for a, n in _check_spans(size)]}
        finally:
            os.close(fd)
    return out


def verify_file_checks(folder: Path, checks: dict[str, Any], what: str, fix: str) -> None:
    """Refuse files whose size or checked spans differ from the manifest's (a flipped byte in a small file, or
    in a checked block of a large one, a cut or grown file): what, where and how to rebuild."""
    for name, entry in checks.items():
        path = folder / name
        try:
            size = path.stat().st_size
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            raise CorpusError(f"the {what} file {name} is missing", where=str(path), fix=fix) from None
        try:
            if size != int(entry["bytes"]):
                raise CorpusError(f"the {what} file {name} is {size:,} bytes, {int(entry['bytes']):,} when it was "
                                  "written (a damaged file)", where=str(path), fix=fix)
            for start, length, expected in entry["spans"]:
                if _span_hash(fd, int(start), int(length)) != expected:
                    span = "its bytes" if length == size else f"its bytes {start:,} to {start + length:,}"
                    raise CorpusError(f"the {what} file {name} is damaged: {span} differ from what was written",
                                      where=str(path), fix=fix)
        finally:
            os.close(fd)


def write_manifest(folder: Path, name: str, manifest: dict[str, Any], files: Iterable[str]) -> None:
    """Write a build's manifest ``name`` with the checks of its other ``files``, as the build's last file:
    its presence marks the build complete."""
    manifest["checks"] = file_checks(folder, (f for f in files if f != name))
    write_json_atomic(folder / name, manifest)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryLedger:
    """The bytes a build holds, by name, and the peak of their sum.

    Builds register each large array (``hold``) and release it (``drop``) as its life ends;
    Python containers that grow (a vocabulary dict) are re-registered with an estimate of their
    size. The ledger is what the build's memory budget is checked against."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._held: dict[str, int] = {}
        self.current = 0
        self.peak = 0
        self.at_peak: dict[str, int] = {}  # what was held when the peak was reached

    def hold(self, name: str, nbytes: int) -> None:
        self.current += int(nbytes) - self._held.get(name, 0)
        self._held[name] = int(nbytes)
        if self.current > self.peak:
            self.peak = self.current
            self.at_peak = dict(self._held)

    def drop(self, *names: str) -> None:
        for name in names:
            self.current -= self._held.pop(name, 0)

    def hold_arrays(self, prefix: str, *arrays: Any) -> None:
        """Register numpy arrays under ``prefix`` (one entry for all of them)."""
        self.hold(prefix, sum(int(getattr(a, "nbytes", 0)) for a in arrays))


class BuildFolder:
    """The work folder of one build, its lock and its checkpoint.

    ``final`` is where the finished result goes; work happens in ``.building-<final name>``
    beside it. Entering the context takes the lock (waiting for another process that holds it);
    :meth:`finish` renames the work folder into place."""

    def __init__(self, final: Path, what: str) -> None:
        self.final = final
        self.what = what
        self.work = final.parent / f".building-{final.name}"
        self._lock_fd: int | None = None

    @contextmanager
    def locked(self, *, wait_message: Any = None) -> Iterator[BuildFolder]:
        self.work.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.work / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told and wait_message is not None:
                    wait_message(f"another process is building the {self.what} in {self.work}; waiting for it")
                    told = True
                time.sleep(0.5)
            if not self.work.exists():  # the other process finished and renamed the folder away
                os.close(fd)
                yield self
                return
        self._lock_fd = fd
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            yield self
        finally:
            self._lock_fd = None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def checkpoint(self) -> dict[str, Any]:
        return read_json(self.work / CHECKPOINT_FILE) or {}

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        write_json_atomic(self.work / CHECKPOINT_FILE, state)

    def reset(self) -> None:
        """Forget an interrupted build whose inputs changed (the lock file stays)."""
        for entry in self.work.iterdir() if self.work.is_dir() else ():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def finish(self, keep: set[str] | None = None) -> None:
        """Move the finished work folder into place (the manifest must already be in it).

        The lock file travels with it, so a process still waiting on the lock wakes up, finds the
        finished folder and opens it instead of building again."""
        (self.work / CHECKPOINT_FILE).unlink(missing_ok=True)
        if keep is not None:
            for entry in self.work.iterdir():
                if entry.name not in keep and entry.name != LOCK_FILE:
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
        if self.final.exists():
            shutil.rmtree(self.final, ignore_errors=True)
        os.rename(self.work, self.final)


def progress_bar(total: int | None, desc: str, unit: str, *, enabled: bool, initial: int = 0, scale: bool = True):
    """A tqdm bar on stderr with rate and ETA (shown only when ``enabled``)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=scale, disable=not enabled,
                leave=False, delay=0.5, smoothing=0.05, mininterval=0.5)


def prune_abandoned_builds(final: Path, prefix: str) -> None:
    """Remove interrupted builds beside ``final`` whose name starts with ``prefix`` (earlier contents of
    the same source) unless a live process holds their lock; ``final``'s own build is kept to resume."""
    own = f".building-{final.name}"
    for other in final.parent.glob(f".building-{prefix}*"):
        if other.name == own or not other.is_dir():
            continue
        try:
            fd = os.open(other / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # being built right now
        try:
            shutil.rmtree(other, ignore_errors=True)
        finally:
            os.close(fd)
