"""Loading a corpus: any supported file or folder (or a named corpus) into passages of at most 100 words.

A corpus is read once, by a streaming build, into a passage store on disk
(:mod:`explorer.retrieval.passage_store`) and then opened memory-mapped: the process holds
offsets and id hashes, never the text, so the DPR Wikipedia dump (21M passages) opens in
milliseconds like the demo corpus does. The store is keyed by the source's path, size, format
and word limit, and records the source's modification time and a hash of its bytes: an unchanged
file opens its store at once, a touched one (same bytes, new time) is hashed once and keeps its
store, an edited one is read again. A file that turns out to be malformed on line 90,000 raises a
:class:`CorpusError` and nothing half-read is ever indexed.

The corpus carries a fingerprint (a hash of every passage's id, title and text, which is the
hash of the store's records file) that keys the BM25 and dense index caches: the same passages
give the same index, whatever file they came from.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError
from explorer.paths import DEMO_CORPUS_DIR, cache_dir
from explorer.retrieval.building import slug
from explorer.retrieval.corpus import (
    KNOWN_CORPORA,
    Corpus,
    PooledFiles,
    checked,
    collect_documents,
    corpus_from_documents,
    corpus_of,
    fingerprint_passages,
    store_key,
)
from explorer.retrieval.formats import FORMATS, open_documents
from explorer.retrieval.passage_store import STORE_VERSION, build_store
from explorer.retrieval.splitter import MAX_WORDS, Document

log = logging.getLogger("explorer.corpus")

#: What a corpus is and how documents held in memory become one live in :mod:`explorer.retrieval.corpus`;
#: they are named here too, beside loading, where callers have found them.
__all__ = ["DEMO_PASSAGES", "KNOWN_CORPORA", "NAMED_CORPORA", "Corpus", "PooledFiles", "collect_documents",
           "corpus_from_documents", "fingerprint_passages", "load_corpus", "resolve_corpus_path", "source_stamp"]

Progress = Callable[[str], None]
NAMED_CORPORA = ("demo", "benchmark")
DEMO_PASSAGES = DEMO_CORPUS_DIR / "passages.jsonl"


def source_stamp(path: Path) -> tuple:
    """What tells cheaply that a corpus on disk may have changed: size and mtime of the file, or of every
    file in a folder (a changed stamp is then settled by :func:`source_digest`)."""
    try:
        if path.is_dir():
            return tuple(sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                                for p in path.rglob("*.txt") if p.is_file()))
        stat = path.stat()
        return (stat.st_size, stat.st_mtime_ns)
    except OSError:
        return ()


def _sizes(path: Path, stamp: tuple) -> Any:
    """The stamp without its times: what keys a store (a file touched but not changed keeps its store)."""
    return [list(entry[:2]) for entry in stamp] if path.is_dir() else (stamp[:1] if stamp else [])


def source_digest(path: Path) -> str:
    """A hash of the source's bytes (of every .txt file with its name, for a folder): about a second per
    GB, read only when a store is built or when the source's time changed and its size did not."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*.txt") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(f"\x1e{file.relative_to(path).as_posix()}\x1f".encode())
        try:
            with open(file, "rb") as stream:
                for block in iter(lambda stream=stream: stream.read(1 << 24), b""):
                    digest.update(block)
        except OSError as exc:
            raise CorpusError(f"cannot read the file ({exc.strerror or exc})", where=str(file),
                              fix="check the path and its permissions") from exc
    return digest.hexdigest()[:32]


def _reuse_touched(folder: Path, path: Path, stamp: tuple, progress: Progress | None) -> None:
    """A complete store whose source has another modification time than when it was built: kept (its
    manifest given the new time) when the source's bytes are the same, removed to be rebuilt when not."""
    import shutil

    from explorer.retrieval.building import read_json, write_json_atomic
    from explorer.retrieval.passage_store import MANIFEST_FILE, store_is_complete

    if not store_is_complete(folder):
        return
    manifest = read_json(folder / MANIFEST_FILE) or {}
    if manifest.get("stamp") == json.loads(json.dumps(stamp)):
        return
    if manifest.get("source_digest") and manifest["source_digest"] == source_digest(path):
        write_json_atomic(folder / MANIFEST_FILE, {**manifest, "stamp": stamp})
        if progress:
            progress(f"{path.name}: its modification time changed and its content did not; the passage store "
                     "is kept")
        return
    log.info("the content of %s changed since its passage store was built; rebuilding it", path)
    shutil.rmtree(folder, ignore_errors=True)


def _input_bytes(path: Path, stamp: tuple) -> int:
    if path.is_dir():
        return sum(entry[1] for entry in stamp)
    size = int(stamp[0]) if stamp else 0
    return size * 4 if path.name.lower().endswith(".gz") else size  # text compresses about 4:1


def resolve_corpus_path(path_or_name: str | Path) -> tuple[str, Path]:
    """(name, path) for 'demo', 'benchmark' (built on demand), a fetched file's name (``wikipedia``) or a path."""
    spec = str(path_or_name)
    if spec == "demo":
        return "demo", DEMO_PASSAGES
    if spec == "benchmark":
        from explorer.retrieval.benchmark import ensure_benchmark_corpus

        return "benchmark", ensure_benchmark_corpus().corpus_path
    path = Path(spec).expanduser()
    fetched = fetched_corpus(spec) if not path.exists() and "/" not in spec else None
    if fetched is not None:
        return fetched
    refuse_broken_link(path)
    if not path.exists():
        raise CorpusError(f"no corpus named '{spec}' and no such file or folder", where="corpus",
                          fix=f"use one of {', '.join(NAMED_CORPORA)}, or the path of a corpus file or folder "
                              f"({', '.join(FORMATS)})")
    return (path.name if path.is_dir() else path.name.split(".")[0]) or str(path), path.resolve()


def refuse_broken_link(path: Path) -> None:
    """A corpus path that is a link to nothing is refused by name, before it reads as "no such corpus"."""
    if path.is_symlink() and not path.exists():
        from explorer.outputs import missing_reason

        raise CorpusError(f"the corpus path {missing_reason(path)}", where=str(path),
                          fix="correct or remove the link, or give the corpus file itself")


def fetched_corpus(spec: str) -> tuple[str, Path] | None:
    """(name, path) of a fetchable file named as a corpus: ``wikipedia`` (DPR's passages), or a question set
    whose records carry their paragraphs (``hotpotqa``: its distractors and gold paragraphs); None for other names.

    Looked up in the shared data folder, then among the fetched files; absent, the error says how to fetch it."""
    from explorer.fetching.catalog import entry, fetch_hint, find_file

    item = entry(spec)
    if item is None:
        return None
    candidates = [item.path]
    if item.path.endswith(".gz"):
        candidates.append(item.path[: -len(".gz")])  # a copy unpacked by hand reads the same
    found = find_file(candidates)
    if found is None:
        from explorer.paths import data_dirs

        raise CorpusError(f"the corpus '{item.name}' ({item.title}) has not been fetched (looked in "
                          f"{', '.join(str(d) for d in data_dirs())})", where="corpus", fix=fetch_hint(item.name))
    return item.name, found.resolve()


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def load_corpus(path_or_name: str | Path, fmt: str | None = None, *, max_words: int = MAX_WORDS,
                show_progress: bool = False, progress: Progress | None = None,
                follows: tuple[str, ...] = ("bm25",)) -> Corpus:
    """A corpus cut into passages of at most ``max_words`` words, from its passage store (built on first use).

    ``progress`` (or ``show_progress``: messages on stderr) turns on the build's progress bar, with
    its rate and time left; an already built store opens without any. ``follows`` names the indexes
    built from the store next (``bm25``, ``dense``): a new store is refused up front when the disk
    cannot hold it and them."""
    name, path = resolve_corpus_path(path_or_name)
    if progress is None and show_progress:
        progress = _stderr
    stamp = source_stamp(path)
    key = store_key({"source": str(path), "sizes": _sizes(path, stamp), "format": fmt, "max_words": max_words,
                "version": STORE_VERSION})
    source_hash = hashlib.blake2b(str(path).encode(), digest_size=3).hexdigest()
    folder = cache_dir("passages") / f"{slug(name)}-{source_hash}-{key}"
    _reuse_touched(folder, path, stamp, progress)
    info: dict[str, Any] = {"name": name, "source": str(path), "format": fmt, "key": key, "stamp": stamp}

    def documents() -> Iterator[Document]:
        detected, docs = open_documents(path, fmt, notes=info.setdefault("read", {}))
        info["format"] = detected
        return checked(docs)

    def digest() -> str:
        info["source_digest"] = source_digest(path)
        return info["source_digest"]

    store = build_store(folder, key, documents, info, max_words=max_words, progress=progress,
                        input_bytes=_input_bytes(path, stamp), label=path.name, source_digest=digest,
                        follows=follows)
    _prune_stale_stores(folder, source_hash, name)
    return corpus_of(name, store, path)


def _prune_stale_stores(current: Path, source_hash: str, name: str) -> None:
    """Stores of earlier contents of the same source file are dead once a newer one is built."""
    import shutil

    for other in current.parent.glob(f"{slug(name)}-{source_hash}-*"):
        if other != current and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
