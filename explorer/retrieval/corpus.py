"""A corpus: passages ready to index in a store on disk, and documents held in memory made into one.

:mod:`explorer.retrieval.corpora` loads a corpus from a file, a folder or a name; the pooled corpora
(:mod:`explorer.retrieval.benchmark`, :mod:`explorer.retrieval.pool`) gather their documents in memory
first. Both end in a :class:`Corpus` over a passage store, made here, below both, so that loading a
named corpus can build the pooled benchmark without the two modules importing each other.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError, ExplorerError, check_text
from explorer.paths import cache_dir
from explorer.retrieval.base import Passage
from explorer.retrieval.building import slug
from explorer.retrieval.passage_store import STORE_VERSION, PassageStore, build_store
from explorer.retrieval.splitter import MAX_WORDS, Document, content_id

log = logging.getLogger("explorer.corpus")

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


def store_key(payload: dict[str, Any]) -> str:
    """The short hash a passage store's folder is named by, over what it was built from."""
    return hashlib.blake2b(json.dumps(payload, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def corpus_of(name: str, store: PassageStore, source: Path) -> Corpus:
    """The corpus over a built store, with the counts its manifest recorded."""
    m = store.manifest
    return Corpus(name=name, store=store, source=source, format=str(m.get("format") or ""),
                  documents=int(m.get("documents", 0)), skipped=int(m.get("skipped", 0)))


def corpus_from_documents(name: str, docs: list[Document], *, source: Path, fmt: str,
                          max_words: int = MAX_WORDS) -> Corpus:
    """A corpus of documents already in memory (a pooled benchmark, a user's pool), stored like any other."""
    digest = hashlib.blake2b(digest_size=12)
    for doc in docs:
        digest.update(f"{doc.id}\x1f{doc.title}\x1f{doc.text}\x1e".encode())
    key = store_key({"documents": digest.hexdigest(), "count": len(docs), "format": fmt, "max_words": max_words,
                "version": STORE_VERSION})
    folder = cache_dir("passages") / f"{slug(name)}-mem-{key}"
    info = {"name": name, "source": str(source), "format": fmt, "key": key}
    store = build_store(folder, key, lambda: checked(docs), info, max_words=max_words, label=name)
    return corpus_of(name, store, source)


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
