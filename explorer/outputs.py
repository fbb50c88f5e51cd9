"""Files and folders a user names for output: one check before any work is done, one way to write.

Every output option of every command (``run``/``fork --json``, ``report``/``sweep --out``,
``corpus convert``'s output, ``corpus build --out``, ``retrieval-metrics --out``,
``train-classifier --out``, and every ``--db``) is checked by :func:`check_output` before a model
or corpus loads, so a bad path never costs a generation. Only a regular file (or a new one) is
ever written: a device (``/dev/full``, ``/dev/null``), a named pipe, a socket, a folder where a
file is wanted, or a symbolic link to any of them is refused with what it is, because the atomic
write below would otherwise replace it with a plain file. A symbolic link loop is reported as a
loop, not as a missing file.

:func:`open_output` writes a file whole or not at all: into a temporary file beside it, renamed
over the target once complete (a symbolic link to a regular file is followed, so the link stays).
A write that fails (a full disk, a file-size limit, a disk turned read-only) becomes an
:class:`~explorer.errors.ExplorerError` naming the path and the reason, and the earlier file, if
any, is left as it was.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from explorer.errors import ExplorerError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))


def kind_of(mode: int) -> str:
    """What a file mode says a path is, in words ("a character device", "a folder", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _where(option: str, path: Path) -> str:
    return f"{option} {path}".strip()


def loop_error(path: Path, option: str = "") -> ExplorerError:
    return ExplorerError("this is a symbolic link loop: following it never reaches a file or folder",
                         where=_where(option, path), fix="correct or remove the link, or name another path")


def look(path: Path, option: str = "") -> os.stat_result | None:
    """``path``'s status, links followed; None when nothing is there (or a folder on the way is a file).

    A symbolic link loop raises :func:`loop_error`, so no caller reports it as "not found"."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise loop_error(path, option) from None
        raise ExplorerError(f"cannot look at it ({exc.strerror or exc})", where=_where(option, path),
                            fix="check the path and the permissions of its folders") from None


def missing_reason(path: Path) -> str:
    """Why ``path`` cannot be read, for a "not found" message: a loop or a dangling link says so."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop (following it never reaches a file)"
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    return "does not exist"


def _linked(path: Path, what: str) -> str:
    """``what`` said of ``path``, through the symbolic link when it is one."""
    return f"this is a symbolic link to {what}" if path.is_symlink() else f"this is {what}"


def _first_existing(path: Path, option: str) -> tuple[Path, os.stat_result | None]:
    for parent in path.parents:
        found = look(parent, option)
        if found is not None or parent.is_symlink():
            return parent, found
    return Path("."), look(Path("."), option)


def check_output(path: Path | str, option: str, *, folder: bool = False, files: Iterable[str] = (),
                 make_folders: bool = True) -> Path:
    """Refuse, before any work, an output path that could not (or must not) be written later.

    ``folder``: the output is a folder; ``files`` are the names written inside it, each of which
    must be a regular file if it is already there. ``make_folders`` False refuses a missing parent
    folder (a typo there would scatter files) instead of leaving it to be created.
    """
    path = Path(path).expanduser()
    where = _where(option, path)
    found = look(path, option)
    if found is None and path.is_symlink():
        raise ExplorerError(f"this is a symbolic link to {os.readlink(path)}, which does not exist",
                            where=where, fix="correct or remove the link, or name another path")
    if found is not None:
        if folder and not stat.S_ISDIR(found.st_mode):
            kind = kind_of(found.st_mode)
            what = "a file" if kind == "a regular file" else kind
            raise ExplorerError(f"{_linked(path, what)}, not a folder", where=where,
                                fix="name a folder (it is created if missing)")
        if not folder and stat.S_ISDIR(found.st_mode):
            raise ExplorerError(f"{_linked(path, 'a folder')}, not a file", where=where,
                                fix=f"name a file inside it, e.g. {option} {path / 'out.json'}".strip())
        if not folder and not stat.S_ISREG(found.st_mode):
            raise special_error(path, found, option)
        if not os.access(path, os.W_OK):
            raise ExplorerError(f"the {'folder' if folder else 'file'} exists and cannot be written", where=where,
                                fix="choose another path or change its permissions")
        for name in files if folder else ():
            inner = path / name
            status = look(inner, option)
            if status is not None and not stat.S_ISREG(status.st_mode):
                raise special_error(inner, status, option, inside=True)
        return path
    parent, status = _first_existing(path, option)
    if not make_folders and parent != path.parent:
        missing = path.parent
        raise ExplorerError(f"the folder {missing} does not exist", where=where,
                            fix=f"create it first (mkdir -p {missing}) or choose another path")
    if status is None:  # a dangling link on the way
        raise ExplorerError(f"{parent} is a symbolic link to {os.readlink(parent)}, which does not exist",
                            where=where, fix="correct the link or choose another path")
    if not stat.S_ISDIR(status.st_mode):
        kind = kind_of(status.st_mode)
        raise ExplorerError(f"{parent} is {'a file' if kind == 'a regular file' else kind}, not a folder",
                            where=where, fix="choose a path whose folders are folders")
    if not os.access(parent, os.W_OK):
        raise ExplorerError(f"the folder {parent} cannot be written", where=where,
                            fix="choose a path in a folder you can write to")
    return path


def special_error(path: Path, status: os.stat_result, option: str = "", *, inside: bool = False) -> ExplorerError:
    kind = kind_of(status.st_mode)
    what = f"{path} is {kind}" if inside else _linked(path, kind)
    return ExplorerError(f"{what}, not a regular file; writing the output would replace it", where=_where(option, path),
                         fix="name a regular file (or a new one)" + (", or move that entry out of the folder"
                                                                     if inside else ""))


def check_output_file(path: Path | str, option: str) -> Path:
    """An output file whose folder must already exist (``run --json``, ``fork --json``)."""
    return check_output(path, option, make_folders=False)


def check_creatable(path: Path | str, option: str, *, folder: bool = False, files: Iterable[str] = ()) -> Path:
    """An output file or folder whose missing folders are created when it is written."""
    return check_output(path, option, folder=folder, files=files)


def write_error(exc: OSError, path: Path, option: str = "") -> ExplorerError:
    """A failed write as a message naming the path, the reason and what to do."""
    fixes = {errno.ENOSPC: "free some space on that disk, or write the output to another one",
             errno.EDQUOT: "free some space within your disk quota, or write the output elsewhere",
             errno.EFBIG: "the file would exceed this system's file-size limit (ulimit -f); raise it or write "
                          "elsewhere",
             errno.EROFS: "that disk is mounted read-only; write the output to another one",
             errno.EACCES: "choose a path you can write to, or change its permissions",
             errno.EPERM: "choose a path you can write to, or change its permissions"}
    return ExplorerError(f"cannot write the file ({exc.strerror or exc})", where=_where(option, path),
                         fix=fixes.get(exc.errno or 0, "check the path, its folders, permissions and free space"))


def _target(path: Path, option: str) -> tuple[Path, os.stat_result | None]:
    """Where the bytes go: ``path``, or the regular file its symbolic link names; refused if anything else."""
    status = look(path, option)
    if status is not None and not stat.S_ISREG(status.st_mode):
        raise special_error(path, status, option)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    return target, status


@contextmanager
def open_output(path: Path | str, option: str = "", *, binary: bool = False) -> Iterator[IO]:
    """A stream whose content becomes ``path`` when the block ends without an error, and never partly."""
    path = Path(path).expanduser()
    target, status = _target(path, option)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with (open(tmp, "wb") if binary else open(tmp, "w", encoding="utf-8")) as stream:
            yield stream
        if status is not None:
            os.chmod(tmp, stat.S_IMODE(status.st_mode))
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(exc, path, option) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file(path: Path | str, data: str | bytes, option: str = "") -> Path:
    """Write ``data`` to ``path`` whole or not at all (see :func:`open_output`); returns ``path``."""
    with open_output(path, option, binary=isinstance(data, bytes)) as stream:
        stream.write(data)
    return Path(path).expanduser()


def write_text_file(path: Path, text: str, option: str) -> None:
    """Write ``text`` whole or not at all (the name the commands have long used)."""
    write_file(path, text, option)
