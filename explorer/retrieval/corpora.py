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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError, ExplorerError, check_text
from explorer.paths import DEMO_CORPUS_DIR, cache_dir
from explorer.retrieval.base import Passage
from explorer.retrieval.building import slug
from explorer.retrieval.formats import FORMATS, open_documents
from explorer.retrieval.passage_store import STORE_VERSION, PassageStore, build_store
from explorer.retrieval.splitter import MAX_WORDS, Document, content_id

log = logging.getLogger("explorer.corpus")

Progress = Callable[[str], None]
NAMED_CORPORA = ("demo", "benchmark")
DEMO_PASSAGES = DEMO_CORPUS_DIR / "passages.jsonl"
#: Corpora whose size is known, by file name without extensions: ``corpus info`` and every trace's
#: corpus facts compare the passages read with it (a truncated download shows at once).
KNOWN_CORPORA = {"psgs_w100": 21_015_324}


@dataclass
class Corpus:
    """Passages ready to index (a memory-mapped store), with where they came from and how they were read."""

    name: str
    store: PassageStore
    source: Path
    format: str
    documents: int
    skipped: int = 0  # documents with no words, which give no passage

    @property
    def passages(self) -> PassageStore:
        """Every passage, in corpus order: indexable, sliceable and iterable, read from disk on demand."""
        return self.store

    @property
    def fingerprint(self) -> str:
        return self.store.fingerprint

    def passage(self, passage_id: str) -> Passage | None:
        return self.store.passage(passage_id)

    def row_of(self, passage_id: str) -> int | None:
        """The passage's position in corpus order (what indexes store), or None."""
        return self.store.row_of(passage_id)

    def passages_at(self, rows: Iterable[int]) -> list[Passage]:
        """The passages at these positions (a page of search results), read from disk."""
        return self.store.at(list(rows))

    def __len__(self) -> int:
        return len(self.store)

    def word_stats(self) -> dict[str, float]:
        """Words per passage: min, mean, median, max (what ``corpus info`` reports)."""
        words = self.store.manifest.get("words") or {}
        return {k: words.get(k, 0) for k in ("min", "mean", "median", "max")}

    @property
    def expected_passages(self) -> int | None:
        """The passage count of a known corpus (DPR's psgs_w100: 21,015,324), else None."""
        return KNOWN_CORPORA.get(self.source.name.split(".")[0])


def fingerprint_passages(passages: Iterable[Passage]) -> str:
    """A content hash over ids, titles and texts, in order (separators keep fields from running together)."""
    digest = hashlib.blake2b(digest_size=16)
    for p in passages:
        digest.update(f"{p.id}\x1f{p.title}\x1f{p.text}\x1e".encode())
    return digest.hexdigest()


def collect_documents(docs: Iterable[Document], *, show_progress: bool = False,
                      desc: str = "reading") -> list[Document]:
    """All documents, with duplicates dropped.

    Paragraphs without an id of their own carry a content id, so a paragraph repeated across
    questions is kept once, silently. A repeated *explicit* id with the same title and text is
    kept once too, with a warning naming the ids (a file holding the same records twice is usually
    a mistake: the passage count says fewer than its lines); with different content it is an
    error, because passages and gold labels are looked up by id.
    """
    from tqdm import tqdm

    out: list[Document] = []
    seen: dict[str, int] = {}
    repeated: dict[str, list[str]] = {}
    for doc in tqdm(docs, desc=desc, unit=" docs", disable=not show_progress, leave=False, delay=0.5):
        index = seen.get(doc.id)
        if index is None:
            _check_text(doc)
            seen[doc.id] = len(out)
            out.append(doc)
            continue
        first = out[index]
        if first.title.split() != doc.title.split() or first.text.split() != doc.text.split():
            raise CorpusError(f"id '{doc.id}' is used again for a different passage (first at {first.where})",
                              where=doc.where, fix="give every passage its own id")
        if doc.id != content_id(doc.title, doc.text):
            repeated.setdefault(doc.id, [first.where]).append(doc.where)
    if repeated:
        shown = "; ".join(f"'{k}' at {', '.join(v)}" for k, v in list(repeated.items())[:5])
        log.warning("%d passage id(s) appear more than once with the same text, each kept once: %s%s",
                    len(repeated), shown, " ..." if len(repeated) > 5 else "")
    return out


def _check_text(doc: Document) -> None:
    """A passage with a lone surrogate (a JSON ``\\udcff`` escape) could be neither stored in a trace nor shown."""
    for field_name, text in (("id", doc.id), ("title", doc.title), ("text", doc.text)):
        try:
            check_text(text, doc.where)
        except ExplorerError as exc:
            raise CorpusError(f"the passage's {field_name} holds {exc.what.removeprefix('the text holds ')}",
                              where=doc.where, fix="re-save the file as valid UTF-8 text") from None


def checked(docs: Iterable[Document]) -> Iterator[Document]:
    """The documents, each refused when its text could be neither stored nor shown (:func:`_check_text`)."""
    for doc in docs:
        _check_text(doc)
        yield doc


def _key(payload: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(payload, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def _corpus(name: str, store: PassageStore, source: Path) -> Corpus:
    m = store.manifest
    return Corpus(name=name, store=store, source=source, format=str(m.get("format") or ""),
                  documents=int(m.get("documents", 0)), skipped=int(m.get("skipped", 0)))


def corpus_from_documents(name: str, docs: list[Document], *, source: Path, fmt: str,
                          max_words: int = MAX_WORDS) -> Corpus:
    """A corpus of documents already in memory (a pooled benchmark, a user's pool), stored like any other."""
    digest = hashlib.blake2b(digest_size=12)
    for doc in docs:
        digest.update(f"{doc.id}\x1f{doc.title}\x1f{doc.text}\x1e".encode())
    key = _key({"documents": digest.hexdigest(), "count": len(docs), "format": fmt, "max_words": max_words,
                "version": STORE_VERSION})
    folder = cache_dir("passages") / f"{slug(name)}-mem-{key}"
    info = {"name": name, "source": str(source), "format": fmt, "key": key}
    store = build_store(folder, key, lambda: checked(docs), info, max_words=max_words, label=name)
    return _corpus(name, store, source)


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
    key = _key({"source": str(path), "sizes": _sizes(path, stamp), "format": fmt, "max_words": max_words,
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
    return _corpus(name, store, path)


def _prune_stale_stores(current: Path, source_hash: str, name: str) -> None:
    """Stores of earlier contents of the same source file are dead once a newer one is built."""
    import shutil

    for other in current.parent.glob(f"{slug(name)}-{source_hash}-*"):
        if other != current and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


class PooledFiles:
    """The files of a pooled corpus folder (``self.folder``): the corpus, its gold ids, its manifest."""

    folder: Path

    @property
    def corpus_path(self) -> Path:
        return self.folder / "corpus.jsonl"

    @property
    def gold_path(self) -> Path:
        return self.folder / "gold.json"

    @property
    def manifest_path(self) -> Path:
        return self.folder / "manifest.json"
