"""The passages of a corpus on disk: one file of UTF-8 records, memory-mapped offsets, an id lookup.

A corpus of 21 million passages (DPR's Wikipedia, ~13 GB) cannot be held as Python objects, so
every corpus, the three-passage test file and the demo corpus included, is read once by a
streaming build into a folder under the cache and then opened memory-mapped:

==============  ===================================================================================
records.bin     ``id \\x1f title \\x1f text \\x1e`` per passage, UTF-8, in corpus order. The bytes
                of this file are exactly what :func:`explorer.retrieval.corpora.fingerprint_passages`
                hashes, so the corpus fingerprint is the hash of the file.
offsets.i64     N + 1 int64 byte offsets of the records
words.i32       the number of words of each passage's text (``corpus info``'s statistics)
id_hash.u64     the 64-bit hashes of the passage ids, sorted, and ...
id_rows.i64     ... the row of each: ``passage(id)`` is a binary search, checked against the id
                read back from the record (so a hash collision can never return a wrong passage)
manifest.json   counts, the fingerprint, where the passages came from, and each file's size and the
                hashes of a few blocks (all of a file up to 32 MB), checked on every open; last
==============  ===================================================================================

A process holds the offsets and hashes as memory maps, never the text: opening takes
milliseconds, and the text of a passage is read (``pread``, so the file is never mapped into the
process) from the page cache when it is asked for.

The build reads the source once (any format of :mod:`explorer.retrieval.formats`), cuts each
document into passages of at most 100 words, and appends. It checkpoints every
:data:`CHECKPOINT_DOCS` documents, so a build killed half-way through a 13 GB file resumes where
it stopped (the records written so far are hashed again, which is fast; the documents before the
checkpoint are parsed but not cut again). Repeated document ids are checked at the end with
sorted hashes instead of a dictionary of every id: a repeat with the same title and text is
dropped (with a warning), a repeat with other content is refused, as before.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, overload

import numpy as np

from explorer.errors import CorpusError
from explorer.retrieval.base import Passage
from explorer.retrieval.building import (
    BuildFolder,
    check_disk,
    folder_bytes,
    human_bytes,
    peak_rss_bytes,
    progress_bar,
    prune_abandoned_builds,
    read_json,
    verify_file_checks,
    write_manifest,
)
from explorer.retrieval.splitter import MAX_WORDS, Document, content_id, piece_ids, split_text_counted

Progress = Callable[[str], None]
STORE_VERSION = 1
RECORDS_FILE = "records.bin"
OFFSETS_FILE = "offsets.i64"
WORDS_FILE = "words.i32"
ID_HASH_FILE = "id_hash.u64"
ID_ROWS_FILE = "id_rows.i64"
MANIFEST_FILE = "manifest.json"
STORE_FILES = {RECORDS_FILE, OFFSETS_FILE, WORDS_FILE, ID_HASH_FILE, ID_ROWS_FILE, MANIFEST_FILE}
# Work files of a build in progress.
ROW_HASH_FILE = "row_hash.u64"
DOCS_FILE = "docs.u64"  # per document: id hash, title hash, first row, passages (4 x uint64)
FIELD, END = "\x1f", "\x1e"
CHECKPOINT_DOCS = 200_000
FLUSH_DOCS = 20_000
READ_BLOCK = 1 << 24
log = logging.getLogger(__name__)


def id_hash(passage_id: str) -> int:
    """The 64-bit hash the store looks ids up by (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(passage_id.encode("utf-8"), digest_size=8).digest(), "little")


def _fix_for_damage(folder: Path) -> str:
    return f"delete the folder {folder} and open the corpus again to rebuild it from its source file"


class PassageStore(Sequence[Passage]):
    """Read-only passages of one built store; a Sequence, so ``store[i]``, slices and iteration work.

    Safe to share between threads: it only reads memory maps that never change."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        manifest = read_json(self.folder / MANIFEST_FILE)
        if manifest is None:
            raise CorpusError("the passage store is incomplete (no manifest: its build did not finish)",
                              where=str(self.folder), fix=_fix_for_damage(self.folder))
        if manifest.get("version") != STORE_VERSION:
            raise CorpusError(f"the passage store has format {manifest.get('version')}, this version reads "
                              f"{STORE_VERSION}", where=str(self.folder), fix=_fix_for_damage(self.folder))
        self.manifest: dict[str, Any] = manifest
        n = int(manifest["passages"])
        expected = {RECORDS_FILE: int(manifest["record_bytes"]), OFFSETS_FILE: (n + 1) * 8, WORDS_FILE: n * 4,
                    ID_HASH_FILE: n * 8, ID_ROWS_FILE: n * 8}
        for name, size in expected.items():
            path = self.folder / name
            actual = path.stat().st_size if path.is_file() else None
            if actual != size:
                state = "missing" if actual is None else f"{actual:,} bytes"
                raise CorpusError(f"the passage store's {name} is {state}, expected {size:,} bytes (the folder was "
                                  "damaged or only partly copied)",
                                  where=str(path), fix=_fix_for_damage(self.folder))
        if isinstance(manifest.get("checks"), dict):  # sizes and a few blocks of every file (all of a small one)
            verify_file_checks(self.folder, manifest["checks"], "passage store", _fix_for_damage(self.folder))
        self._n = n
        self.offsets = np.memmap(self.folder / OFFSETS_FILE, dtype=np.int64, mode="r")
        self.words = np.memmap(self.folder / WORDS_FILE, dtype=np.int32, mode="r")
        self._hashes = np.memmap(self.folder / ID_HASH_FILE, dtype=np.uint64, mode="r")
        self._rows = np.memmap(self.folder / ID_ROWS_FILE, dtype=np.int64, mode="r")
        # Records are read with pread, not mapped: a 13 GB file read through a mapping would count in
        # the process's resident memory; read this way it lives in the kernel's page cache only.
        self._fd = os.open(self.folder / RECORDS_FILE, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)
        if int(self.offsets[-1]) != expected[RECORDS_FILE] or int(self.offsets[0]) != 0:
            raise CorpusError("the passage store's offsets do not match its records", where=str(self.folder),
                              fix=_fix_for_damage(self.folder))

    # --- facts ---------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        return str(self.manifest["fingerprint"])

    @property
    def record_bytes(self) -> int:
        return int(self.manifest["record_bytes"])

    def size_bytes(self) -> int:
        return folder_bytes(self.folder)

    # --- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def _read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the records file (safe from any thread: pread has its own offset)."""
        data = os.pread(self._fd, end - start, start)
        while len(data) < end - start:  # a short read, possible for very large requests
            more = os.pread(self._fd, end - start - len(data), start + len(data))
            if not more:
                raise CorpusError("the passage store's records file is shorter than its offsets say",
                                  where=str(self.folder / RECORDS_FILE), fix=_fix_for_damage(self.folder))
            data += more
        return data

    def _record(self, row: int) -> Passage:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        pid, title, text = self._read(start, end - 1).decode("utf-8").split(FIELD, 2)
        return Passage(id=pid, title=title, text=text)

    @overload
    def __getitem__(self, index: int) -> Passage: ...

    @overload
    def __getitem__(self, index: slice) -> list[Passage]: ...

    def __getitem__(self, index: int | slice) -> Passage | list[Passage]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(self._n))]
        row = int(index)
        if row < 0:
            row += self._n
        if not 0 <= row < self._n:
            raise IndexError(f"passage row {index} out of range ({self._n:,} passages)")
        return self._record(row)

    def at(self, rows: Sequence[int] | np.ndarray) -> list[Passage]:
        """The passages at these rows (a result page), in the order given."""
        return [self._record(int(r)) for r in rows]

    def __iter__(self) -> Iterator[Passage]:
        yield from self.iter_range(0, self._n)

    def iter_range(self, start: int, stop: int) -> Iterator[Passage]:
        """Passages of rows [start, stop), decoded a block of records at a time."""
        row = start
        while row < stop:
            limit = int(self.offsets[row]) + READ_BLOCK  # about READ_BLOCK bytes of records at a time
            end = max(row + 1, min(stop, int(np.searchsorted(self.offsets, limit, side="right")) - 1))
            for record in self.records_text(row, end):
                pid, title, text = record.split(FIELD, 2)
                yield Passage(id=pid, title=title, text=text)
            row = end

    def records_text(self, start: int, stop: int) -> list[str]:
        """The raw records of rows [start, stop) as strings ``id\\x1ftitle\\x1ftext`` (builds read these)."""
        if stop <= start:
            return []
        blob = self._read(int(self.offsets[start]), int(self.offsets[stop])).decode("utf-8")
        records = blob.split(END)
        records.pop()  # the empty string after the last terminator
        if len(records) != stop - start:  # a text holding the terminator character itself
            records = [self._read(int(self.offsets[r]), int(self.offsets[r + 1]) - 1).decode("utf-8")
                       for r in range(start, stop)]
        return records

    def row_of(self, passage_id: str) -> int | None:
        """The row of the passage with this id, or None."""
        if not isinstance(passage_id, str) or not passage_id:
            return None
        key = np.uint64(id_hash(passage_id))
        at = int(np.searchsorted(self._hashes, key, side="left"))
        while at < self._n and self._hashes[at] == key:
            row = int(self._rows[at])
            start = int(self.offsets[row])
            wanted = (passage_id + FIELD).encode("utf-8")
            if self._read(start, min(start + len(wanted), int(self.offsets[row + 1]))) == wanted:
                return row
            at += 1
        return None

    def passage(self, passage_id: str) -> Passage | None:
        row = self.row_of(passage_id)
        return None if row is None else self._record(row)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Passage):
            row = self.row_of(item.id)
            return row is not None and self._record(row) == item
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PassageStore):
            return self._n == other._n and self.fingerprint == other.fingerprint
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"PassageStore({self.folder.name!r}, {self._n:,} passages)"


def store_is_complete(folder: Path) -> bool:
    return (folder / MANIFEST_FILE).is_file()


# --- the build ------------------------------------------------------------------------------------


class _Appender:
    """The work files of a store build, opened for appending after truncation to a checkpoint."""

    def __init__(self, work: Path, state: dict[str, Any]) -> None:
        self.work = work
        sizes = {RECORDS_FILE: state.get("bytes", 0), OFFSETS_FILE: state.get("rows", 0) * 8,
                 WORDS_FILE: state.get("rows", 0) * 4, ROW_HASH_FILE: state.get("rows", 0) * 8,
                 DOCS_FILE: state.get("docs", 0) * 32}
        self.files = {}
        for name, size in sizes.items():
            path = work / name
            with open(path, "ab") as stream:
                stream.truncate(size)
            self.files[name] = open(path, "ab", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self._records: list[bytes] = []
        self._offsets: list[int] = []
        self._words: list[int] = []
        self._row_hashes: list[int] = []
        self._docs: list[int] = []

    def flush(self) -> None:
        f = self.files
        f[RECORDS_FILE].write(b"".join(self._records))
        f[OFFSETS_FILE].write(np.asarray(self._offsets, dtype=np.int64).tobytes())
        f[WORDS_FILE].write(np.asarray(self._words, dtype=np.int32).tobytes())
        f[ROW_HASH_FILE].write(np.asarray(self._row_hashes, dtype=np.uint64).tobytes())
        f[DOCS_FILE].write(np.asarray(self._docs, dtype=np.uint64).tobytes())
        for stream in f.values():
            stream.flush()
        self._records, self._offsets, self._words, self._row_hashes, self._docs = [], [], [], [], []

    def close(self) -> None:
        self.flush()
        for stream in self.files.values():
            stream.close()


def _title_hash(title: str) -> int:
    return int.from_bytes(hashlib.blake2b(title.encode("utf-8"), digest_size=8).digest(), "little")


def build_store(final: Path, key: str, documents: Callable[[], Iterator[Document]], info: dict[str, Any], *,
                max_words: int = MAX_WORDS, input_bytes: int | None = None, progress: Progress | None = None,
                label: str = "", source_digest: Callable[[], str] | None = None,
                follows: tuple[str, ...] = ()) -> PassageStore:
    """The store at ``final``, built from ``documents()`` unless a complete one is already there.

    ``key`` identifies the source (its path, size, format and the word limit); ``source_digest``, the
    hash of its bytes, is taken at the start of every session of the build (after the disk check), so an
    interrupted build resumes only over the same bytes, and one under another key or content starts over.
    ``info`` goes into the manifest (name, source, format...). Refuses, before reading anything,
    when the disk cannot hold the store and the indexes built from it next (``follows``: ``bm25``,
    ``dense``), estimated from the input's size."""
    if store_is_complete(final):
        try:
            return PassageStore(final)
        except CorpusError as exc:
            log.warning("rebuilding the passage store at %s (%s)", final, exc.what)
            shutil.rmtree(final, ignore_errors=True)
    folder = BuildFolder(final, "passage store")
    _prune_other_builds(final)
    with folder.locked(wait_message=progress):
        if store_is_complete(final):  # built by the process we waited for
            return PassageStore(final)
        state = folder.checkpoint()
        parts = whole_build_bytes(input_bytes or 0, follows)
        what = " and ".join(f"{part} (about {human_bytes(n)})" for part, n in parts.items()) if len(parts) > 1 \
            else "passage store"
        resumable = str(state.get("key", "")).split(":", 1)[0] == key  # what an earlier session wrote counts
        check_disk(folder.work, sum(parts.values()), what, already=folder_bytes(folder.work) if resumable else 0)
        if source_digest is not None:
            key = f"{key}:{source_digest()}"
        if state.get("key") != key:
            folder.reset()
            state = {"key": key}
        try:
            _write(folder, state, documents, info, max_words=max_words, input_bytes=input_bytes, progress=progress,
                   label=label)
        except CorpusError:
            shutil.rmtree(folder.work, ignore_errors=True)  # the source is at fault: nothing worth resuming
            raise
        folder.finish(keep=STORE_FILES)
    return PassageStore(final)


def whole_build_bytes(input_bytes: int, follows: tuple[str, ...] = ()) -> dict[str, int]:
    """Disk bytes a corpus of ``input_bytes`` of text needs, by part: its passage store, and the indexes built
    from it next (the BM25 build at its peak, with its chunk files; dense embeddings as float16 vectors of 384
    dimensions, the embedded encoder's), so a build that cannot finish is refused before its first stage."""
    parts = {"passage store": int(input_bytes * 1.15) + (64 << 20)}
    words = input_bytes // 6  # about six bytes a word, space included
    passages = max(1, words // 80)
    if "bm25" in follows:
        parts["BM25 index"] = int((words + 4 * passages) * 0.8) * 18 + 12 * passages + (64 << 20)
    if "dense" in follows:
        parts["dense embeddings"] = passages * 384 * 2 + (16 << 20)
    return parts


def _prune_other_builds(final: Path) -> None:
    """Interrupted builds of earlier contents of the same source (same name prefix, other key) are dead."""
    prune_abandoned_builds(final, final.name.rsplit("-", 1)[0] + "-")


def _rehash(path: Path, size: int) -> Any:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as stream:
        left = size
        while left > 0:
            block = stream.read(min(READ_BLOCK, left))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest


def _write(folder: BuildFolder, state: dict[str, Any], documents: Callable[[], Iterator[Document]],
           info: dict[str, Any], *, max_words: int, input_bytes: int | None, progress: Progress | None,
           label: str) -> None:
    started = time.perf_counter()
    work = folder.work
    consumed, rows, nbytes = int(state.get("docs", 0)), int(state.get("rows", 0)), int(state.get("bytes", 0))
    skipped = int(state.get("skipped", 0))
    earlier = float(state.get("seconds", 0.0))  # the time of earlier sessions, up to their last checkpoint
    sessions = int(state.get("sessions", 0)) + 1
    resumed = consumed > 0
    if progress:
        progress(f"{'resuming' if resumed else 'writing'} the passage store of {label or info.get('name')}"
                 + (f" after {consumed:,} documents" if resumed else ""))
    appender = _Appender(work, {"docs": consumed, "rows": rows, "bytes": nbytes})
    digest = _rehash(work / RECORDS_FILE, nbytes)
    docs_iter = documents()
    if consumed:
        for _ in islice(docs_iter, consumed):  # parsed again, not stored again
            pass
    bar = progress_bar(input_bytes, f"storing {label or info.get('name')}", "B", enabled=progress is not None,
                       initial=min(nbytes, input_bytes or nbytes))
    prev_title, prev_title_hash = None, 0
    since_flush = since_checkpoint = 0
    enc = str.encode
    try:
        for doc in docs_iter:
            if FIELD in doc.id or END in doc.id or FIELD in doc.title:
                raise CorpusError("an id or title holds the control character \\x1f or \\x1e, which the passage "
                                  "store uses as a separator", where=doc.where or str(info.get("source")),
                                  fix="remove control characters from ids and titles")
            pieces, counts, _ = split_text_counted(doc.text, max_words)
            if doc.title != prev_title:
                prev_title, prev_title_hash = doc.title, _title_hash(doc.title)
            if not pieces:
                skipped += 1
                appender._docs.extend((id_hash(doc.id), prev_title_hash, rows, 0))
            else:
                ids = piece_ids(doc.id, len(pieces))
                first_hash = 0
                for pid, piece, count in zip(ids, pieces, counts, strict=True):
                    record = enc(f"{pid}{FIELD}{doc.title}{FIELD}{piece}{END}")
                    appender._records.append(record)
                    appender._offsets.append(nbytes)
                    appender._words.append(count)
                    h = id_hash(pid)
                    appender._row_hashes.append(h)
                    first_hash = first_hash or h
                    digest.update(record)
                    nbytes += len(record)
                    bar.update(len(record))
                doc_hash = first_hash if len(ids) == 1 else id_hash(doc.id)
                appender._docs.extend((doc_hash, prev_title_hash, rows, len(ids)))
                rows += len(ids)
            consumed += 1
            since_flush += 1
            since_checkpoint += 1
            if since_flush >= FLUSH_DOCS:
                appender.flush()
                since_flush = 0
                if since_checkpoint >= CHECKPOINT_DOCS:
                    folder.save_checkpoint({"key": state["key"], "docs": consumed, "rows": rows, "bytes": nbytes,
                                            "skipped": skipped, "sessions": sessions,
                                            "seconds": earlier + time.perf_counter() - started})
                    since_checkpoint = 0
    finally:
        appender.close()
        bar.close()
    if progress:
        progress(f"stored {rows:,} passages ({human_bytes(nbytes)}); checking ids")
    _finish(work, info, consumed=consumed, rows=rows, nbytes=nbytes, skipped=skipped, digest=digest,
            max_words=max_words, seconds=earlier + time.perf_counter() - started, resumed=resumed,
            documents=documents, sessions=sessions if resumed else 1)


def _where_of(documents: Callable[[], Iterator[Document]], ordinals: set[int]) -> dict[int, str]:
    """The ``where`` of the documents at these positions (read again only when an error needs them)."""
    found: dict[int, str] = {}
    last = max(ordinals)
    for i, doc in enumerate(documents()):
        if i in ordinals:
            found[i] = doc.where
        if i >= last:
            break
    return found


def _finish(work: Path, info: dict[str, Any], *, consumed: int, rows: int, nbytes: int, skipped: int, digest: Any,
            max_words: int, seconds: float, resumed: bool, documents: Callable[[], Iterator[Document]],
            sessions: int = 1) -> None:
    source = str(info.get("source", ""))
    if rows == 0:
        raise CorpusError("the corpus has no text to search", where=source, fix="add passages with some text")
    docs = np.fromfile(work / DOCS_FILE, dtype=np.uint64).reshape(-1, 4)
    row_hashes = np.fromfile(work / ROW_HASH_FILE, dtype=np.uint64)
    offsets = np.fromfile(work / OFFSETS_FILE, dtype=np.int64)
    words = np.fromfile(work / WORDS_FILE, dtype=np.int32)
    assert len(docs) == consumed and len(row_hashes) == rows == len(offsets) == len(words)
    records_path = work / RECORDS_FILE
    dropped_docs, named = _repeated_documents(docs, records_path, offsets, nbytes, documents, source)
    documents_count = consumed - len(dropped_docs)
    if dropped_docs:
        keep = np.ones(rows, dtype=bool)
        for d in dropped_docs:
            first, count = int(docs[d, 2]), int(docs[d, 3])
            keep[first:first + count] = False
        skipped -= sum(1 for d in dropped_docs if int(docs[d, 3]) == 0)
        if named:
            _warn_repeated_ids(named, documents)
        offsets, nbytes, digest = _compact(records_path, offsets, nbytes, keep)
        row_hashes, words = row_hashes[keep], words[keep]
        kept_docs = np.ones(len(docs), dtype=bool)
        kept_docs[list(dropped_docs)] = False
        docs = docs[kept_docs]
        rows = int(keep.sum())
    order = np.argsort(row_hashes, kind="stable")
    sorted_hashes = row_hashes[order]
    _refuse_repeated_passage_ids(sorted_hashes, order, records_path, offsets, nbytes, source)
    sorted_hashes.tofile(work / ID_HASH_FILE)
    order.astype(np.int64).tofile(work / ID_ROWS_FILE)
    np.append(offsets, np.int64(nbytes)).astype(np.int64).tofile(work / OFFSETS_FILE)
    words.astype(np.int32).tofile(work / WORDS_FILE)
    multi = docs[:, 3] > 1
    titles = int(np.unique(docs[docs[:, 3] > 0, 1]).size)
    manifest = {
        "version": STORE_VERSION, **info, "documents": documents_count, "skipped": skipped, "passages": rows,
        "pieces": int(docs[multi, 3].sum()), "titles": titles, "record_bytes": nbytes,
        "fingerprint": digest.hexdigest(), "max_words": max_words,
        "words": {"min": int(words.min()), "mean": float(words.mean()), "median": float(np.median(words)),
                  "max": int(words.max()), "total": int(words.sum(dtype=np.int64))},
        "duplicates_dropped": len(dropped_docs), "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "seconds": round(seconds, 2), "resumed": resumed, "sessions": sessions, "peak_rss_bytes": peak_rss_bytes(),
    }
    for name in (ROW_HASH_FILE, DOCS_FILE):
        (work / name).unlink(missing_ok=True)
    write_manifest(work, MANIFEST_FILE, manifest, STORE_FILES)  # last: marks the store complete


def _record_at(records: Any, offsets: np.ndarray, nbytes: int, row: int) -> tuple[str, str, str]:
    end = int(offsets[row + 1]) if row + 1 < len(offsets) else nbytes
    pid, title, text = records[int(offsets[row]):end - 1].decode("utf-8").split(FIELD, 2)
    return pid, title, text


def _warn_repeated_ids(named: dict[str, list[int]], documents: Callable[[], Iterator[Document]]) -> None:
    """Say which explicit ids came more than once (the first five, with where each copy is): a file holding the
    same records twice is usually a mistake, and the passage count would otherwise be a surprise."""
    shown = list(named.items())[:5]
    wheres = _where_of(documents, {d for _, ordinals in shown for d in ordinals})
    listed = "; ".join(f"'{pid}' at {', '.join(wheres.get(d, '?') for d in ordinals)}" for pid, ordinals in shown)
    log.warning("%d passage id(s) appear more than once with the same text, each kept once: %s%s", len(named),
                listed, " ..." if len(named) > 5 else "")


def _repeated_documents(docs: np.ndarray, records_path: Path, offsets: np.ndarray, nbytes: int,
                        documents: Callable[[], Iterator[Document]],
                        source: str) -> tuple[set[int], dict[str, list[int]]]:
    """Documents whose id repeats an earlier one's with the same title and text (to drop), and the explicit
    ids among them with the positions of every copy (paragraphs whose id is their content's hash repeat
    silently: a paragraph shared by several questions is one passage); a repeat with other content is a
    CorpusError naming both places, as passages and gold labels are looked up by id."""
    hashes = docs[:, 0]
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    named: dict[str, list[int]] = {}
    if not len(same):
        return set(), named
    drop: set[int] = set()
    with open(records_path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as records:

        def content(d: int) -> tuple[str, str, str]:
            first, count = int(docs[d, 2]), int(docs[d, 3])
            if count == 0:
                return "", "", ""
            parts = [_record_at(records, offsets, nbytes, r) for r in range(first, first + count)]
            doc_id = parts[0][0] if count == 1 else parts[0][0].rsplit("#", 1)[0]
            return doc_id, " ".join(parts[0][1].split()), " ".join(" ".join(p[2] for p in parts).split())

        for at in same.tolist():
            # the sort is stable, so 'base' came first in the file; a third copy meets the second, which
            # (had it differed) would have stopped the build already
            base, later = int(order[at]), int(order[at + 1])
            a, b = content(base), content(later)
            if a[0] and b[0] and a[0] != b[0]:
                continue  # two different ids whose 64-bit hashes collide
            if (a[1], a[2]) == (b[1], b[2]) and (a[0] or b[0] or docs[base, 1] == docs[later, 1]):
                drop.add(later)
                pid = a[0] or b[0]
                if pid and pid != content_id(a[1], a[2]):
                    copies = named.setdefault(pid, [base])
                    if base not in copies:  # a third copy pairs with the second
                        copies.append(base)
                    copies.append(later)
                continue
            wheres = _where_of(documents, {base, later})
            raise CorpusError(f"id '{a[0] or b[0]}' is used again for a different passage (first at "
                              f"{wheres.get(base, 'an earlier record')})", where=wheres.get(later, source),
                              fix="give every passage its own id")
    return drop, named


def _refuse_repeated_passage_ids(sorted_hashes: np.ndarray, order: np.ndarray, records_path: Path,
                                 offsets: np.ndarray, nbytes: int, source: str) -> None:
    same = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1])
    if not len(same):
        return
    with open(records_path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as records:
        for at in same.tolist():
            a = _record_at(records, offsets, nbytes, int(order[at]))[0]
            b = _record_at(records, offsets, nbytes, int(order[at + 1]))[0]
            if a == b:  # e.g. a document 'a#1' next to a long document 'a' cut into 'a#1', 'a#2'
                raise CorpusError(f"two passages end up with the id '{a}'", where=source,
                                  fix="rename the document whose own id looks like a piece id ('<id>#<n>')")


def _compact(records_path: Path, offsets: np.ndarray, nbytes: int, keep: np.ndarray) -> tuple[np.ndarray, int, Any]:
    """Rewrite the records without the dropped rows; the new offsets, size and fingerprint digest."""
    ends = np.append(offsets[1:], np.int64(nbytes))
    sizes = (ends - offsets)[keep]
    new_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    digest = hashlib.blake2b(digest_size=16)
    tmp = records_path.with_name(records_path.name + ".compact")
    with open(records_path, "rb") as src, open(tmp, "wb") as dst:
        for row in np.flatnonzero(keep).tolist():
            src.seek(int(offsets[row]))
            record = src.read(int(ends[row] - offsets[row]))
            digest.update(record)
            dst.write(record)
    os.replace(tmp, records_path)
    return new_offsets, int(sizes.sum()), digest
