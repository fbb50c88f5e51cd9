"""Loading a corpus: any supported file or folder (or a named corpus) into passages of at most 100 words.

``load_corpus`` reads everything into a list before it returns, so a file that turns out to be
malformed on line 90,000 raises a :class:`CorpusError` and nothing half-loaded is ever indexed.
The corpus carries a fingerprint (a hash of every passage's id, title and text) that keys the
BM25 index cache: the same passages give the same index, whatever file they came from.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from explorer.errors import CorpusError, ExplorerError, check_text
from explorer.paths import DEMO_CORPUS_DIR
from explorer.retrieval.base import Passage
from explorer.retrieval.formats import FORMATS, open_documents
from explorer.retrieval.splitter import MAX_WORDS, Document, content_id, split_document

log = logging.getLogger("explorer.corpus")

Progress = Callable[[str], None]
NAMED_CORPORA = ("demo", "benchmark")
DEMO_PASSAGES = DEMO_CORPUS_DIR / "passages.jsonl"


@dataclass
class Corpus:
    """Passages ready to index, with where they came from and how they were read."""

    name: str
    passages: list[Passage]
    fingerprint: str
    source: Path
    format: str
    documents: int
    skipped: int = 0  # documents with no words, which give no passage
    _by_id: dict[str, Passage] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id = {p.id: p for p in self.passages}

    def passage(self, passage_id: str) -> Passage | None:
        return self._by_id.get(passage_id)

    def __len__(self) -> int:
        return len(self.passages)

    def word_stats(self) -> dict[str, float]:
        """Words per passage: min, mean, median, max (what ``corpus info`` reports)."""
        counts = sorted(len(p.text.split()) for p in self.passages)
        if not counts:
            return {"min": 0, "mean": 0.0, "median": 0.0, "max": 0}
        mid = len(counts) // 2
        median = counts[mid] if len(counts) % 2 else (counts[mid - 1] + counts[mid]) / 2
        return {"min": counts[0], "mean": sum(counts) / len(counts), "median": median, "max": counts[-1]}


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


def corpus_from_documents(name: str, docs: list[Document], *, source: Path, fmt: str,
                          max_words: int = MAX_WORDS) -> Corpus:
    passages: list[Passage] = []
    skipped = 0
    for doc in docs:
        pieces = split_document(doc, max_words)
        if not pieces:
            skipped += 1
        passages.extend(pieces)
    ids: set[str] = set()
    for passage in passages:
        if passage.id in ids:  # e.g. a document 'a#1' next to a long document 'a' cut into 'a#1', 'a#2'
            raise CorpusError(f"two passages end up with the id '{passage.id}'", where=str(source),
                              fix="rename the document whose own id looks like a piece id ('<id>#<n>')")
        ids.add(passage.id)
    if not passages:
        raise CorpusError("the corpus has no text to search", where=str(source), fix="add passages with some text")
    return Corpus(name=name, passages=passages, fingerprint=fingerprint_passages(passages), source=source,
                  format=fmt, documents=len(docs), skipped=skipped)


def resolve_corpus_path(path_or_name: str | Path) -> tuple[str, Path]:
    """(name, path) for 'demo', 'benchmark' (built on demand) or a path."""
    spec = str(path_or_name)
    if spec == "demo":
        return "demo", DEMO_PASSAGES
    if spec == "benchmark":
        from explorer.retrieval.benchmark import ensure_benchmark_corpus

        return "benchmark", ensure_benchmark_corpus().corpus_path
    path = Path(spec).expanduser()
    if path.is_symlink() and not path.exists():
        from explorer.outputs import missing_reason

        raise CorpusError(f"the corpus path {missing_reason(path)}", where=str(path),
                          fix="correct or remove the link, or give the corpus file itself")
    if not path.exists():
        raise CorpusError(f"no corpus named '{spec}' and no such file or folder", where="corpus",
                          fix=f"use one of {', '.join(NAMED_CORPORA)}, or the path of a corpus file or folder "
                              f"({', '.join(FORMATS)})")
    return (path.name if path.is_dir() else path.name.split(".")[0]) or str(path), path.resolve()


def load_corpus(path_or_name: str | Path, fmt: str | None = None, *, max_words: int = MAX_WORDS,
                show_progress: bool = False) -> Corpus:
    """Read a corpus completely and cut it into passages of at most ``max_words`` words."""
    name, path = resolve_corpus_path(path_or_name)
    detected, docs = open_documents(path, fmt)
    documents = collect_documents(docs, show_progress=show_progress, desc=f"reading {path.name}")
    return corpus_from_documents(name, documents, source=path, fmt=detected, max_words=max_words)


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
