"""One live process per evaluation: a lock file beside the run database, per evaluation name.

Two processes running the same evaluation would both do every run (each sees the other's runs
only once they are written) and write each other's runs twice. The lock is an exclusive
``flock`` on ``<db>.locks/<name>.lock``: the kernel releases it when its process ends in any
way, so a crash can never leave an evaluation locked for good. The file also says who holds it
(pid, host, start time, command), which is what a refused process shows the user.

A file left by a process that crashed (killed, power loss) still names that process; the next
run finds the lock free, sees from the file that its last holder did not end cleanly, says so,
and takes the lock over. On a system without ``fcntl`` the same file is created exclusively and
a holder whose pid is no longer alive on this host counts as crashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from explorer.errors import ExplorerError

try:
    import fcntl
except ImportError:  # not a POSIX system
    fcntl = None  # type: ignore[assignment]


def lock_path(db_path: Path | str, name: str) -> Path:
    """Where the lock of evaluation ``name`` of database ``db_path`` lives."""
    db = Path(db_path).expanduser().resolve()
    safe = "".join(ch if ch.isalnum() or ch in "-_.+" else "_" for ch in name)[:80] or "evaluation"
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]  # names differing only in odd characters stay apart
    return db.parent / f"{db.name}.locks" / f"{safe}-{digest}.lock"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _holder_text(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"process {info.get('pid', '?')} on {info.get('host', '?')} (started {when})"


class EvaluationLock:
    """Held while an evaluation runs; ``with EvaluationLock(db, name): ...`` or acquire() / release()."""

    def __init__(self, db_path: Path | str, name: str) -> None:
        self.name = name
        self.path = lock_path(db_path, name)
        self.stale: dict[str, Any] | None = None  # the crashed holder's record, when one was cleared
        self._fd: int | None = None

    # -- acquiring -----------------------------------------------------------------------------
    def acquire(self) -> EvaluationLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            self._acquire_exclusive()
        else:
            self._acquire_flock()
        return self

    def _refuse(self, holder: dict[str, Any]) -> ExplorerError:
        return ExplorerError(
            f"evaluation {self.name!r} is already being run by {_holder_text(holder)}",
            fix="wait for that run to finish (or stop it; it resumes where it stopped), or run under another --name. "
                f"If no such process is running, delete the lock file {self.path}")

    def _acquire_flock(self) -> None:
        assert fcntl is not None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the folder was just removed by a process that released the last lock
                self.path.parent.mkdir(parents=True, exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read(fd)
                os.close(fd)
                raise self._refuse(holder) from None
            # The file may have been removed (released) between open and flock: lock the file that is there now.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = _read(fd)
        if previous.get("pid"):  # a holder that never released: it crashed (the kernel dropped its lock)
            self.stale = previous
        self._fd = fd
        _write(fd, _me(self.name))

    def _acquire_exclusive(self) -> None:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                continue
            except FileExistsError:
                holder = _read_path(self.path)
                same_host = holder.get("host") == socket.gethostname()
                if same_host and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"]):
                    self.stale = holder
                    self.path.unlink(missing_ok=True)
                    continue
                raise self._refuse(holder) from None
            self._fd = fd
            _write(fd, _me(self.name))
            return
        raise self._refuse(_read_path(self.path))

    # -- releasing -----------------------------------------------------------------------------
    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # before unlocking: nobody can lock this file after we let go
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        try:
            self.path.parent.rmdir()  # leave no empty folder beside the database
        except OSError:
            pass  # other evaluations' locks are in it

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> EvaluationLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def stale_note(self) -> str | None:
        """A line for the user when a crashed run's lock was cleared, else None."""
        if self.stale is None:
            return None
        alive = isinstance(self.stale.get("pid"), int) and pid_alive(self.stale["pid"]) \
            and self.stale.get("host") == socket.gethostname()
        how = "" if alive else ", which is no longer running"
        return (f"cleared the stale lock of evaluation {self.name!r} left by {_holder_text(self.stale)}{how}; "
                "its finished runs are kept and this run resumes after them")


def _me(name: str) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "evaluation": name,
            "command": " ".join(sys.argv)[:500]}


def _read(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 65536)
        value = json.loads(data.decode("utf-8")) if data.strip() else {}
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _read_path(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8") or "{}")
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(fd: int, info: dict[str, Any]) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(info).encode("utf-8"))
    os.fsync(fd)
