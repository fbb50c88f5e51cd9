"""Fetching one catalogue file: resumable, checked against the checksum its host states, its terms kept beside it.

The transfer is huggingface_hub's (its metadata request and its streaming download, which honour
``HF_ENDPOINT``, proxies and ``HF_HUB_DISABLE_PROGRESS_BARS`` and draw the progress bar). What
is added here is what a multi-gigabyte benchmark file needs across processes:

- the bytes arrive in ``FILE.part`` beside the destination, with ``FILE.part.json`` saying which
  version of the file (its ETag and size) they belong to, so a download stopped by Ctrl-C, a
  dropped connection or a killed job continues from where it stopped on the next run (an HTTP
  Range request) instead of starting over; a part of another version is thrown away;
- the finished file is checked against the checksum the host states before it is moved into
  place: the hub's LFS SHA-256 (``X-Linked-Etag``), the git blob SHA-1 of a small hub file, an
  S3 MD5 ETag; a gzip file whose host states none is read to the end, which checks its CRC.
  A mismatch deletes what arrived and says so;
- ``FILE.source.json`` records the licence, the original release, the exact origin (hub commit)
  and the SHA-256 of what arrived.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from explorer.errors import ExplorerError
from explorer.fetching.catalog import FLASHRAG_LICENCE, DataFile, fetched_path

Say = Callable[[str], None]
HUB = "https://huggingface.co"


class FetchError(ExplorerError):
    """A file could not be fetched (no network, offline mode, not at its source, a checksum mismatch)."""


@dataclass(frozen=True)
class RemoteFile:
    """What the host says about a file before it is downloaded."""

    url: str  # where the bytes are fetched from (the hub's redirect target for a large file)
    etag: str | None
    size: int | None
    commit: str | None  # the hub commit the file was resolved at (None for a plain URL)


def hub_endpoint() -> str:
    """The hub to fetch from: ``HF_ENDPOINT`` (a mirror, or a local stand-in in tests), read at each call."""
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def offline() -> bool:
    """Whether the user asked for no network (``HF_HUB_OFFLINE``, read now, as huggingface_hub spells it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def source_url(item: DataFile) -> str:
    """The address asked for the file: the hub's resolve URL of its repository path, or its plain URL."""
    if item.repo:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(item.repo, item.path, repo_type="dataset", revision=item.revision, endpoint=hub_endpoint())
    return str(item.url)


def _host(url: str) -> str:
    return urlsplit(url).netloc or url


def _copy_hint(item: DataFile) -> str:
    return (f"copy {item.path} from a machine that has it to {fetched_path(item)} (or into a folder named by "
            "EXPLORER_DATA)")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The network failures of the HTTP client huggingface_hub uses (its module name changed across versions)."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx", "requests"):
        try:
            lib = __import__(module)
        except ImportError:
            continue
        for name in ("TransportError", "ConnectionError", "Timeout"):
            cls = getattr(lib, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                errors.append(cls)
    return tuple(errors)


def _unreachable(item: DataFile, url: str, exc: BaseException) -> FetchError:
    return FetchError(f"cannot reach {_host(url)} to fetch {item.name} ({type(exc).__name__}: {exc})",
                      fix="check the network connection (and HTTPS_PROXY behind a proxy); HF_ENDPOINT names a mirror "
                          f"of the Hugging Face hub; or {_copy_hint(item)}")


def _offline_error(item: DataFile, url: str) -> FetchError:
    return FetchError(f"offline mode is on (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '1')}), so {_host(url)} "
                      f"is not asked for {item.name}",
                      fix=f"run `HF_HUB_OFFLINE=0 python -m explorer data fetch {item.name}` on a machine with "
                          f"network, or {_copy_hint(item)}")


def remote_file(item: DataFile) -> RemoteFile:
    """The file's ETag, size, hub commit and download address, from one HEAD request."""
    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = source_url(item)
    if offline():
        raise _offline_error(item, url)
    try:
        meta = get_hf_file_metadata(url, token=False, endpoint=hub_endpoint() if item.repo else None)
    except OfflineModeIsEnabled:
        raise _offline_error(item, url) from None
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise FetchError(f"{item.origin} is not at {_host(url)} ({type(exc).__name__})",
                         fix="the collection may have moved the file: see its page on the hub, download the file "
                             f"by hand, and {_copy_hint(item)}") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        raise FetchError(f"{_host(url)} answered HTTP {status} for {item.name}",
                         fix="try again later (the host may be busy), or " + _copy_hint(item)) from None
    except _transport_errors() as exc:
        raise _unreachable(item, url, exc) from None
    if item.repo and not meta.commit_hash:
        raise FetchError(f"{_host(url)} answered without an X-Repo-Commit header, so it is not a Hugging Face hub",
                         fix="point HF_ENDPOINT at the hub or a mirror of it (or unset it)")
    return RemoteFile(url=meta.location or url, etag=meta.etag, size=meta.size, commit=meta.commit_hash)


def stated_checksum(etag: str | None) -> tuple[str, str] | None:
    """(algorithm, hex digest) the host's ETag states for the file's bytes, or None when it states none we know.

    A hub LFS file's ETag is the SHA-256 of its bytes; a small hub file's is its git blob SHA-1;
    an object stored in S3 in one part has the MD5 of its bytes (a multipart ETag ends in -N)."""
    value = (etag or "").strip().strip('"').lower()
    for algorithm, length in (("sha256", 64), ("git-sha1", 40), ("md5", 32)):
        if re.fullmatch(f"[0-9a-f]{{{length}}}", value):
            return algorithm, value
    return None


def digests(path: Path) -> dict[str, str]:
    """SHA-256, git blob SHA-1 and MD5 of a file, in one read."""
    size = path.stat().st_size
    sha256, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            sha256.update(block)
            git.update(block)
            md5.update(block)
    return {"sha256": sha256.hexdigest(), "git-sha1": git.hexdigest(), "md5": md5.hexdigest()}


def gzip_intact(path: Path) -> str | None:
    """None when the gzip file reads to its end with every CRC right, else what is wrong."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 22):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        return str(exc) or type(exc).__name__
    return None


def _part_paths(target: Path) -> tuple[Path, Path]:
    return target.with_name(target.name + ".part"), target.with_name(target.name + ".part.json")


def _resume_from(part: Path, state: Path, remote: RemoteFile) -> int:
    """Bytes already fetched of this version of the file; a part of another version (or none) is cleared."""
    try:
        saved = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None
    have = part.stat().st_size if part.is_file() else 0
    same = isinstance(saved, dict) and saved.get("etag") == remote.etag and saved.get("size") == remote.size
    if not same or (remote.size is not None and have > remote.size):
        part.unlink(missing_ok=True)
        have = 0
    return have


def _download(item: DataFile, remote: RemoteFile, part: Path, state: Path, say: Say) -> None:
    from huggingface_hub.file_download import http_get

    part.parent.mkdir(parents=True, exist_ok=True)
    have = _resume_from(part, state, remote)
    state.write_text(json.dumps({"etag": remote.etag, "size": remote.size, "url": remote.url}), encoding="utf-8")
    if have:
        total = f" of {remote.size:,}" if remote.size else ""
        say(f"resuming {item.name} after {have:,}{total} bytes already fetched")
    try:
        with open(part, "ab") as stream:
            http_get(remote.url, stream, resume_size=have, expected_size=remote.size,
                     displayed_filename=Path(item.path).name, headers={"user-agent": "dynamic-rag-explorer"})
    except KeyboardInterrupt:
        say(f"stopped: {part.stat().st_size:,} bytes of {item.name} kept; the same command resumes")
        raise
    except _transport_errors() as exc:
        got = part.stat().st_size if part.is_file() else 0
        raise FetchError(f"the download of {item.name} stopped after {got:,} bytes ({type(exc).__name__}: {exc})",
                         fix=f"run `python -m explorer data fetch {item.name}` again: it continues from there") \
            from None


def verify(item: DataFile, path: Path, remote: RemoteFile) -> dict[str, Any]:
    """What was checked of the arrived bytes; a mismatch deletes them and raises :class:`FetchError`."""
    found = digests(path)
    stated = stated_checksum(remote.etag)
    gz = item.path.endswith(".gz")
    size = path.stat().st_size
    problem = None
    if remote.size is not None and size != remote.size:
        problem = f"{size:,} bytes arrived, the host states {remote.size:,}"
    elif stated is not None and found[stated[0]] != stated[1]:
        problem = f"its {stated[0]} is {found[stated[0]]}, the host states {stated[1]}"
    elif stated is None and gz:
        broken = gzip_intact(path)
        problem = f"the gzip stream is damaged ({broken})" if broken else None
    if problem:
        path.unlink(missing_ok=True)
        raise FetchError(f"the fetched {item.name} does not match its source: {problem}; it was deleted",
                         fix=f"run `python -m explorer data fetch {item.name}` again; if it repeats, the host (or the "
                             "mirror HF_ENDPOINT names) serves a damaged file")
    how = stated[0] if stated else ("gzip CRC" if gz else "size only")
    return {"checked_by": how, "stated": stated[1] if stated else None, "sha256": found["sha256"], "bytes": size}


def write_about(item: DataFile, target: Path, remote: RemoteFile, checked: dict[str, Any]) -> Path:
    """``FILE.source.json`` beside the file: its licence, its source, where exactly it came from, its checksum."""
    about = {"name": item.name, "title": item.title, "kind": item.kind, "licence": item.licence,
             "source": item.source, "origin": item.origin, "url": source_url(item),
             "collection_licence": FLASHRAG_LICENCE if item.repo else None, "revision": item.revision if item.repo
             else None, "commit": remote.commit, "etag": remote.etag, **checked,
             "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = about_path(target)
    path.write_text(json.dumps(about, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def about_path(target: Path) -> Path:
    return target.with_name(target.name + ".source.json")


def fetch(item: DataFile, *, force: bool = False, say: Say = print) -> Path:
    """The file in the fetched-data folder, downloaded (or resumed) and verified first unless already there."""
    target = fetched_path(item)
    if target.is_file() and not force:
        say(f"{item.name}: already fetched ({target})")
        return target
    say(item.describe())
    remote = remote_file(item)
    part, state = _part_paths(target)
    _download(item, remote, part, state, say)
    checked = verify(item, part, remote)
    os.replace(part, target)
    state.unlink(missing_ok=True)
    write_about(item, target, remote, checked)
    say(f"{item.name}: {checked['bytes']:,} bytes, {checked['checked_by']} verified -> {target}")
    return target
